"""What a launch would take on the chip: the timeline's per-core figures, summed up.

A launch's estimate is the longer of two bounds:

* core-bound: the slowest physical core's timeline (blocks beyond the chip's core count run in
  rounds on the same cores, so a physical core's time is the sum of its blocks');
* HBM-bound: every GM byte the launch moved, at the chip's HBM bandwidth (bytes read from L2 at the L2's);

plus the chip's fixed cost of a launch (`launch_cycles`) once.

The bounding resource is "HBM" when the second wins, else the busiest pipe of the slowest core.
The roofline beside it is the time of the launch's work at the chip's peak rates, perfectly
spread over the cores: its GM bytes at min(HBM, cores x per-core DMA rate) (its L2 hits at the L2's), and its vector
cycles over the cores. `estimate / roofline` says how far the kernel is from that ideal.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from .cost import CostModel
from .layout import PIPE_NAMES

PIPE_UTILIZATION_COLUMNS = (
    "block_id", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)",
    "aiv_scalar_ratio", "aiv_mte2_time(us)", "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio",
)
"""msprof op's PipeUtilization.csv columns for vector cores (block_id first)."""

_CSV_PIPES = (("vec", "V"), ("scalar", "S"), ("mte2", "MTE2"), ("mte3", "MTE3"))


@dataclass(frozen=True)
class CoreTime:
    """One block's timeline: `cycles` until its last pipe finished, and each pipe's busy cycles (S, V, MTE2, MTE3)."""
    block_idx: int
    cycles: int
    busy: tuple[int, int, int, int]

    def busy_of(self, pipe: str) -> int:
        return self.busy[PIPE_NAMES.index(pipe)]

    def ratio(self, pipe: str) -> float:
        return self.busy_of(pipe) / self.cycles if self.cycles else 0.0


@dataclass(frozen=True)
class Estimate:
    """The estimated NPU time of one launch (cycles are AIV clock cycles of `cost.clock_mhz`).

    Attributes:
        cost: the cost model used.
        aiv_num: vector cores of the chip (blocks beyond it run in rounds).
        cores: every block's CoreTime, by block index.
        gm_bytes: GM bytes the launch moved (both DMA directions and scalar accesses).
        sync_alls: SyncAll() barriers the launch crossed.
        l2_hit_bytes: GM -> UB bytes read from L2 (bytes the same core had read earlier in the launch).
        same_address_bytes: GM -> UB bytes other cores read from the same 512-byte region in the same time bucket
            (see gm_cost.same_address_bytes); they cost `same_address_bytes_per_cycle` on top.
    """
    cost: CostModel
    aiv_num: int
    cores: tuple[CoreTime, ...]
    gm_bytes: int
    sync_alls: int = 0
    l2_hit_bytes: int = 0
    same_address_bytes: int = 0

    @property
    def running_cores(self) -> int:
        return min(len(self.cores), self.aiv_num)

    def physical_cycles(self) -> list[int]:
        """Cycles of each physical core: the sum over the blocks it runs (block b runs on core b % aiv_num)."""
        per = [0] * self.running_cores
        for t in self.cores:
            per[t.block_idx % self.aiv_num] += t.cycles
        return per

    @property
    def core_bound_cycles(self) -> int:
        return max(self.physical_cycles(), default=0)

    @property
    def hbm_bound_cycles(self) -> int:
        if not self.cost.enabled:
            return 0
        hits = min(self.l2_hit_bytes, self.gm_bytes)
        return math.ceil((self.gm_bytes - hits) / self.cost.hbm_bytes_per_cycle
                         + hits / self.cost.l2_bytes_per_cycle)

    @property
    def launch_cycles(self) -> int:
        return self.cost.launch_cycles if self.cost.enabled else 0

    @property
    def same_address_cycles(self) -> int:
        rate = self.cost.same_address_bytes_per_cycle
        return math.ceil(self.same_address_bytes / rate) if self.cost.enabled and rate > 0 else 0

    @property
    def cycles(self) -> int:
        return self.launch_cycles + max(self.core_bound_cycles, self.hbm_bound_cycles) + self.same_address_cycles

    @property
    def time_us(self) -> float:
        return self.cost.us(self.cycles)

    @property
    def critical_core(self) -> CoreTime | None:
        """The block with the longest timeline (the first such block)."""
        return max(self.cores, key=lambda t: t.cycles, default=None)

    @property
    def bound(self) -> str:
        """"HBM", or the busiest pipe of the slowest block ("MTE2", "MTE3", "V", "S")."""
        if self.hbm_bound_cycles > self.core_bound_cycles:
            return "HBM"
        crit = self.critical_core
        if crit is None or crit.cycles == 0:
            return "-"
        return max(PIPE_NAMES, key=crit.busy_of)

    def utilisation(self) -> dict[str, float]:
        """Busy share of each pipe over the launch, averaged over the running cores."""
        if self.cycles == 0:
            return {p: 0.0 for p in PIPE_NAMES}
        span = self.cycles * max(1, self.running_cores)
        return {p: sum(t.busy_of(p) for t in self.cores) / span for p in PIPE_NAMES}

    @property
    def roofline_gm_cycles(self) -> float:
        cores = max(1, self.running_cores)
        per_core = min(self.cost.mte2_bytes_per_cycle, self.cost.mte3_bytes_per_cycle)
        rate = min(self.cost.hbm_bytes_per_cycle, per_core * cores)
        hits = min(self.l2_hit_bytes, self.gm_bytes)      # bytes the cores read again from L2, at its rate
        l2_rate = min(self.cost.l2_bytes_per_cycle, self.cost.mte2_l2_bytes_per_cycle * cores)
        return (self.gm_bytes - hits) / rate + hits / l2_rate

    @property
    def roofline_vector_cycles(self) -> float:
        return sum(t.busy_of("V") for t in self.cores) / max(1, self.running_cores)

    @property
    def roofline_cycles(self) -> float:
        return max(self.roofline_gm_cycles, self.roofline_vector_cycles)

    def csv_rows(self) -> list[list]:
        """One PipeUtilization row per block (values rounded as msprof prints them)."""
        rows = []
        for t in self.cores:
            row = [t.block_idx, round(self.cost.us(t.cycles), 3), t.cycles]
            for _, pipe in _CSV_PIPES:
                row += [round(self.cost.us(t.busy_of(pipe)), 3), round(t.ratio(pipe), 3)]
            rows.append(row)
        return rows

    def to_csv(self, path=None) -> str:
        """msprof's PipeUtilization.csv for this launch (one row per block); written to `path` if given."""
        return write_csv(PIPE_UTILIZATION_COLUMNS, self.csv_rows(), path)

    def lines(self) -> list[str]:
        if not self.cost.enabled:
            return ["estimate: off (cost model disabled)"]
        util = self.utilisation()
        crit = self.critical_core
        gm = self.gm_bytes
        lines = [
            f"estimate {self.time_us:,.2f} us ({self.cycles:,d} cycles at {self.cost.clock_mhz:g} MHz), bound by "
            f"{self.bound}; core-bound {self.core_bound_cycles:,d}, HBM-bound {self.hbm_bound_cycles:,d} cycles, "
            f"launch {self.launch_cycles:,d}" + (f", same-address {self.same_address_cycles:,d}"
                                                 if self.same_address_cycles else ""),
            "pipe use (all cores) " + "  ".join(f"{p} {util[p]:5.1%}" for p in PIPE_NAMES)
            + (f"; slowest block {crit.block_idx}: " + "  ".join(f"{p} {crit.ratio(p):5.1%}" for p in PIPE_NAMES)
               if crit is not None else ""),
            f"roofline {self.cost.us(self.roofline_cycles):,.2f} us (GM {gm / 1e6:,.3f} MB -> "
            f"{self.cost.us(self.roofline_gm_cycles):,.2f} us; vector {self.cost.us(self.roofline_vector_cycles):,.2f}"
            f" us); estimate / roofline {self.cycles / self.roofline_cycles if self.roofline_cycles else 0:.2f}x",
        ]
        if self.l2_hit_bytes:
            lines.append(f"L2 hits {self.l2_hit_bytes / 1e6:,.3f} MB of the {gm / 1e6:,.3f} MB of GM traffic (read "
                         "again by the core that read them, at the L2 rate)")
        return lines


def write_csv(columns, rows, path=None) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    text = buf.getvalue()
    if path is not None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    return text


@dataclass(frozen=True)
class LaunchSequence:
    """Launches that run one after another (the kernels of a composite operator): their times add up.

    `launches` holds (label, Estimate) pairs in order; the CSV gets a leading `kernel` column.
    """
    launches: tuple[tuple[str, Estimate], ...]

    @property
    def cycles(self) -> int:
        return sum(e.cycles for _, e in self.launches)

    @property
    def time_us(self) -> float:
        return sum(e.time_us for _, e in self.launches)

    @property
    def bound(self) -> str:
        """The bounding resource of the longest launch."""
        if not self.launches:
            return "-"
        return max(self.launches, key=lambda item: item[1].time_us)[1].bound

    def to_csv(self, path=None) -> str:
        rows = [[label, *row] for label, e in self.launches for row in e.csv_rows()]
        return write_csv(("kernel", *PIPE_UTILIZATION_COLUMNS), rows, path)

    def lines(self) -> list[str]:
        out = [f"estimate {self.time_us:,.2f} us over {len(self.launches)} kernel launch(es), longest bound by "
               f"{self.bound}"]
        for label, e in self.launches:
            out.append(f"{label}:")
            out += ["  " + line for line in e.lines()]
        return out
