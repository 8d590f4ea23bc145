"""KernelDataCopyPadGm2Ub: the GM -> UB DataCopyPad benchmark, our own port of the kernel whose msprof times
asc-devkit publishes (examples/01_simd_cpp_api/05_best_practices/04_memory_access/data_copy, scenarios 1-8 of
its GM -> UB path; measured on Atlas A2 / A3 with 48 AIV and on Ascend 950 with 64 AIV).

Each core copies tiles of `tile_m` rows x `tile_n` fp16 columns into one UB buffer and never writes back, so
the kernel is nothing but MTE2 work:

    scenario 1-3: each core its band of m / cores rows, tile by tile (tiles 1 x 64, 64 x 64, 64 x 1024)
    scenario 5:   the band four times over (more bytes per core than its share of L2)
    scenario 6:   the band cut into four column slices, each slice read four times in a row (fits in L2)
    scenario 7:   every core reads the whole (cores * 128) x 512 matrix, all in the same order (same addresses
                  at the same time)
    scenario 8:   the same, each core starting at its own 128-row block (staggered)

Every launch here moves the benchmark's real bytes (288 MiB to 1.1 GiB of reads: the input is np.zeros, whose
untouched pages the OS maps to one zero page, so a run costs CPU time but almost no memory); nothing is scaled.
`table()` gives estimate / measured per row; `python -m ops.bench.data_copy` prints it (the calibration table
of docs/guides/profile-and-calibrate.md).
"""
from __future__ import annotations

import sys
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, RunReport, UbBuffer, launch
from ascend_sim.kernel_api import aicore, global_aicore
from tiling import get_soc

OP = "DataCopyBench"
HALF_BYTES = 2
BUFFERS = ("ubLocal",)
(UB_LOCAL,) = asc.buffer_ids(BUFFERS, "ubLocal")     # the one UB buffer every copy lands in (ubLocal at ubAddr 0)

PLAIN, REPEAT_WHOLE_4, SPLIT_FOUR_REPEAT_4, FULL_MATRIX_SAME_ADDR, FULL_MATRIX_OFFSET_ADDR = 0, 5, 6, 7, 8

# the template parameters of KernelDataCopyPadGm2Ub, plus which Process* the kernel entry calls
DataCopyTiling = namedtuple("DataCopyTiling", ["m", "n", "num_blocks", "single_core_m", "tile_m", "tile_n", "mode"])


@aicore
def _copy_tile(c, src, row, col, rows, cols, n):
    """One DataCopyPad GM -> UB of `rows` x `cols` halves starting at element (row, col) of the m x n matrix."""
    ub_local = asc.ub_u16(c)[:rows * ((cols * HALF_BYTES + 31) // 32 * 16)]
    params = asc.DataCopyExtParams(rows, cols * HALF_BYTES, (n - cols) * HALF_BYTES, 0)
    asc.data_copy_pad(c, ub_local, asc.gm_at(src, row * n + col), params, asc.NO_PAD)


@aicore
def process(c, td, src):
    """Process(): this core's band of single_core_m rows, tile_m x tile_n at a time (a narrower last column tile)."""
    m_start = c.block_idx * td.single_core_m
    n_loops = (td.n + td.tile_n - 1) // td.tile_n
    for m_block in range(td.single_core_m // td.tile_m):
        m_idx = m_start + m_block * td.tile_m
        for n_block in range(n_loops):
            n_idx = n_block * td.tile_n
            _copy_tile(c, src, m_idx, n_idx, td.tile_m, min(td.tile_n, td.n - n_idx), td.n)


@aicore
def repeat_copy(c, td, src, n_start, n_count, repeat_times):
    """RepeatCopy(nStart, nCount, repeatTimes): the band's columns [n_start, n_start + n_count), repeat_times over."""
    m_start = c.block_idx * td.single_core_m
    for _ in range(repeat_times):
        for m_block in range(td.single_core_m // td.tile_m):
            m_idx = m_start + m_block * td.tile_m
            for n_block in range(n_count // td.tile_n):
                _copy_tile(c, src, m_idx, n_start + n_block * td.tile_n, td.tile_m, td.tile_n, td.n)


@aicore
def full_matrix_copy(c, td, src, offset_addr):
    """FullMatrixCopy(offsetAddr): this core reads every band of the matrix; staggered, core i starts at band i
    of each group of num_blocks bands. (The original first sets the source's L2 cache hint to
    CACHE_MODE_DISABLE; the simulator's L2 keeps no core's bytes for another core, so the hint changes nothing.)"""
    full_m_blocks = td.m // td.single_core_m
    for m_block in range(full_m_blocks):
        group_start = (m_block // td.num_blocks) * td.num_blocks
        cur = group_start + (m_block + c.block_idx) % td.num_blocks if offset_addr else m_block
        m_start = cur * td.single_core_m
        for m_tile in range(td.single_core_m // td.tile_m):
            m_idx = m_start + m_tile * td.tile_m
            for n_block in range(td.n // td.tile_n):
                _copy_tile(c, src, m_idx, n_block * td.tile_n, td.tile_m, td.tile_n, td.n)


@global_aicore
def kernel_data_copy_pad_gm2ub(c, td, src):
    """kernel_data_copy_pad_gm2ub: the scenario's Process*, then PipeBarrier<PIPE_ALL>."""
    if td.mode == REPEAT_WHOLE_4:
        repeat_copy(c, td, src, 0, td.n, 4)
    elif td.mode == SPLIT_FOUR_REPEAT_4:
        quarter_n = td.n // 4
        for split in range(4):
            repeat_copy(c, td, src, split * quarter_n, quarter_n, 4)
    elif td.mode == FULL_MATRIX_SAME_ADDR:
        full_matrix_copy(c, td, src, False)
    elif td.mode == FULL_MATRIX_OFFSET_ADDR:
        full_matrix_copy(c, td, src, True)
    else:
        process(c, td, src)
    asc.pipe_barrier(c, asc.PIPE_ALL)


KERNEL = Kernel.single_pipe(OP, "KernelDataCopyPadGm2Ub", (kernel_data_copy_pad_gm2ub,), BUFFERS)


@dataclass(frozen=True)
class Scenario:
    """One row of the published table: the scenario's shape on a chip and its msprof Task Duration."""
    soc: str
    number: int
    label: str
    m: int
    n: int
    tile_m: int
    tile_n: int
    measured_us: float

    @property
    def mode(self) -> int:
        return self.number if self.number in (5, 6, 7, 8) else PLAIN

    def tiling(self) -> tuple[int, DataCopyTiling]:
        cores = get_soc(self.soc).aiv_num
        return cores, DataCopyTiling(self.m, self.n, cores, self.m // cores, self.tile_m, self.tile_n, self.mode)


_BIG = 12288
# asc-devkit data_copy README, "GM to UB" tables (Task Duration, us); A2 / A3 rows run on the ascend910b profile
SCENARIOS = tuple(
    Scenario(soc, number, label, m, n, tm, tn, us)
    for soc, band_m, rows in (
        ("ascend910b", 6144, ((1, "tile 1 x 64", 1, 64, 564.84), (2, "tile 64 x 64", 64, 64, 233.54),
                              (3, "tile 64 x 1024", 64, 1024, 215.82), (5, "band x 4 (past L2)", 64, 1024, 828.06),
                              (6, "4 slices x 4 (in L2)", 64, 1024, 365.74),
                              (7, "all cores one band, same address", 128, 64, 539.42),
                              (8, "all cores one band, staggered", 128, 64, 328.88))),
        ("ascend950", 8192, ((1, "tile 1 x 64", 1, 64, 884.06), (2, "tile 64 x 64", 64, 64, 208.64),
                             (3, "tile 64 x 1024", 64, 1024, 188.52), (5, "band x 4 (past L2)", 64, 1024, 741.58),
                             (6, "4 slices x 4 (in L2)", 64, 1024, 354.95),
                             (7, "all cores one band, same address", 128, 64, 342.29),
                             (8, "all cores one band, staggered", 128, 64, 335.64))))
    for number, label, tm, tn, us in rows
    for m, n in ((band_m, 512) if number in (7, 8) else (_BIG, _BIG),))

_INPUTS: dict[tuple, np.ndarray] = {}


def run(scenario: Scenario, *, soc=None, threads: int | None = None, check=None) -> RunReport:
    """Launch the scenario on its chip (or on `soc`, a profile or name, with the scenario's shape)."""
    chip = get_soc(soc if soc is not None else scenario.soc)
    cores, td = scenario.tiling()
    src = _INPUTS.get((td.m, td.n))
    if src is None:
        src = _INPUTS[(td.m, td.n)] = np.zeros(td.m * td.n, dtype=np.uint16)
    plan = (UbBuffer("ubLocal", td.tile_m * td.tile_n * HALF_BYTES),)
    return launch(KERNEL, block_dim=cores, plan=plan, args=(td, asc.GlobalTensor(src, 0, 0)), chip=chip,
                  gm_names=("src",), tiling_key=scenario.number, threads=threads, check=check)


def table(socs=("ascend910b", "ascend950")) -> list[tuple[Scenario, float]]:
    """(scenario, estimated us) for every published row of the chips in `socs`."""
    return [(s, run(s).estimate.time_us) for s in SCENARIOS if s.soc in socs]


def markdown(rows) -> str:
    lines = ["| chip | scenario | estimate us | measured us | estimate / measured |", "|---|---|---|---|---|"]
    for s, us in rows:
        lines.append(f"| {s.soc} | {s.number}: {s.label} | {us:.2f} | {s.measured_us:.2f} | {us / s.measured_us:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(table(tuple(sys.argv[1:]) or ("ascend910b", "ascend950"))))
