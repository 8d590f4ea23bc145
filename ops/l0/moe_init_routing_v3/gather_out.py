"""MoeGatherOut<T> of MoeInitRoutingV3 without quantisation: expanded_x[i] = x[sortedRowIdx[i] / k].

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_gather_out.h @ 25fb6b92890d

The rows are only moved, so the stage sees x and expanded_x as unsigned integers of the element width (one
compiled variant per width: int8 shares uint8 with every 1-byte type, fp16 / bf16 share uint16, fp32 is uint32).

The expert total count (read after a DataCacheCleanAndInvalid) is split over all tiling cores again: per core
Ceil(count, coreNum) output rows, so the dropped slots (sorted after the active ones) are never gathered and
expanded_x keeps what it held beyond the count. A core's rows go in loops of min(tiling per-loop indices, its
rows): the loop's sorted row ids are copied in, and for each one the x row (and, with a scale input, its float
scale into expanded_scale) is copied into the loop's x buffer; one strided DataCopyPad writes all the loop's rows
(colsLoops == 1). When a row does not fit the UB (colsLoops > 1) every column piece goes in and out on its own.

The InitBuffer sizes depend on that run-time count (curCorePerLoopIndicesElements); `core_rows` works them out
from the expert ids before the launch, as the kernel will.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import PipePhase
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

from .expert_tokens_count import total_count_offset
from .row_idx_gather import _ceil
from .sort import sorted_idx_offset

GatherGm = namedtuple("GatherGm", ["x", "scale", "workspace", "expanded_x", "expanded_scale"])
"""x (n * cols) and expanded_x (n * k * cols) as unsigned integers of the element width; scale (n) and
expanded_scale (n * k) float32 (empty without a scale input); the int32 workspace."""

BUFFERS = ("expandedRowIdxCopyInQueue", "xCopyInQueue", "scaleCopyInQueue")
ROW_IDX_QUEUE, X_QUEUE, SCALE_QUEUE = range(3)
GATHER_OUT_BUFFER_NUM = 2


@aicore
def _align(elements, nbytes):
    return 0 if nbytes == 0 else (elements * nbytes + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // nbytes


@aicore
def _split(td, block_idx, total):
    """InitBaseData: (perCoreIndicesElements, needCoreNum, curCoreIndicesElements, curCorePerLoopIndicesElements,
    indicesLoops, curCoreLastLoopIndicesElements) for an expert total count of `total`."""
    per_core = _ceil(total, td.core_num)
    need = _ceil(total, per_core)
    last = total - (need - 1) * per_core
    if block_idx == need - 1:
        cur = last
        per_loop = min(td.gather_out_last_core_per_loop_indices_elements, cur)
    else:
        cur = per_core
        per_loop = min(td.gather_out_per_core_per_loop_indices_elements, cur)
    loops = _ceil(cur, per_loop)
    return per_core, need, cur, per_loop, loops, cur - (loops - 1) * per_loop


@aicore
def _copy_scale(c, gm, src_row, dst_row):
    """CopyScaleIn + CopyScaleOut: one float through the scale queue."""
    F32 = asc.ub_f32(c)
    scale_local = asc.alloc_tensor(c, SCALE_QUEUE, F32)
    asc.data_copy_pad(c, scale_local, asc.gm_at(gm.scale, src_row), asc.DataCopyExtParams(1, 4, 0, 0), asc.NO_PAD)
    asc.en_que(c, SCALE_QUEUE, scale_local)
    scale_local = asc.de_que(c, SCALE_QUEUE, F32)
    asc.data_copy_pad(c, asc.gm_at(gm.expanded_scale, dst_row), scale_local, asc.DataCopyExtParams(1, 4, 0, 0))
    asc.free_tensor(c, SCALE_QUEUE, scale_local)


@aicore
def _copy_x_out(c, expanded_x, dst_offset, rows, cols, aligned_cols, X):
    """CopyXOut: `rows` rows of `cols` elements from the x buffer (rows aligned_cols apart) to expanded_x."""
    x_local = asc.de_que(c, X_QUEUE, X)
    isz = expanded_x.data.itemsize
    asc.data_copy_pad(c, asc.gm_at(expanded_x, dst_offset), x_local,
                      asc.DataCopyExtParams(rows, cols * isz, (aligned_cols - cols) * isz // BLOCK_BYTES, 0))
    asc.free_tensor(c, X_QUEUE, x_local)


@aicore
def gather_out(c, td, gm, tmpl):
    """MoeGatherOut::Init + Process (GATHER row-index type)."""
    total_gm = asc.gm_at(gm.workspace, total_count_offset(td))
    asc.data_cache_clean_and_invalid(c, total_gm, asc.SINGLE_CACHE_LINE, asc.CACHELINE_OUT)
    total = np.int64(asc.get_value(c, total_gm, 0))
    per_core, need, cur, per_loop, loops, last_loop = _split(td, c.block_idx, total)
    if c.block_idx >= need:
        return
    cols, k = td.cols, td.k
    isz = gm.x.data.itemsize
    X = asc.ub_like(c, gm.x)
    I32 = asc.ub_i32(c)
    expanded_x = asc.gm_at(gm.expanded_x, c.block_idx * per_core * cols)
    rows_gm = asc.gm_at(gm.workspace, sorted_idx_offset(td) + c.block_idx * per_core)
    scale_base = c.block_idx * per_core
    per_loop_cols = td.gather_out_per_loop_cols
    aligned_cols = _align(per_loop_cols, isz)
    col_loops = td.gather_out_cols_loops
    loop_elements = per_loop
    for loop in range(loops):
        if loop == loops - 1:
            loop_elements = last_loop
        offset = loop * per_loop
        asc.sync_pipes(c, asc.S_MTE2)
        # CopyExpertIn
        row_idx_local = asc.alloc_tensor(c, ROW_IDX_QUEUE, I32)
        asc.data_copy_pad(c, row_idx_local, asc.gm_at(rows_gm, offset),
                          asc.DataCopyExtParams(1, loop_elements * 4, 0, 0), asc.NO_PAD)
        asc.en_que(c, ROW_IDX_QUEUE, row_idx_local)
        # ProcessGatherLoop
        row_idx_local = asc.de_que(c, ROW_IDX_QUEUE, I32)
        asc.sync_pipes(c, asc.MTE2_S)
        if col_loops == 1:
            x_local = asc.alloc_tensor(c, X_QUEUE, X)
            for j in range(loop_elements):
                src_row = asc.get_value(c, row_idx_local, j) // k
                asc.sync_pipes(c, asc.S_MTE2)
                if td.is_input_scale == 1:
                    _copy_scale(c, gm, src_row, scale_base + offset + j)
                asc.data_copy_pad(c, x_local[j * aligned_cols:], asc.gm_at(gm.x, src_row * cols),
                                  asc.DataCopyExtParams(1, cols * isz, 0, 0), asc.NO_PAD)
            asc.en_que(c, X_QUEUE, x_local)
        else:
            for j in range(loop_elements):
                src_row = asc.get_value(c, row_idx_local, j) // k
                asc.sync_pipes(c, asc.S_MTE2)
                if td.is_input_scale == 1:
                    _copy_scale(c, gm, src_row, scale_base + offset + j)
                for col_loop in range(col_loops):
                    piece = td.gather_out_last_loop_cols if col_loop == col_loops - 1 else per_loop_cols
                    col_offset = col_loop * per_loop_cols
                    x_local = asc.alloc_tensor(c, X_QUEUE, X)
                    asc.data_copy_pad(c, x_local, asc.gm_at(gm.x, src_row * cols + col_offset),
                                      asc.DataCopyExtParams(1, piece * isz, 0, 0), asc.NO_PAD)
                    asc.en_que(c, X_QUEUE, x_local)
                    _copy_x_out(c, expanded_x, (offset + j) * cols + col_offset, 1, piece, aligned_cols, X)
        asc.free_tensor(c, ROW_IDX_QUEUE, row_idx_local)
        if col_loops == 1:
            _copy_x_out(c, expanded_x, offset * cols, loop_elements, cols, aligned_cols, X)


@global_aicore
def gather_out_stage(c, td, gm, tmpl):
    gather_out(c, td, gm, tmpl)


def _align_bytes(elements: int, nbytes: int) -> int:
    return (elements * nbytes + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES


def _ceil_host(a: int, b: int) -> int:
    return 0 if b == 0 else -(-a // b)


def init_buffer_rows(f, block_idx: int, total: int, x_bytes: int) -> tuple[int, int, int, int]:
    """MoeGatherOut::Init's InitBuffer sizes on core `block_idx` for an expert total count `total`, host side:
    (row-id queue bytes, x buffers, x queue bytes, scale queue bytes). `f` maps the tiling field names."""
    per_core = _ceil_host(total, f["core_num"])
    need = _ceil_host(total, per_core)
    if block_idx == need - 1:
        per_loop = min(f["gather_out_last_core_per_loop_indices_elements"], total - (need - 1) * per_core)
    else:
        per_loop = min(f["gather_out_per_core_per_loop_indices_elements"], per_core)
    bufs = max(f["gather_out_x_copy_in_queue_buffer_num"], GATHER_OUT_BUFFER_NUM)
    return (_align_bytes(per_loop, 4), bufs, per_loop * _align_bytes(f["gather_out_per_loop_cols"], x_bytes),
            per_loop * _align_bytes(1, 4))


def active_count(expert_idx: np.ndarray, start: int, end: int) -> int:
    """The expert total count the kernel will compute: ids in [start, end)."""
    flat = expert_idx.reshape(-1)
    return int(np.count_nonzero((flat >= start) & (flat < end)))


def gather_phase(select) -> PipePhase:
    """The gatherPipe phase; `select(*launch_args)` returns (td, GatherGm, tmpl). Each core's InitBuffer rows
    follow the expert total count its run will read (worked out from the expert ids handed over at launch)."""
    def core_plan(block_idx, rows, *launch_args):
        td, gm, _ = select(*launch_args)
        f = td._asdict()
        ids = launch_args[1].expert_idx.data
        total = active_count(ids, td.expert_start, td.expert_end)
        idx_bytes, bufs, x_bytes, scale_bytes = init_buffer_rows(f, block_idx, total, gm.x.data.itemsize)
        out = []
        for row in rows:
            if row.name == "expandedRowIdxCopyInQueue":
                out.append(row._replace(bytes=idx_bytes))
            elif row.name == "xCopyInQueue":
                out.append(row._replace(bytes=x_bytes, count=bufs))
            else:
                out.append(row._replace(bytes=scale_bytes))
        return tuple(out)
    return PipePhase("gatherPipe", BUFFERS, (gather_out_stage,), select, core_plan=core_plan)
