"""Pipe occupancy of traced launches: the busy fraction of each pipe of each traced core per time bin, and its
plot (`ascend-sim profile --plot`).

A pipe that is busy 12 % of the time in thousands of short calls is drawn as a strip 12 % dark, not as a
solid bar: each bin shows the share of its time the pipe spent inside calls, and each strip's label gives
the pipe's utilisation over the whole span. Launches follow each other in time, each lasting its estimate.
The S strip shows the scalar calls the trace records (GetValue / SetValue and the like), not the cycles the
scalar unit spends issuing every call, which the timeline charges to S as well.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError
from .layout import CALL_ALLOC_TENSOR, CALL_DEQUE, CALL_PIPE_BARRIER, CALL_WAIT_FLAG, PIPE_NAMES

DEFAULT_BINS = 400
# Rows of these calls span the time their pipe waited (for a flag, a queue event, its own earlier work), not
# work: the timeline does not count them as busy either.
_WAITING_CALLS = np.array([CALL_WAIT_FLAG, CALL_DEQUE, CALL_ALLOC_TENSOR, CALL_PIPE_BARRIER])


@dataclass(frozen=True)
class Occupancy:
    """Binned busy fractions of the traced cores.

    Busy means inside a call that works (a copy, a vector instruction, a scalar access); the spans of WaitFlag,
    DeQue, AllocTensor and PipeBarrier are waiting and count as idle, as in the timeline's busy counters.

    Attributes:
        edges_us: bin edges in microseconds of estimated time, shape (bins + 1,), from 0 to the launches' total.
        cores: the traced block indices, in the order of the first axis of `busy`.
        busy: fraction of each bin's time a pipe was inside a call, shape (cores, 4 pipes in PIPE_NAMES order,
            bins), float64 in [0, 1].
        utilisation: each core's and pipe's busy share over the whole span, shape (cores, 4), in [0, 1].
    """
    edges_us: np.ndarray
    cores: tuple[int, ...]
    busy: np.ndarray
    utilisation: np.ndarray


def _busy_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time spent inside the intervals [starts, ends) before each time in `t` (intervals sorted by start and not
    overlapping, as one pipe's calls are: a pipe starts an instruction after the last one ended)."""
    done = np.concatenate(([0.0], np.cumsum(ends - starts)))
    k = np.searchsorted(starts, t, side="right")          # intervals that started by t
    unfinished = np.where(k > 0, np.maximum(ends[np.maximum(k - 1, 0)] - t, 0.0), 0.0)
    return done[k] - unfinished


def occupancy(runs, bins: int = DEFAULT_BINS) -> Occupancy:
    """The Occupancy of the traced `runs` (RunReports with a trace, in launch order) over `bins` time bins."""
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ConfigError(f"bins must be a whole number >= 1, got {bins!r}", setting="bins")
    traced = [r for r in runs if r.trace is not None]
    cores = tuple(sorted({c.block_idx for r in traced for c in r.trace.cores}))
    total = sum(r.estimate.time_us for r in traced)
    edges = np.linspace(0.0, total if total > 0 else 1.0, bins + 1)
    busy_time = np.zeros((len(cores), len(PIPE_NAMES), bins + 1))
    offset = 0.0
    for run in traced:
        to_us = 1.0 / run.estimate.cost.clock_mhz
        # this run's share of each edge: the edges inside its span, relative to its start
        local = np.clip(edges - offset, 0.0, run.estimate.time_us)
        for ct in run.trace.cores:
            i = cores.index(ct.block_idx)
            work = ct.rows[~np.isin(ct.rows[:, 1], _WAITING_CALLS)]
            for pipe in range(len(PIPE_NAMES)):
                sel = work[work[:, 2] == pipe]
                if not len(sel):
                    continue
                order = np.argsort(sel[:, 3], kind="stable")
                starts = sel[order, 3] * to_us
                ends = np.maximum(sel[order, 4], sel[order, 3]) * to_us
                busy_time[i, pipe] += _busy_before(starts, ends, local)
        offset += run.estimate.time_us
    width = np.diff(edges)
    busy = np.clip(np.diff(busy_time, axis=2) / width, 0.0, 1.0)
    util = np.clip(busy_time[:, :, -1] / (total if total > 0 else 1.0), 0.0, 1.0)
    return Occupancy(edges, cores, busy, util)


def plot_occupancy(runs, path, bins: int = DEFAULT_BINS) -> Occupancy:
    """Draw the Occupancy of `runs` to `path` (PNG): one heat strip per traced core and pipe, darker where the pipe
    was busy more of the bin, labelled with the pipe's utilisation. Needs matplotlib (pip install
    'ascend-sim[plot]'). Returns what it drew."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'ascend-sim[plot]' (or pip install matplotlib)",
                          setting="plot") from None
    occ = occupancy(runs, bins)
    strips = occ.busy.reshape(-1, occ.busy.shape[2]) if occ.cores else np.zeros((1, bins))
    labels = [f"core {b} {pipe} {occ.utilisation[i, p]:.0%}" for i, b in enumerate(occ.cores)
              for p, pipe in enumerate(PIPE_NAMES)] or ["(no traced core)"]
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.28 * len(labels)))
    image = ax.imshow(strips, aspect="auto", interpolation="nearest", cmap="Greys", vmin=0.0, vmax=1.0,
                      extent=(occ.edges_us[0], occ.edges_us[-1], len(labels), 0))
    ax.set_yticks([k + 0.5 for k in range(len(labels))], labels, fontsize=8)
    for k in range(len(PIPE_NAMES), len(labels), len(PIPE_NAMES)):      # a rule between cores
        ax.axhline(k, color="tab:red", linewidth=0.8)
    ax.set_xlabel("estimated time (us)")
    ax.set_title(f"pipe busy fraction per {occ.edges_us[1] - occ.edges_us[0]:.3g} us bin "
                 "(label: utilisation over the whole span)", fontsize=9)
    fig.colorbar(image, ax=ax, label="busy fraction", fraction=0.03, pad=0.01)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return occ
