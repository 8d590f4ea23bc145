"""The per-chip cost model behind the timeline: how many cycles each AscendC call takes on its pipe.

Every number is a field of `CostModel` so a user can replace it with a measured one
(`tiling.get_soc(name, cost={"hbm_bytes_per_cycle": 900})`, or `ascend-sim profile --cost k=v`).
Where the platform files give a figure it is used; every other figure is an assumption whose
reasoning the parameter table of docs/machine-model/cost-model.md states. Durations are integers in AIV clock cycles.

How a call turns into cycles (see timeline.py for how the cycles are placed on the pipes):

* DMA (MTE2 GM->UB, MTE3 UB->GM): the pipe is busy `dma_issue_cycles + ceil(rows * burst_cycles) +
  ceil(bytes / rate)`, bytes counted in whole 32-byte blocks per row (a burst moves whole blocks);
  the data has landed `latency` cycles after that, which is what a flag set after the copy waits
  for (the DMA engine is pipelined: the next copy starts while this one is in flight). The per-core rate is
  capped at the core's fair share of the chip's HBM bandwidth (`hbm_bytes_per_cycle / cores
  running`), and the kernel's estimate is never below its HBM bytes at `hbm_bytes_per_cycle` plus its L2
  hits at `l2_bytes_per_cycle`.
* L2: a GM -> UB read of bytes this core read earlier in the same launch, and still in its share of the
  chip's L2 (`l2_bytes / cores running`, lines of `l2_line_bytes`, direct mapped), moves at the core's L2 rate
  (`mte2_l2_bytes_per_cycle`, capped at its share of `l2_bytes_per_cycle`). Each core sees only its own reads,
  so a launch's hits do not depend on how the host threads interleave the cores.
* Same-address contention: a GM -> UB copy's HBM bytes are logged per core under (512-byte region of its first
  byte, window of `same_address_window_cycles` its start falls in); after the launch, the bytes other cores than
  a region's main reader read in the same window cost `same_address_bytes_per_cycle` on top (0: off).
* Launch: every kernel launch adds `launch_cycles` once (the chip's start-up and end of a task).
* Vector (PIPE_V): `vec_issue_cycles + ceil(repeats * cycles_per_repeat(call) / vec_issue_width)`; a repeat is 256 bytes
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
    """Cycle costs of one chip (see the module docstring and docs/machine-model/cost-model.md for each figure's source).

    Attributes (cycles are AIV clock cycles; rates are bytes per cycle per core unless named otherwise):
        clock_mhz: AIV clock, converts cycles to microseconds.
        mte2_bytes_per_cycle / mte3_bytes_per_cycle: one core's GM read / write rate.
        hbm_bytes_per_cycle: the whole chip's GM bandwidth, shared by the running cores.
        mte2_latency_cycles / mte3_latency_cycles: cycles from a DMA's last byte leaving the pipe to its data
            being usable (what a flag after the copy waits for; the pipe itself moves on).
        dma_issue_cycles: pipe cycles of one DMA instruction before its first byte (descriptor set-up).
        burst_cycles: extra pipe cycles per row (blockCount) of a DMA instruction (a fraction: a DMA's rows
            together cost ceil(rows * burst_cycles)).
        l2_bytes: the chip's L2 capacity; each running core keeps its share (0: no L2).
        l2_line_bytes: L2 line size (a power of two, 128..1024: a line's 32-byte blocks fit one 32-bit mask): hits are
            found line by line.
        l2_bytes_per_cycle: the whole chip's L2 read bandwidth, shared by the running cores.
        mte2_l2_bytes_per_cycle: one core's GM -> UB rate for bytes that hit in L2.
        launch_cycles: fixed cycles of one kernel launch, added once to its estimate.
        same_address_window_cycles: "at once" for same-address contention: reads of one 512-byte GM region by
            several cores whose DMAs start in the same window of this many cycles contend.
        same_address_bytes_per_cycle: the rate at which the chip serves the contending reads on top of the
            rest (0: no contention modelled).
        vec_issue_cycles: fixed cost of one vector instruction.
        vec_issue_width: 256-byte repeats retired per cycle-per-repeat (2 on a dual-issue vector unit).
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
    dma_issue_cycles: int = 12
    burst_cycles: float = 0.375
    l2_bytes: int = 192 * 1024 * 1024
    l2_line_bytes: int = 512
    l2_bytes_per_cycle: float = 2889.0
    mte2_l2_bytes_per_cycle: float = 110.0
    launch_cycles: int = 2340
    same_address_window_cycles: int = 12288
    same_address_bytes_per_cycle: float = 536.0
    vec_issue_cycles: int = 8
    vec_issue_width: int = 1
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

    def l2_table(self, cores_running: int) -> tuple[int, int]:
        """(lines, line shift) of each core's L2 tag table: its share of the L2 (at most L2_TABLE_WORDS over all
        the running cores, so a launch on few cores does not allocate the whole L2's tags), rounded down to a
        power of two; (0, shift) without an L2."""
        shift = self.l2_line_bytes.bit_length() - 1
        cores = max(1, cores_running)
        lines = min(self.l2_bytes // cores >> shift, L2_TABLE_WORDS // cores)
        return (1 << (lines.bit_length() - 1) if lines > 0 else 0), shift

    def l2_rate_scaled(self, cores_running: int) -> int:
        """A core's rate for L2 hits in bytes per RATE_SCALE cycles: its own, or its share of the L2 bandwidth."""
        share = self.l2_bytes_per_cycle / max(1, cores_running)
        return max(1, int(round(min(self.mte2_l2_bytes_per_cycle, share) * RATE_SCALE)))

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


L2_TABLE_WORDS = 1 << 20      # L2 lines tracked in one launch, over all its cores (two int64 words each: 16 MiB)
_POSITIVE_FLOATS = ("clock_mhz", "mte2_bytes_per_cycle", "mte3_bytes_per_cycle", "hbm_bytes_per_cycle",
                    "l2_bytes_per_cycle", "mte2_l2_bytes_per_cycle")
_CYCLES = ("mte2_latency_cycles", "mte3_latency_cycles", "dma_issue_cycles", "vec_issue_cycles",
           "vec_cycles_per_repeat",
           "scalar_call_cycles", "scalar_ub_cycles", "scalar_gm_hit_cycles", "scalar_gm_miss_cycles",
           "scalar_gm_write_cycles", "event_cycles", "barrier_cycles", "sync_all_cycles", "simt_launch_cycles",
           "simt_cycles_per_warp_instr", "simt_gm_latency_cycles", "launch_cycles")
_NON_NEGATIVE_FLOATS = ("same_address_bytes_per_cycle",)
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
    window = cost.same_address_window_cycles
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= _MAX_CYCLES:
        raise ConfigError(f"cost parameter same_address_window_cycles must be a whole number of cycles in [1, "
                          f"{_MAX_CYCLES}], got {window!r}")
    for name in _NON_NEGATIVE_FLOATS:
        value = getattr(cost, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 <= value <= 1e6:
            raise ConfigError(f"cost parameter {name} must be a number in [0, 1e6], got {value!r}")
    burst = cost.burst_cycles
    if isinstance(burst, bool) or not isinstance(burst, (int, float)) or not math.isfinite(burst) \
            or not 0 <= burst <= 1e4:
        raise ConfigError(f"cost parameter burst_cycles must be a number of cycles in [0, 1e4], got {burst!r}")
    width = cost.vec_issue_width
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise ConfigError(f"cost parameter vec_issue_width must be a whole number in [1, 64], got {width!r}")
    l2 = cost.l2_bytes
    if isinstance(l2, bool) or not isinstance(l2, int) or not 0 <= l2 <= 1 << 40:
        raise ConfigError(f"cost parameter l2_bytes must be a whole number of bytes in [0, 2**40], got {l2!r}")
    line = cost.l2_line_bytes
    if isinstance(line, bool) or not isinstance(line, int) or line not in {2 ** k for k in range(7, 11)}:
        raise ConfigError(f"cost parameter l2_line_bytes must be a power of two in [128, 1024], got {line!r}")
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
    if isinstance(line_bytes, bool) or not isinstance(line_bytes, int) \
            or line_bytes not in {2 ** k for k in range(3, 13)}:
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


# Sources (docs/machine-model/cost-model.md; the project's measured_references.md; asc-devkit's
# examples/01_simd_cpp_api/05_best_practices/04_memory_access/data_copy README, "the copy benchmark"):
# * clocks: A2 / A3 1.8 GHz, 950 1.65 GHz (ops-transformer's cross-platform migration guide; the copy benchmark's
#   cycles over its times give 1.79-1.82 and about 1.63 GHz).
# * HBM: 910B / 910_93 keep 24 x the ini's ddr_rate 32 B/cycle = 768 B/cycle, 1.38 TB/s at 1.8 GHz, beside the
#   1.40 TB/s the copy benchmark achieves on A2 / A3; the 950 takes the 1.60 TB/s it achieves over 64 AIV.
# * DMA issue and per-row cost: solved from the benchmark's two small-tile rows (Task Duration x clock / DMAs per
#   core): a 1 x 64 copy (128 B) costs 20.7 cycles on A2 and 39.6 on 950, a 64 x 64 copy 547 and 598, each
#   with its bytes at the core's HBM share; issue + 1 row and issue + 64 rows give the two figures per chip.
#   The other rows of the benchmark (tests/ascend_sim/test_calibration_set.py) are the check.
# * L2: 192 MiB on A2 / A3 (ini l2_size of 910B1/B2; the copy benchmark's README), 128 MiB on 950PR (same
#   README); its peak read bandwidth about 5.2 TB/s on both (same README) = 2889 B/cycle at 1.8 GHz, 3152 at
#   1.65 GHz; per core at most the ini's l2_read_rate, 110 B/cycle. Lines: 512 B on A2 / A3 and 128 B on 950,
#   the alignments the README recommends for full-rate copies (*assumed* to be the line size).
# * launch: the smallest A3 vector kernels take 1.3-1.7 us (Cast: 1.34 us over 7,070 calls, msModeling's
#   dsv3_compute_ops.csv): 1.3 us is the floor of a launch, 2340 cycles at 1.8 GHz; the 950 *assumes* the
#   same 1.3 us (2145 cycles at 1.65 GHz) for want of a measurement.
# * vector: the 950's fp16 rate per AIV and cycle is twice the A2's (54 TFLOPS over 64 AIV at 1.65 GHz beside
#   23.5 over 48 at 1.8 GHz; Add / Mul dual issue, cann-samples rms_norm_quant_story): vec_issue_width 2.
ASCEND950_CLOCK_MHZ = 1650.0
ASCEND950_ACHIEVED_HBM_BYTES_PER_S = 1.60e12
L2_PEAK_BYTES_PER_S = 5.2e12
LAUNCH_FLOOR_US = 1.3
_A2 = CostModel()
STOCK_COSTS = {
    "ascend910b": _A2,
    "ascend910_93": _A2,
    "ascend950": CostModel(clock_mhz=ASCEND950_CLOCK_MHZ,
                           hbm_bytes_per_cycle=float(round(ASCEND950_ACHIEVED_HBM_BYTES_PER_S
                                                           / (ASCEND950_CLOCK_MHZ * 1e6))),
                           dma_issue_cycles=30, burst_cycles=0.4,
                           l2_bytes=128 * 1024 * 1024, l2_line_bytes=128,
                           l2_bytes_per_cycle=float(round(L2_PEAK_BYTES_PER_S / (ASCEND950_CLOCK_MHZ * 1e6))),
                           launch_cycles=round(LAUNCH_FLOOR_US * ASCEND950_CLOCK_MHZ), vec_issue_width=2,
                           same_address_bytes_per_cycle=0.0),
}
