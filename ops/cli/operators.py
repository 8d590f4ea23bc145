"""The operators the command line knows: one list of package names; each package's `cli.SPEC` says the rest.

Adding an operator: give its package a `cli.py` with `SPEC = OpSpec(...)` (see ops.common.cli_spec) and
add the package's name here. The order is the demo's order and the order of the help's operator list.
"""
from __future__ import annotations

from importlib import import_module

from ..common.cli_spec import CliError, OpSpec

PACKAGES = (
    "unpermute_with_routing_map_grad",
    "permute",
    "permute_with_routing_map",
    "unpermute_with_routing_map",
    "permute_with_routing_map_grad",
    "unpermute",
    "permute_grad",
    "unpermute_grad",
)

OPS: dict[str, OpSpec] = {spec.name: spec for spec in (import_module(f"ops.{p}.cli").SPEC for p in PACKAGES)}
"""{aclnn-style operator name (snake_case): its spec}"""

OP_SPECIFIC_FLAGS = frozenset().union(*(o.flags for o in OPS.values()))
"""Every operator-specific flag (argparse dest): given to an operator that does not read it, it is an error."""


def op_spec(name: str) -> OpSpec:
    key = name.strip().lower()
    if key not in OPS:
        raise CliError(f"unknown operator {name!r}; available: {', '.join(OPS)}")
    return OPS[key]
