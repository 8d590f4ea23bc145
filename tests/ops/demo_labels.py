"""The demo cases' labels per chip profile, built once per process.

The checked-mode and estimate sweeps are parametrised over every demo case; building their ids by rebuilding
the demo case list for each parameter cost 128 builds per file and per xdist worker (about 20 s of collection
each, before any test ran)."""
from __future__ import annotations

import functools

from ops.cli import demo_cases
from tiling import get_soc


@functools.lru_cache(maxsize=None)
def demo_labels(soc: str) -> tuple[str, ...]:
    """'<op>-<label>' of each demo case on `soc`, in demo order (the values are left zero: only names are read)."""
    return tuple(f"{case.op}-{case.label}" for case in demo_cases(get_soc(soc), values=False))


def demo_params(socs) -> tuple[list[tuple[str, int]], list[str]]:
    """(the (soc, index) pairs of every demo case on `socs`, their readable ids '<soc>-<op>-<label>')."""
    cases = [(soc, k) for soc in socs for k in range(len(demo_labels(soc)))]
    return cases, [f"{soc}-{demo_labels(soc)[k]}" for soc, k in cases]
