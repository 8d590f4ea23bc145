"""Operators: argument checks with the real status codes, the two-phase aclnn API (`ops.aclnn`),
kernels per tilingKey and NumPy goldens; plus friendly calls that allocate outputs.
"""
from tiling.status import (AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError,  # noqa: F401
                           TilingError)

from . import aclnn  # noqa: F401
from .permute import moe_token_permute  # noqa: F401
from .permute_grad import moe_token_permute_grad  # noqa: F401
from .permute_with_routing_map import moe_token_permute_with_routing_map  # noqa: F401
from .permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad  # noqa: F401
from .unpermute import moe_token_unpermute  # noqa: F401
from .unpermute_grad import moe_token_unpermute_grad  # noqa: F401
from .unpermute_with_routing_map import moe_token_unpermute_with_routing_map  # noqa: F401
from .unpermute_with_routing_map_grad import moe_token_unpermute_with_routing_map_grad  # noqa: F401

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
