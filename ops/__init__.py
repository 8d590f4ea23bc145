"""Operators: argument checks with the real status codes, the two-phase aclnn API (`ops.aclnn`),
kernels per tilingKey and NumPy goldens; plus friendly calls that allocate outputs.

`import ops` loads no operator: each friendly call (and `ops.aclnn`) imports its operator package, with its
kernel modules, on first use (module `__getattr__`, PEP 562), so a process that calls one operator loads and
compiles that operator's kernels only. `from ops import moe_token_permute` works as before.
"""
from importlib import import_module

from tiling.status import AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError, TilingError  # noqa: F401

_LAZY = {
    # public name: (module, attribute or None for the module itself)
    "aclnn": (".aclnn", None),
    "moe_token_permute": (".permute", "moe_token_permute"),
    "moe_token_permute_grad": (".permute_grad", "moe_token_permute_grad"),
    "moe_token_permute_with_routing_map": (".permute_with_routing_map", "moe_token_permute_with_routing_map"),
    "moe_token_permute_with_routing_map_grad": (".permute_with_routing_map_grad",
                                                "moe_token_permute_with_routing_map_grad"),
    "moe_token_unpermute": (".unpermute", "moe_token_unpermute"),
    "moe_token_unpermute_grad": (".unpermute_grad", "moe_token_unpermute_grad"),
    "moe_token_unpermute_with_routing_map": (".unpermute_with_routing_map", "moe_token_unpermute_with_routing_map"),
    "moe_token_unpermute_with_routing_map_grad": (".unpermute_with_routing_map_grad",
                                                  "moe_token_unpermute_with_routing_map_grad"),
}

__all__ = [
    "AclnnError", "ParamNullptrError", "ParamInvalidError", "TilingError", "InnerNullptrError", "aclnn",
    "moe_token_permute",
    "moe_token_permute_grad",
    "moe_token_permute_with_routing_map",
    "moe_token_permute_with_routing_map_grad",
    "moe_token_unpermute",
    "moe_token_unpermute_grad",
    "moe_token_unpermute_with_routing_map",
    "moe_token_unpermute_with_routing_map_grad",
]


def __getattr__(name: str):
    """The public operators on first use (then bound here, so later look-ups are plain attributes)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ops' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = import_module(module, __name__)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
