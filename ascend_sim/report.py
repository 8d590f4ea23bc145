"""What a launch did: per core and per pipe counts, the UB plan and wall time."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .estimate import Estimate
from .layout import COUNTER_NAMES


@dataclass(frozen=True)
class CoreReport:
    """Counters of one simulated core. Bytes are GM-side bytes moved by each DMA pipe."""
    block_idx: int
    mte2_bytes: int
    mte2_instr: int
    mte3_bytes: int
    mte3_instr: int
    vec_elem_ops: int
    vec_instr: int
    scalar_gm_reads: int
    scalar_gm_writes: int
    scalar_ub_ops: int
    events: int
    pipe_barriers: int
    sync_all: int
    ub_hwm_bytes: int
    calls: int

    @classmethod
    def from_counters(cls, block_idx: int, counters) -> "CoreReport":
        values = counters.tolist() if isinstance(counters, np.ndarray) else [int(v) for v in counters]
        if len(values) != len(COUNTER_NAMES):
            raise ValueError(f"{len(values)} counters, expected {len(COUNTER_NAMES)}")
        return cls(block_idx, *values)

    @classmethod
    def combined(cls, reports) -> "CoreReport":
        """The counters of several cores (or launches) together: sums, and the highest UB byte written."""
        sums = [0] * len(COUNTER_NAMES)
        for report in reports:
            for i, name in enumerate(COUNTER_NAMES):
                v = getattr(report, name)
                sums[i] = max(sums[i], v) if name == "ub_hwm_bytes" else sums[i] + v
        return cls.from_counters(-1, sums)

    def pipes(self) -> dict[str, dict[str, int]]:
        """The counters grouped by pipe: MTE2, MTE3, V, S, plus sync."""
        return {
            "MTE2": {"bytes": self.mte2_bytes, "instr": self.mte2_instr},
            "MTE3": {"bytes": self.mte3_bytes, "instr": self.mte3_instr},
            "V": {"elem_ops": self.vec_elem_ops, "instr": self.vec_instr},
            "S": {"gm_reads": self.scalar_gm_reads, "gm_writes": self.scalar_gm_writes,
                  "ub_ops": self.scalar_ub_ops},
            "sync": {"events": self.events, "pipe_barriers": self.pipe_barriers, "sync_all": self.sync_all},
        }


def gm_bytes_of(total: CoreReport) -> int:
    """GM bytes behind a report's counters: both DMA directions plus 4 bytes per scalar GM access."""
    return total.mte2_bytes + total.mte3_bytes + (total.scalar_gm_reads + total.scalar_gm_writes) * 4


class deferred:
    """A RunReport field's value made only when it is first read (then kept): a launch hands its per-core
    CoreReports and its Estimate over as deferred(make), so a caller who never reads them does not pay for
    building dozens of objects. Thread-safe: `make` runs once."""
    __slots__ = ("_make", "_value", "_lock")

    def __init__(self, make: Callable[[], object]):
        self._make, self._value, self._lock = make, None, threading.Lock()

    def value(self):
        with self._lock:
            if self._make is not None:
                self._value, self._make = self._make(), None
            return self._value


class _MaybeDeferred:
    """Descriptor of a dataclass field that may hold a `deferred`: reading the field gives its value."""

    def __init__(self, name: str, default):
        self._name, self._default = name, default

    def __get__(self, obj, owner=None):
        if obj is None:
            return self._default
        value = obj.__dict__.get(self._name, self._default)
        return value.value() if isinstance(value, deferred) else value

    def __set__(self, obj, value) -> None:
        # reached only through the dataclass's own __init__ (object.__setattr__): the frozen __setattr__ refuses
        # any later assignment first
        obj.__dict__[self._name] = value


@dataclass(frozen=True)
class RunReport:
    """Everything one kernel launch did, per core; `total` sums the cores.

    `wall_time_s` is the time the cores ran (simulated kernel only); `compile_time_s` is the time spent
    compiling or loading the kernel's stages before that (large on a cold numba cache only).
    `tier` says whether the stages ran compiled or in the interpreter (ascend_sim.tier; same results either way).
    `estimate` is the time the launch would take on the chip (estimate.Estimate: per core and pipe,
    bounding pipe, roofline; `to_csv()` gives msprof's PipeUtilization.csv); `trace` the per-call
    trace when one was asked for (trace.tracing).
    """
    op: str
    kernel: str
    tiling_key: int | None
    block_dim: int
    soc: str
    ub_capacity_bytes: int
    ub_plan: tuple = ()
    ub_plan_bytes: int = 0
    cores: tuple[CoreReport, ...] = ()
    wall_time_s: float = 0.0
    threads: int = 1
    compile_time_s: float = 0.0
    tier: str = "compiled"          # "compiled" or "interpreted" (the stages ran as Python: tier.py)
    extra: dict = field(default_factory=dict)
    estimate: Estimate | None = None
    trace: object = None
    # the upstream version the kernel follows ({"repo", "branch", "commit", "date"}); None for a user's own kernel
    reference: dict | None = None

    @property
    def total(self) -> CoreReport:
        return CoreReport.combined(self.cores)

    def to_csv(self, path=None) -> str:
        """msprof's PipeUtilization.csv of this launch (one row per block); also written to `path` if given."""
        return self.estimate.to_csv(path)

    @property
    def gm_bytes(self) -> int:
        return gm_bytes_of(self.total)

    def __str__(self) -> str:
        t = self.total
        lines = [
            f"{self.op} / {self.kernel}: tilingKey {self.tiling_key}, block_dim {self.block_dim} on {self.soc}",
            *((f"  follows {self.reference['repo']}@{self.reference['branch']} {self.reference['commit'][:12]}",)
              if self.reference else ()),
            f"  UB plan {self.ub_plan_bytes} of {self.ub_capacity_bytes} bytes, highest byte written "
            f"{t.ub_hwm_bytes}",
            f"  MTE2 {t.mte2_bytes:>14,d} B in {t.mte2_instr:,d} copies   "
            f"MTE3 {t.mte3_bytes:>14,d} B in {t.mte3_instr:,d} copies",
            f"  V    {t.vec_elem_ops:>14,d} element-ops in {t.vec_instr:,d} instr   "
            f"S {t.scalar_gm_reads:,d} GM reads, {t.scalar_ub_ops:,d} UB ops",
            f"  sync {t.events:,d} events, {t.pipe_barriers:,d} pipe barriers, {t.sync_all} SyncAll",
            *(f"  {line}" for line in (self.estimate.lines() if self.estimate is not None else ())),
            f"  wall {self.wall_time_s * 1e3:.2f} ms on {self.threads} threads"
            + (f" (+{self.compile_time_s:.1f} s before it to compile or load the kernels)"
               if self.compile_time_s >= 0.05 else ""),
        ]
        return "\n".join(lines)

    def __getstate__(self):
        # pickling / copying sees the values, not the functions that make them
        return {name: getattr(self, name) for name in self.__dict__}


# after the dataclass has read the defaults: `cores` and `estimate` may be given deferred
RunReport.cores = _MaybeDeferred("cores", ())
RunReport.estimate = _MaybeDeferred("estimate", None)
