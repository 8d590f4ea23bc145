"""The limits explorer's search (ops.limits.explore) on synthetic tilings whose outcome changes are known:
several changes between the same two powers of two, adjacent changes, changes on and just past a power of
two and at the ends of the range. The expected segments come straight from the list of change points; the
module's brute-force scan must give the same."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ops.limits import brute_force, explore
from tiling.status import AclnnError, TilingError

UB = 196608
_SOC = SimpleNamespace(ub_size=UB)

# outcomes a tiling can give (each one distinct from the others for Outcome.same)
KEY1_FITS = ("key", 1, True)
KEY1_TOO_BIG = ("key", 1, False)
KEY2_FITS = ("key", 2, True)
KEY3_FITS = ("key", 3, True)
FAILS = ("fail", 561002)
OTHER_STATUS = ("fail", 161002)


def _label(outcome) -> str:
    """Outcome.label written out for the synthetic outcomes."""
    if outcome[0] == "fail":
        return f"tiling fails ({outcome[1]})"
    return f"tilingKey {outcome[1]} " + ("fits" if outcome[2] else "DOES NOT FIT")


class StepTiler:
    """tile(value) for a step function: `changes` = [(first value, outcome), ...] ascending, the first one at or
    below the range's low end. Counts the tilings asked for."""

    def __init__(self, changes):
        self.changes = changes
        self.calls = 0

    def outcome(self, value):
        current = None
        for first, outcome in self.changes:
            if value >= first:
                current = outcome
        return current

    def __call__(self, value):
        self.calls += 1
        o = self.outcome(value)
        if o[0] == "fail":
            raise AclnnError(f"synthetic tiling fails at {value}", status=o[1]) if o[1] != 561002 \
                else TilingError(f"synthetic tiling fails at {value}")
        _, key, fits = o
        return SimpleNamespace(tiling_key=key, ub_fits=fits, ub_plan_bytes=UB // 2 if fits else 2 * UB, soc=_SOC)


def _expected(changes, low, high):
    """(first, last, label) of each segment, from the change points alone."""
    inside = [(max(first, low), o) for first, o in changes if first <= high]
    inside = [c for i, c in enumerate(inside) if i + 1 == len(inside) or inside[i + 1][0] > c[0]]
    ends = [first for first, _ in inside[1:]] + [high + 1]
    return [(first, end - 1, _label(o)) for (first, o), end in zip(inside, ends)]


# id: (low, high, change points). Each has two or more changes between the same two neighbouring samples (low,
# the powers of two, high). An outcome that changes and changes back between two samples is not found, by
# design (the module docstring's assumption), so no case has one.
CASES = {
    "two-changes-512-1024": (1, 4096, [(1, KEY1_FITS), (600, KEY2_FITS), (1000, KEY1_TOO_BIG)]),
    "adjacent-changes": (1, 4096, [(1, KEY1_FITS), (700, KEY2_FITS), (701, FAILS)]),
    "three-changes-one-bracket": (1, 4096, [(1, KEY1_FITS), (520, KEY2_FITS), (521, KEY3_FITS), (1023, FAILS)]),
    "on-and-past-a-power": (1, 4096, [(1, KEY1_FITS), (1024, KEY2_FITS), (1025, KEY3_FITS), (1030, FAILS)]),
    "first-value-and-high": (3, 1000, [(1, KEY2_FITS), (4, KEY1_FITS), (513, FAILS), (514, OTHER_STATUS),
                                       (1000, KEY3_FITS)]),
    "between-low-and-high-only": (100, 120, [(1, KEY1_FITS), (105, KEY2_FITS), (110, KEY1_TOO_BIG)]),
    "a-return-in-another-bracket": (1, 4096, [(1, KEY1_FITS), (300, KEY2_FITS), (600, KEY1_FITS), (3000, FAILS),
                                              (3001, KEY2_FITS)]),
    "many-in-the-top-bracket": (1, 1 << 16, [(1, KEY1_FITS)] + [(40000 + 7 * i, ("key", 10 + i, i % 2 == 0))
                                                                for i in range(9)]),
}


@pytest.mark.parametrize("case", CASES)
def test_explore_finds_every_change(case):
    low, high, changes = CASES[case]
    want = _expected(changes, low, high)
    assert len(want) >= 3
    tile = StepTiler(changes)
    got = [(s.first, s.last, s.outcome.label) for s in explore(tile, low, high)]
    assert got == want
    assert tile.calls < high - low + 1 or high - low < 32        # a search, not a scan
    assert [(s.first, s.last, s.outcome.label) for s in brute_force(StepTiler(changes), low, high)] == want


def test_step_tiler_outcomes():
    """The synthetic tiling itself: each value gets the outcome of the last change point at or below it."""
    tile = StepTiler(CASES["adjacent-changes"][2])
    assert [tile.outcome(v) for v in (1, 699, 700, 701, 4096)] == [KEY1_FITS, KEY1_FITS, KEY2_FITS, FAILS, FAILS]
