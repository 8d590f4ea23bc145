"""The operators the command line knows: every package of `ops` that has a `cli` module; its `cli.SPEC` says
the rest.

Adding an operator: give its package a `cli.py` with `SPEC = OpSpec(...)` (see ops.common.cli_spec); nothing
here changes. `SPEC.order` places it in the demo and in the help's operator list.
"""
from __future__ import annotations

import os
import pkgutil
from importlib import import_module

import ops

from ..common.cli_spec import CliError, OpSpec


def _finder_path(finder) -> str:
    """The directory a pkgutil module finder searches (ops' packages are found by a FileFinder, which has one)."""
    return finder.path


def _specs() -> list[tuple[OpSpec, str]]:
    # look for cli.py on disk: find_spec would import the package, and ops.torch needs the optional torch
    found = [info.name for info in pkgutil.iter_modules(ops.__path__)
             if info.ispkg and os.path.exists(os.path.join(_finder_path(info.module_finder), info.name, "cli.py"))]
    specs = [(import_module(f"ops.{name}.cli").SPEC, name) for name in found]
    return sorted(specs, key=lambda spec_name: spec_name[0].order)


_FOUND = _specs()
PACKAGES = tuple(name for _, name in _FOUND)
"""The operator packages, in demo order."""

OPS: dict[str, OpSpec] = {spec.name: spec for spec, _ in _FOUND}
"""{aclnn-style operator name (snake_case): its spec}"""

OP_SPECIFIC_FLAGS = frozenset().union(*(o.flags for o in OPS.values()))
"""Every operator-specific flag (argparse dest): given to an operator that does not read it, it is an error."""


def op_spec(name: str) -> OpSpec:
    key = name.strip().lower()
    if key not in OPS:
        raise CliError(f"unknown operator {name!r}; available: {', '.join(OPS)}")
    return OPS[key]
