"""The per-chip cost model behind the timeline: how many cycles each AscendC call takes on its pipe.

Every number is a field of `CostModel` so a user can replace it with a measured one
(`tiling.get_soc(name, cost={"hbm_bytes_per_cycle": 900})`, or `ascend-sim profile --cost k=v`).
Where the platform files give a figure it is used; every other figure is an assumption whose
reasoning the README's parameter table states. Durations are integers in AIV clock cycles.

How a call turns into cycles (see timeline.py for how the cycles are placed on the pipes):

* DMA (MTE2 GM->UB, MTE3 UB->GM): the pipe is busy `dma_issue_cycles + rows * burst_cycles +
  ceil(bytes / rate)`, bytes counted in whole 32-byte blocks per row (a burst moves whole blocks);
  the data has landed `latency` cycles after that, which is what a flag set after the copy waits
  for (the DMA engine is pipelined: the next copy starts while this one is in flight). The per-core rate is
  capped at the core's fair share of the chip's HBM bandwidth (`hbm_bytes_per_cycle / cores
  running`), and the kernel's estimate is never below `all GM bytes / hbm_bytes_per_cycle`.
* Vector (PIPE_V): `vec_issue_cycles + repeats * cycles_per_repeat(call)`; a repeat is 256 bytes
  of the widest operand (64 fp32 or 128 fp16 lanes), so fp32 work takes twice the repeats of
  fp16 work per element. UB->UB DataCopy is a PIPE_V instruction too.
* Scalar (PIPE_S): every call costs `scalar_call_cycles` to issue, in program order; a
  LocalTensor GetValue/SetValue adds `scalar_ub_cycles`; a GlobalTensor GetValue hits or misses a
  direct-mapped data cache of `dcache_lines` lines of `dcache_line_bytes`.
* Syncs: a SetFlag raises its flag `event_cycles` after the source pipe's earlier work; a
  PipeBarrier costs `barrier_cycles` on its pipe; SyncAll aligns every core to the slowest and
  adds `sync_all_cycles`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from .errors import ConfigError
from .layout import DCACHE_MAX_LINES, RATE_SCALE


@dataclass(frozen=True)
class CostModel:
    """Cycle costs of one chip (see the module docstring and the README's table for each figure's source).

    Attributes (cycles are AIV clock cycles; rates are bytes per cycle per core unless named otherwise):
        clock_mhz: AIV clock, converts cycles to microseconds.
        mte2_bytes_per_cycle / mte3_bytes_per_cycle: one core's GM read / write rate.
        hbm_bytes_per_cycle: the whole chip's GM bandwidth, shared by the running cores.
        mte2_latency_cycles / mte3_latency_cycles: cycles from a DMA's last byte leaving the pipe to its data
            being usable (what a flag after the copy waits for; the pipe itself moves on).
        dma_issue_cycles: pipe cycles of one DMA instruction before its first byte (descriptor set-up).
        burst_cycles: extra pipe cycles per row (blockCount) of a DMA instruction.
        vec_issue_cycles: fixed cost of one vector instruction.
        vec_cycles_per_repeat: cycles per 256-byte repeat of an elementwise instruction.
        vec_call_cycles_per_repeat: (AscendC call name, cycles per repeat) for instructions that differ.
        scalar_call_cycles: scalar-unit cycles to issue any AscendC call.
        scalar_ub_cycles: extra cycles of a LocalTensor GetValue / SetValue.
        scalar_gm_hit_cycles / scalar_gm_miss_cycles: a GlobalTensor GetValue that hits / misses the data cache.
        scalar_gm_write_cycles: a GlobalTensor SetValue.
        dcache_lines / dcache_line_bytes: the scalar data cache (direct mapped).
        event_cycles: SetFlag -> WaitFlag latency (also the implied events of EnQue/DeQue/Alloc/Free).
        barrier_cycles: PipeBarrier<pipe> cost on that pipe (PIPE_ALL: on every pipe).
        sync_all_cycles: SyncAll() after the slowest core arrives.
        simt_launch_cycles: fixed PIPE_V cycles of one SIMT call (asc_vf_call), before its first warp issues.
        simt_cycles_per_warp_instr: cycles one warp scheduler spends issuing one instruction of a 32-thread warp.
        simt_gm_latency_cycles: cycles a SIMT GM load (or atomic) waits for its data.
    """
    clock_mhz: float = 1800.0
    mte2_bytes_per_cycle: float = 32.0
    mte3_bytes_per_cycle: float = 32.0
    hbm_bytes_per_cycle: float = 768.0
    mte2_latency_cycles: int = 241
    mte3_latency_cycles: int = 96
    dma_issue_cycles: int = 16
    burst_cycles: int = 2
    vec_issue_cycles: int = 8
    vec_cycles_per_repeat: int = 1
    vec_call_cycles_per_repeat: tuple = (("Cast", 2), ("BlockReduceSum", 2), ("WholeReduceSum", 4),
                                         ("GatherMask", 2), ("Sort", 8), ("MrgSort", 4), ("Extract", 2))
    scalar_call_cycles: int = 4
    scalar_ub_cycles: int = 2
    scalar_gm_hit_cycles: int = 4
    scalar_gm_miss_cycles: int = 241
    scalar_gm_write_cycles: int = 8
    dcache_lines: int = 64
    dcache_line_bytes: int = 64
    event_cycles: int = 10
    barrier_cycles: int = 10
    sync_all_cycles: int = 1200
    simt_launch_cycles: int = 64
    simt_cycles_per_warp_instr: int = 1
    simt_gm_latency_cycles: int = 241
    enabled: bool = field(default=True)

    def __post_init__(self):
        check_cost(self)

    def cycles_per_repeat(self, call_name: str) -> int:
        return dict(self.vec_call_cycles_per_repeat).get(call_name, self.vec_cycles_per_repeat)

    def us(self, cycles: float) -> float:
        """Cycles at this clock, in microseconds."""
        return cycles / self.clock_mhz

    def dma_rate_scaled(self, pipe_rate: float, cores_running: int) -> int:
        """A core's DMA rate in bytes per RATE_SCALE cycles: its own rate, or its fair share of the HBM."""
        share = self.hbm_bytes_per_cycle / max(1, cores_running)
        return max(1, int(round(min(pipe_rate, share) * RATE_SCALE)))

    def with_overrides(self, overrides: dict | None) -> "CostModel":
        """A copy with `overrides` ({field: value}) applied; ConfigError names an unknown field."""
        if not overrides:
            return self
        known = {f.name: f for f in fields(self)}
        values = {}
        for name, value in overrides.items():
            if name not in known:
                raise ConfigError(f"unknown cost parameter {name!r}; known: {', '.join(known)}")
            values[name] = value
        return replace(self, **values)


_POSITIVE_FLOATS = ("clock_mhz", "mte2_bytes_per_cycle", "mte3_bytes_per_cycle", "hbm_bytes_per_cycle")
_CYCLES = ("mte2_latency_cycles", "mte3_latency_cycles", "dma_issue_cycles", "burst_cycles", "vec_issue_cycles", "vec_cycles_per_repeat",
           "scalar_call_cycles", "scalar_ub_cycles", "scalar_gm_hit_cycles", "scalar_gm_miss_cycles",
           "scalar_gm_write_cycles", "event_cycles", "barrier_cycles", "sync_all_cycles", "simt_launch_cycles",
           "simt_cycles_per_warp_instr", "simt_gm_latency_cycles")
_MAX_CYCLES = 10 ** 7


def check_cost(cost: CostModel) -> None:
    """ConfigError naming the first field that is not usable (a cost model must give finite, non-negative
    integer cycle counts and positive rates)."""
    for name in _POSITIVE_FLOATS:
        value = getattr(cost, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= 1e6:
            raise ConfigError(f"cost parameter {name} must be a number in (0, 1e6], got {value!r}")
    for name in _CYCLES:
        _cycles(name, getattr(cost, name))
    pairs = cost.vec_call_cycles_per_repeat
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                               for p in pairs):
        raise ConfigError("cost parameter vec_call_cycles_per_repeat must be a tuple of (call name, cycles) pairs, "
                          f"got {pairs!r}")
    for name, cycles in pairs:
        _cycles(f"vec_call_cycles_per_repeat[{name!r}]", cycles)
    lines, line_bytes = cost.dcache_lines, cost.dcache_line_bytes
    if isinstance(lines, bool) or not isinstance(lines, int) or lines not in {2 ** k for k in range(9)}:
        raise ConfigError(f"cost parameter dcache_lines must be a power of two in [1, {DCACHE_MAX_LINES}], "
                          f"got {lines!r}")
    if isinstance(line_bytes, bool) or not isinstance(line_bytes, int) or line_bytes not in {2 ** k for k in range(3, 13)}:
        raise ConfigError(f"cost parameter dcache_line_bytes must be a power of two in [8, 4096], got {line_bytes!r}")
    if not isinstance(cost.enabled, bool):
        raise ConfigError(f"cost parameter enabled must be True or False, got {cost.enabled!r}")


def _cycles(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_CYCLES:
        raise ConfigError(f"cost parameter {name} must be a whole number of cycles in [0, {_MAX_CYCLES}], "
                          f"got {value!r}")


def parse_override(text: str) -> tuple[str, object]:
    """`name=value` from the command line as (name, value) with the field's type; ConfigError if malformed."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    known = {f.name: f for f in fields(CostModel)}
    if not sep:
        raise ConfigError(f"--cost takes name=value (e.g. hbm_bytes_per_cycle=1536), got {text!r}")
    if name not in known:
        raise ConfigError(f"unknown cost parameter {name!r}; known: {', '.join(known)}")
    kind = type(getattr(CostModel(), name))
    try:
        if kind is bool:
            if raw.strip().lower() not in ("0", "1", "true", "false"):
                raise ValueError
            return name, raw.strip().lower() in ("1", "true")
        if kind is tuple:
            pairs = []
            for item in filter(None, (p.strip() for p in raw.split(","))):
                call, _, cycles = item.partition(":")
                pairs.append((call.strip(), int(cycles)))
            return name, tuple(pairs)
        return name, kind(float(raw)) if kind is float else int(raw)
    except ValueError:
        raise ConfigError(f"--cost {name}: cannot read {raw!r} as {kind.__name__}") from None


# Sources (README, "Where the NPU's time goes"; the project's measured_references.md): the A2 / A3 vector
# clock is 1.8 GHz (ops-transformer's cross-platform migration guide; the asc-devkit copy benchmark's cycles over
# its times give 1.79-1.82 GHz), the 950's 1.65 GHz (same guide; the benchmark gives about 1.63). HBM: 910B / 910_93
# keep 24 x the ini's ddr_rate 32 B/cycle = 768 B/cycle, 1.38 TB/s at 1.8 GHz, beside the 1.40 TB/s the copy
# benchmark achieves on A2 / A3; the 950 takes the 1.60 TB/s that benchmark achieves over its 64 AIV, at 1.65 GHz.
# DMA per-core rates and latencies are the 910B's on every chip.
ASCEND950_CLOCK_MHZ = 1650.0
ASCEND950_ACHIEVED_HBM_BYTES_PER_S = 1.60e12
STOCK_COSTS = {
    "ascend910b": CostModel(),
    "ascend910_93": CostModel(),
    "ascend950": CostModel(clock_mhz=ASCEND950_CLOCK_MHZ,
                           hbm_bytes_per_cycle=float(round(ASCEND950_ACHIEVED_HBM_BYTES_PER_S / (ASCEND950_CLOCK_MHZ * 1e6)))),
}
