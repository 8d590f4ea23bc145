"""Where an operator stops fitting: the UB-limit explorer behind `ascend-sim limits`.

For one operator configuration (dtype, probs, layout flags) and one shape dimension to vary, the
explorer runs only the host tiling and lays out the kernel's buffer plan (no data, no kernel)
and splits the dimension's range into segments with the same outcome: the tilingKey that
runs and whether its plan fits the UB, or the status of a failed tiling. It samples at powers
of two and bisects every change to its exact first value, so a boundary costs a few dozen
tilings. Outcomes are assumed to change only between the samples that bracket a change (a
brute-force scan in the tests checks that on the documented boundaries).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from itertools import pairwise
from typing import Callable

from ascend_sim.errors import ConfigError
from tiling import get_soc
from tiling.common import TilingResult
from tiling.status import AclnnError

VARY = ("hidden", "tokens", "topk", "experts")
DEFAULT_SHAPE = dict(tokens=4096, hidden=7168, experts=256, topk=8)
DEFAULT_MAX = {"hidden": 1 << 16, "tokens": 1 << 20, "topk": 1024, "experts": 8192}


@dataclass(frozen=True)
class Outcome:
    """What tiling one shape gives: `key` and `fits` for a tiling that succeeds (`plan_bytes` of `ub_bytes`),
    or `status` and `error` for one that fails."""
    key: int | None
    fits: bool
    plan_bytes: int = 0
    ub_bytes: int = 0
    status: int | None = None
    error: str = ""

    @property
    def label(self) -> str:
        if self.status == INVALID:
            return "not a valid shape"
        if self.status is not None:
            return f"tiling fails ({self.status})"
        return f"tilingKey {self.key} " + ("fits" if self.fits else "DOES NOT FIT")

    def same(self, other: "Outcome") -> bool:
        return (self.key, self.fits, self.status) == (other.key, other.fits, other.status)


@dataclass(frozen=True)
class Segment:
    """Values first..last (inclusive) of the varied dimension share one outcome (the one at `first`)."""
    first: int
    last: int
    outcome: Outcome


INVALID = 0
"""Outcome.status of a shape the operator's shape rules refuse before any tiling (e.g. topK > experts)."""


def outcome_of(tile: Callable[[int], TilingResult], value: int) -> Outcome:
    """The outcome of `tile(value)` (a TilingResult, or an AclnnError raised; any other error of the
    shape rules, such as the command line's CliError, is an INVALID outcome)."""
    try:
        t = tile(value)
    except AclnnError as e:
        return Outcome(None, False, status=e.status, error=str(e).splitlines()[0])
    except (ValueError, ConfigError) as e:
        return Outcome(None, False, status=INVALID, error=str(e).splitlines()[0])
    return Outcome(t.tiling_key, bool(t.ub_fits), t.ub_plan_bytes, t.soc.ub_size)


def explore(tile: Callable[[int], TilingResult], low: int, high: int) -> list[Segment]:
    """Segments of [low, high] with one outcome each: samples at low, powers of two and high, then every
    bracket whose ends differ is bisected to the first value of the new outcome."""
    if low > high:
        raise ConfigError(f"nothing to explore: the range starts at {low} and ends at {high}")
    cache: dict[int, Outcome] = {}

    def at(v: int) -> Outcome:
        if v not in cache:
            cache[v] = outcome_of(tile, v)
        return cache[v]

    def first_change(lo: int, hi: int) -> int:
        """The first value in (lo, hi] whose outcome differs from at(lo), given that at(hi) does."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if at(mid).same(at(lo)):
                lo = mid
            else:
                hi = mid
        return hi

    samples = sorted({low, high, *(1 << k for k in range(high.bit_length() + 1) if low < 1 << k < high)})
    starts = [low]
    for a, b in pairwise(samples):
        v = a
        while not at(v).same(at(b)):        # the outcome may change more than once before b
            v = first_change(v, b)
            starts.append(v)
    bounds = starts + [high + 1]
    return [Segment(s, e - 1, at(s)) for s, e in pairwise(bounds)]


def brute_force(tile: Callable[[int], TilingResult], low: int, high: int) -> list[Segment]:
    """The same segments from tiling every value (for tests)."""
    segments: list[Segment] = []
    for v in range(low, high + 1):
        o = outcome_of(tile, v)
        if segments and segments[-1].outcome.same(o):
            segments[-1] = Segment(segments[-1].first, v, segments[-1].outcome)
        else:
            segments.append(Segment(v, v, o))
    return segments


def tiler(adapter, base: argparse.Namespace, vary: str, soc) -> Callable[[int], TilingResult]:
    """tile(value): the operator's tiling for the shape in `base` with `vary` set to value, on `soc`."""
    def tile(value: int):
        a = argparse.Namespace(**vars(base))
        setattr(a, vary, value)
        return adapter.tiling(adapter.descs(a), soc)
    return tile


def profiles(soc_name: str | None, ub_size: int | None, aiv_num: int | None) -> list:
    names = (soc_name,) if soc_name else ("ascend910b", "ascend910_93", "ascend950")
    return [get_soc(n, ub_size=ub_size, aiv_num=aiv_num) for n in names]
