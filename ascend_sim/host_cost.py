"""What the l0 steps a composite aclnn runs on the host (Transpose, Cast, Mul, ZerosLike, Sort, GatherV2,
ViewCopy, ...) would take on the chip, where each is a device kernel of another CANN library.

They are not simulated (their results come from NumPy), so their time is modelled from what they move and
compute, under the same CostModel as the simulated kernels. A step is described by a `HostWork` (bytes and
element counts); `modelled_estimate(work, aiv_num, cost)` turns it into a `ModelledEstimate`, which front ends
print beside the simulated kernels' Estimates. All cycles are AIV clock cycles of `cost.clock_mhz`, all sizes
bytes or elements as named.

The model of one such kernel, spread over `cores` vector cores (see `cores_for`):

* GM: `gm_cycles = max(read_bytes / (cores * r2), write_bytes / (cores * r3), (read + write) / hbm)`, where
  r2 / r3 are a core's MTE2 / MTE3 rates capped at its share of the HBM (`hbm_bytes_per_cycle / cores`):
  the reads and writes of a double-buffered kernel overlap each other but share the HBM. Each DMA row of
  a gather also costs `dma_issue_cycles + burst_cycles` on its core's MTE2.
* Vector: `vec_cycles = vec_passes * ceil(elems * widest_elem_bytes / 256 / cores) * cycles_per_repeat(call)`
  plus `vec_issue_cycles` per pass: an elementwise kernel makes `vec_passes` repeats over its data.
* A sort of n keys: one `Sort` pass over 32-key groups, then `ceil(log4(n / 32))` `MrgSort` passes (4-way
  merges), each of which reads and writes the (key, index) pairs (8 bytes a key) through GM once more.
* The kernel's time is `max(gm_cycles, vec_cycles)` (copy-in, compute and copy-out overlap in a
  double-buffered kernel) plus one pipeline fill: `mte2_latency_cycles + mte3_latency_cycles`; plus the
  launch cost every kernel pays (`CostModel.launch_cycles`).

A composite's steps run one after another on one stream: the whole call's estimate is the sum of its
steps' (simulated and modelled) times, with no overlap between steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .cost import CostModel

MIN_CORE_BYTES = 8192
"""Bytes from which a generic CANN elementwise kernel gives a core its own share (an assumption: their
tilings keep a per-core chunk of a few UB tiles, so a small tensor runs on fewer cores than the chip has)."""

SORT_GROUP_KEYS = 32
"""Keys one AscendC Sort instruction orders (the groups the merge passes start from)."""

SORT_PAIR_BYTES = 8
"""GM bytes of one key in a sort's merge passes: the fp32 key and its uint32 index."""

MERGE_WAYS = 4
"""Lists one MrgSort instruction merges."""

REPEAT_BYTES = 256
"""Bytes one vector repeat processes."""

KINDS = ("move", "fill", "elementwise", "gather", "sort", "index_add")
"""What a HostWork's kernel does: `move` (ViewCopy, Slice, Transpose, MaskedScatter: bytes in, bytes out),
`fill` (ZerosLike: writes only), `elementwise` (Cast, Mul: vector work on every element), `gather` (GatherV2:
one DMA row per index), `sort` (Sort), `index_add` (an InplaceIndexAdd: read, add, write back)."""


@dataclass(frozen=True)
class HostWork:
    """What one host l0 step does on the chip, for its modelled estimate.

    Attributes:
        kind: one of KINDS.
        read_bytes: GM bytes the kernel reads.
        write_bytes: GM bytes the kernel writes.
        elems: elements the kernel computes on (for the vector work; for a sort, the keys).
        elem_bytes: bytes of the widest operand element (sets the repeats per element).
        rows: DMA rows of a gather (one per index), else 0.
        call: the AscendC vector call whose cycles per repeat the work costs ("" = the plain elementwise rate).
        vec_passes: vector instructions per element (0: the kernel only moves data).
    """
    kind: str
    read_bytes: int
    write_bytes: int
    elems: int = 0
    elem_bytes: int = 4
    rows: int = 0
    call: str = ""
    vec_passes: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"HostWork kind must be one of {', '.join(KINDS)}, got {self.kind!r}")


def move(read_bytes: int, write_bytes: int | None = None) -> HostWork:
    """A copy (ViewCopy, Slice, Transpose through the MTEs): `read_bytes` in, `write_bytes` (default the same) out."""
    return HostWork("move", int(read_bytes), int(read_bytes if write_bytes is None else write_bytes))


def fill(write_bytes: int, elems: int, elem_bytes: int) -> HostWork:
    """ZerosLike: a vector Duplicate into UB, copied out (nothing read)."""
    return HostWork("fill", 0, int(write_bytes), int(elems), int(elem_bytes), vec_passes=1)


def elementwise(read_bytes: int, write_bytes: int, elems: int, elem_bytes: int, call: str = "",
                passes: int = 1) -> HostWork:
    """Cast / Mul / Transpose through the vector unit: `passes` vector instructions per element."""
    return HostWork("elementwise", int(read_bytes), int(write_bytes), int(elems), int(elem_bytes), call=call,
                    vec_passes=int(passes))


def gather(rows: int, row_bytes: int, index_bytes: int) -> HostWork:
    """GatherV2 along axis 0: each of `rows` output rows is its own DMA of `row_bytes`; the indices are read too."""
    return HostWork("gather", int(rows * row_bytes + index_bytes), int(rows * row_bytes), rows=int(rows))


def sort(keys: int, key_bytes: int = 4) -> HostWork:
    """A sort of `keys` keys with their indices (values and indices written back)."""
    return HostWork("sort", int(keys * key_bytes), int(keys * (key_bytes + 4)), int(keys), SORT_PAIR_BYTES,
                    call="Sort")


def index_add(rows: int, row_elems: int, elem_bytes: int, index_bytes: int) -> HostWork:
    """var[ids[i]] += src[i] for `rows` rows: reads the source rows, the ids and the addressed var rows, adds,
    writes the var rows back."""
    row_bytes = row_elems * elem_bytes
    return HostWork("index_add", int(2 * rows * row_bytes + index_bytes), int(rows * row_bytes),
                    int(rows * row_elems), int(max(elem_bytes, 4)), rows=int(rows), vec_passes=2)


def launch_cost_cycles(cost: CostModel) -> float:
    """The fixed cost of one kernel launch, cycles (CostModel.launch_cycles: a host step is a kernel on the chip)."""
    return float(cost.launch_cycles)


def cores_for(work: HostWork, aiv_num: int) -> int:
    """Vector cores a generic kernel of `work` runs on: one per MIN_CORE_BYTES of its larger side, at most the
    chip's (at least one)."""
    size = max(work.read_bytes, work.write_bytes, work.elems * work.elem_bytes)
    return max(1, min(aiv_num, math.ceil(size / MIN_CORE_BYTES)))


@dataclass(frozen=True)
class ModelledEstimate:
    """The modelled (not simulated) chip time of one host l0 step; quacks like an Estimate for front ends.

    Attributes:
        cost: the cost model used.
        work: what the step does.
        cores: vector cores the modelled kernel runs on.
        read_cycles / write_cycles: the reads at the cores' MTE2 rate, the writes at their MTE3 rate.
        hbm_cycles: all the bytes at the chip's HBM rate.
        row_cycles: the per-row DMA cost of a gather (0 otherwise).
        vec_cycles / fixed_cycles / launch_cycles: the vector work, the pipeline fill, the launch cost.
    """
    cost: CostModel
    work: HostWork
    cores: int
    read_cycles: float
    write_cycles: float
    hbm_cycles: float
    row_cycles: float
    vec_cycles: float
    fixed_cycles: float
    launch_cycles: float

    modelled = True

    @property
    def gm_cycles(self) -> float:
        """The GM part: the longest of reads, writes and the HBM, plus the rows' DMA cost."""
        return max(self.read_cycles, self.write_cycles, self.hbm_cycles) + self.row_cycles

    @property
    def cycles(self) -> int:
        if not self.cost.enabled:
            return 0
        return math.ceil(max(self.gm_cycles, self.vec_cycles) + self.fixed_cycles + self.launch_cycles)

    @property
    def time_us(self) -> float:
        return self.cost.us(self.cycles)

    @property
    def gm_bytes(self) -> int:
        return self.work.read_bytes + self.work.write_bytes

    @property
    def bound(self) -> str:
        """"HBM", "MTE2" / "MTE3" (a core's DMA rate), "V", or "launch" when the fixed launch cost is the largest
        part."""
        if self.launch_cycles > max(self.gm_cycles, self.vec_cycles):
            return "launch"
        if self.vec_cycles > self.gm_cycles:
            return "V"
        if self.hbm_cycles >= max(self.read_cycles, self.write_cycles):
            return "HBM"
        return "MTE2" if self.read_cycles >= self.write_cycles else "MTE3"

    # what front ends read of an Estimate
    @property
    def core_bound_cycles(self) -> int:
        return self.cycles

    @property
    def hbm_bound_cycles(self) -> int:
        return math.ceil(self.hbm_cycles)

    @property
    def roofline_cycles(self) -> float:
        return max(self.hbm_cycles, self.vec_cycles)

    def utilisation(self) -> dict:
        return {}

    def csv_rows(self) -> list:
        return []       # PipeUtilization rows are per simulated block: a modelled step has none

    def lines(self) -> list[str]:
        if not self.cost.enabled:
            return ["estimate: off (cost model disabled)"]
        w = self.work
        parts = [f"GM {self.cost.us(self.gm_cycles):,.2f}", f"vector {self.cost.us(self.vec_cycles):,.2f}",
                 f"pipeline fill {self.cost.us(self.fixed_cycles):,.2f}"]
        if self.launch_cycles:
            parts.append(f"launch {self.cost.us(self.launch_cycles):,.2f}")
        return [f"estimate {self.time_us:,.2f} us, modelled (not simulated), bound by {self.bound}: {w.kind} of "
                f"{w.read_bytes:,d} B in, {w.write_bytes:,d} B out over {self.cores} core(s); "
                + ", ".join(parts) + " us"]


def _capped(rate: float, cost: CostModel, cores: int) -> float:
    return min(rate, cost.hbm_bytes_per_cycle / cores)


def modelled_estimate(work: HostWork, aiv_num: int, cost: CostModel) -> ModelledEstimate:
    """The chip time of `work` as the device kernel it is, on a chip of `aiv_num` vector cores (module docstring)."""
    cores = cores_for(work, aiv_num)
    r2, r3 = _capped(cost.mte2_bytes_per_cycle, cost, cores), _capped(cost.mte3_bytes_per_cycle, cost, cores)
    read, write = work.read_bytes, work.write_bytes
    vec = 0.0
    if work.kind == "sort" and work.elems > 1:
        merges = max(0, math.ceil(math.log(max(1.0, work.elems / SORT_GROUP_KEYS), MERGE_WAYS)))
        pair_bytes = work.elems * SORT_PAIR_BYTES
        read += merges * pair_bytes           # each merge pass reads and writes the pairs once more
        write += merges * pair_bytes
        per_core_repeats = math.ceil(pair_bytes / REPEAT_BYTES / cores)
        vec = (per_core_repeats * cost.cycles_per_repeat("Sort") + cost.vec_issue_cycles
               + merges * (per_core_repeats * cost.cycles_per_repeat("MrgSort") + cost.vec_issue_cycles))
    elif work.vec_passes:
        per_core_repeats = math.ceil(work.elems * work.elem_bytes / REPEAT_BYTES / cores)
        vec = work.vec_passes * (per_core_repeats * cost.cycles_per_repeat(work.call) + cost.vec_issue_cycles)
    rows = math.ceil(work.rows / cores) * (cost.dma_issue_cycles + cost.burst_cycles) if work.rows else 0
    fixed = cost.mte2_latency_cycles + cost.mte3_latency_cycles
    return ModelledEstimate(cost, work, cores, read / (cores * r2), write / (cores * r3),
                            (read + write) / cost.hbm_bytes_per_cycle, float(rows), vec, float(fixed),
                            launch_cost_cycles(cost))
