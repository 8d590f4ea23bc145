"""Which tier runs a launch: the compiled kernels, or the same stages in the Python interpreter (interpret.py).

* "compiled": every stage compiled by numba (or loaded from its disk cache) before the cores start.
* "interpreted": every stage runs as Python, nothing is compiled; results, counters and estimates are the same.
* "auto" (the default): compiled when every stage of the launch is compiled already (in memory or on disk);
  otherwise, if the launch's GM tensors total at most `INTERPRET_MAX_BYTES`, interpreted now while a background
  process compiles the cold stages into the disk cache (background.py), so the next run, or the next launch of this
  process once that process is done, runs compiled; a larger launch compiles first, as before.

Choose with $ASCEND_SIM_TIER, or for the calls of one thread with `execution_tier(name)`; the RunReport says which
tier ran (`report.tier`).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ._jit import cache_state, stage_signature
from .errors import ConfigError

TIERS = ("auto", "compiled", "interpreted")
"""The execution tiers a launch can run in (see the module docstring); $ASCEND_SIM_TIER or execution_tier() picks."""
INTERPRET_MAX_BYTES = 1 << 20
"""auto interprets a cold launch whose GM tensors total at most this many bytes ($ASCEND_SIM_INTERPRET_MAX_BYTES;
the aclnn workspace not counted). The interpreter runs a kernel 100-3000x slower than its compiled code (the SIMT
and MicroAPI kernels of the 950 are the slowest, about 30 KB of tokens a second), so beyond this, compiling first
(tens of seconds) is the quicker way even on a cold cache."""
HOST_INTERPRET_MAX_BYTES = 16 << 10
"""The same bound for host helpers (ascend_sim._jit.host_jit): element loops, a few microseconds an element in Python
against one or two seconds to compile."""

_CURRENT: ContextVar[str | None] = ContextVar("ascend_sim_tier", default=None)


def _checked(name: str, source: str) -> str:
    if name not in TIERS:
        raise ConfigError(f"{source} = {name!r}: the execution tier is one of {', '.join(TIERS)}")
    return name


@contextmanager
def execution_tier(name: str):
    """Run this thread's launches inside the block in tier `name` ("auto", "compiled" or "interpreted")."""
    token = _CURRENT.set(_checked(name, "execution_tier"))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def resolve(tier: str | None = None) -> str:
    """The tier a launch runs in: `tier` if given, else the enclosing execution_tier block's, else $ASCEND_SIM_TIER,
    else "auto"."""
    if tier is not None:
        return _checked(tier, "tier")
    current = _CURRENT.get()
    if current is not None:
        return current
    return _checked(os.environ.get("ASCEND_SIM_TIER", "auto") or "auto", "ASCEND_SIM_TIER")


def interpret_max_bytes() -> int:
    raw = os.environ.get("ASCEND_SIM_INTERPRET_MAX_BYTES")
    if raw is None or raw == "":
        return INTERPRET_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"ASCEND_SIM_INTERPRET_MAX_BYTES = {raw!r}: a byte count (0 or more) is expected")
    return value


def gm_bytes(args, workspace: np.ndarray | None = None) -> int:
    """Bytes of every array in a launch's arguments (inside tuples too) that does not lie in the aclnn workspace:
    the tensors the call moves (the workspace is mostly the system's fixed 16 MiB, which a kernel does not sweep)."""
    lo = hi = 0
    if workspace is not None and workspace.size:
        lo = workspace.__array_interface__["data"][0]
        hi = lo + workspace.nbytes
    total = 0
    todo = list(args)
    while todo:
        a = todo.pop()
        if isinstance(a, np.ndarray):
            start = a.__array_interface__["data"][0]
            if not lo <= start < hi:
                total += a.nbytes
        elif isinstance(a, tuple):
            todo += a
    return total


def runs_interpreted(calls, nbytes: int, bound: int, tier: str | None = None) -> bool:
    """Whether a launch (or a host helper's call) runs in the interpreter: `calls` are its (dispatcher, args) pairs,
    `nbytes` the bytes of its tensors (gm_bytes), `bound` the most the tier "auto" interprets. In "auto", a call is
    interpreted when it is small enough and some dispatcher is cold (neither in memory nor in the disk cache); the
    cold ones then go to the background compiler."""
    tier = resolve() if tier is None else tier
    if tier != "auto":
        return tier == "interpreted"
    if nbytes > bound:          # before the cold test: that one reads the cache index from disk
        return False
    cold, seen = [], set()
    for dispatcher, args in calls:
        sig = stage_signature(dispatcher, args)
        if (dispatcher, sig) not in seen:
            seen.add((dispatcher, sig))
            if cache_state(dispatcher, sig) == "cold":
                cold.append((dispatcher, sig))
    if cold:
        from . import background  # imported when first needed: most processes never start a child
        background.submit(cold)
    return bool(cold)
