"""Kernels of MoeTokenPermuteWithRoutingMap.

source: moe/moe_token_permute_with_routing_map/op_kernel/moe_token_permute_with_routing_map.cpp,
masked_select_v3.h, moe_routing_rank_multi_core.h, moe_sortindices_scatter_multi_core.h, moe_sort_one_core.h,
moe_sort_multi_core.h, moe_sort_multi_core_last_dim.h, moe_index_copy.h, moe_index_copy_split_d.h,
moe_permute_prob.h @ 25fb6b92890d.

The kernel sees routingMap^T and probs^T (experts x tokens, transposed by the aclnn).

Non-pad keys 1..4 (GENERAL_OP_IMPL):
1. Masked select (TPipe sortPipe, KernelMaskedSelectV3 kFull): token ids of the selected map entries into
   sortedIndices (expert-major), probs^T of them into permuteProbs; every core learns actualOutTokens (the
   number of ones). SyncAll.
2. Branch on actualOutTokens != n * topK, decided by each core from its member variable:
   * aligned (every token has topK experts): sort #2 (sortPipe2) of sortedIndices in place -> the output row
     of each token-major slot; then the index copy (MoeindexCopyPipe) with the flag false.
   * non-aligned ("non-topK" rows): MoeRoutingRankMultiCore (its TPipe is also called sortPipe2 in the
     original; here rankPipe, as its buffers differ) writes sortPosition[e, t] = t * topK + (experts e' < e
     chosen by t); the masked select again in kGatherExternalIndex mode compacts sortPosition into a value
     stream (and writes the probs); MoeSortIndicesScatterMultiCore (scatterPipe) fills sortedIndices with -1
     and scatters sortedIndices[value[p]] = p; the index copy with the flag true skips -1 slots.
   Keys 1/2: one-/multi-core sort; 3/4: the same with the split-D index copy.

User workspace (int32 elements, non-aligned path): [0, msNeedCoreNum) per-core counts; at AlignUp(msNeed, 8)
msNeed x N rank partial sums; then sortPosition (E x N); then the value stream. The aligned path's sort uses
the same bytes as its two float ping-pong areas.

Pad key 9 on ascend910b / 910_93, GENERAL_PAD_OP_IMPL: MoeSortMultiLastDimCore<uint8_t> (TPipe sortPipe2) sorts
each expert row of routingMap^T and keeps its first `capacity` token ids in sortedIndices; with probs, a new
TPipe (sortPipe), SyncAll, and MoePermuteProb gathers permuteProbs[p] = probsT[e, sortedIndices[p]]. The
tokens are gathered afterwards by the host l0op::GatherV2 (see pad_kernel()).
Pad keys 9 / 19 on ascend950, GENERAL_PAD_OP_IMPL_3510: the same sort; with probs a SyncAll and the SIMT prob
gather; then a SyncAll and the token gather, SIMD (key 9) or SIMT (key 19) (gather_arch35.py, pad_kernel_arch35()).

Stages reuse the shared building blocks: ops/common/masked_select.py, moe_sort.py (handed a
MoeTokenPermuteTilingData view of the struct, so MoeTokenPermute's compiled sort stages serve here too) and
moe_index_copy.py (same types as MoeTokenPermute's). This module adds the rank and scatter stages.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Branch, Kernel, PipePhase
from ascend_sim.check import InitWaiver, OverlapWaiver, RaceWaiver
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.kernel_api import aicore, global_aicore
from ascend_sim.launch import member
from ops.common import moe_sort
from ops.common.masked_select import (
    M_ACTUAL_OUT_TOKENS,
    MASK_CAST_TAIL_READ_V3,
    masked_select_gm,
    masked_select_phase,
    masked_select_td,
    pwrm_template,
)
from ops.common.moe_index_copy import IndexCopyGm, IndexCopyTemplate, index_copy, index_copy_split_d, index_copy_td
from ops.common.moe_sort import arith_progression_support_int32
from ops.common.moe_sort_last_dim import INDEX_TAIL_READ, last_dim_sort_gm, last_dim_sort_phase
from ops.permute_with_routing_map.gather_arch35 import (
    SIMD_BUFFERS,
    SIMT_PROB,
    SIMT_TOKEN,
    gather_simd_stage,
    gather_simt_stage,
    gather_td,
    simd_gather_gm,
    simt_gather_gm,
)
from ops.permute_with_routing_map.permute_prob import permute_prob_gm, permute_prob_phase
from tiling.moe_token_permute import FIELDS as PERMUTE_FIELDS
from tiling.moe_token_permute_with_routing_map import (
    ASSIST_INDEX_NUM,
    ASSIST_NUM,
    RANK_MAX_TOKEN_TILE_LENGTH,
    non_aligned_layout,
    scatter_per_loop_max_rows,
)

OP = "MoeTokenPermuteWithRoutingMap"

GmTensors = namedtuple("GmTensors", [
    "tokens",           # (N, cols) tokens (carrier dtype), read-only
    "routing_t",        # routingMap^T (E x N) as uint8, read-only
    "probs_t",          # probs^T (E x N), read-only; empty without probs
    "permute_tokens",   # (outTokens, cols) output (carrier dtype of tokens)
    "permute_probs",    # (outTokens) output; empty without probs
    "sorted_indices",   # (outTokens) int32 output
    "ws_f32",           # user workspace as float32 (sort ping-pong areas); bound at run time
    "ws_i32",           # the same bytes as int32 (counts, rank partials, sortPosition, value stream)
    "scatter_assist",   # the constant scatterAssist table (256 int32), read-only
])

Template = namedtuple("Template", ["token_t", "prob_t", "has_prob"])
"""DTYPE_TOKENS and DTYPE_PERMUTE_PROBS (ge codes; fp16 when there are no probs) and whether probs exist."""

SCATTER_PER_LOOP_MAX_ROWS = scatter_per_loop_max_rows()   # CalcScatterPerLoopMaxRows: 1024

SCATTER_ASSIST = np.zeros(ASSIST_NUM, dtype=np.int32)
SCATTER_ASSIST[::8] = np.arange(ASSIST_NUM // 8, dtype=np.int32)
SCATTER_ASSIST.flags.writeable = False
"""scatterAssist (moe_common.h): slot 8 * j holds j, the rest 0; one row's value lives in its own 32-byte block."""

def sort_td(fields: dict):
    """The struct sort #2 reads, as MoeTokenPermute's namedtuple (same field names), so both ops share the
    compiled sort stages; the fields MoeTokenPermute lacks are not read by the sort."""
    from ops.permute import MoeTokenPermuteTilingData
    return MoeTokenPermuteTilingData(*(int(fields.get(k, 0)) for k in PERMUTE_FIELDS))


# --- MoeRoutingRankMultiCore ------------------------------------------------------------------------------------
RankGm = namedtuple("RankGm", ["mask", "workspace"])
"""routingMap^T bytes (read-only) and the user workspace as int32."""

RANK_BUFFERS = ("inQueueMask", "inQueueInt32", "outQueueInt32", "partialBuf", "maskWorkBuf", "maskFloatBuf",
                "maskCastHalfBuf", "tokenBaseBuf")
IN_QUEUE_MASK, IN_QUEUE_INT32, OUT_QUEUE_INT32 = asc.buffer_ids(RANK_BUFFERS, "inQueueMask", "inQueueInt32",
                                                                "outQueueInt32")
PARTIAL_BUF, MASK_WORK_BUF, MASK_FLOAT_BUF, MASK_CAST_HALF_BUF, TOKEN_BASE_BUF = asc.buffer_ids(
    RANK_BUFFERS, "partialBuf", "maskWorkBuf", "maskFloatBuf", "maskCastHalfBuf", "tokenBaseBuf")


@aicore
def _rank_experts(c, td):
    """GetExpertStart / GetExpertCount: the masked select's former / tail split of the expert rows."""
    need = td.ms_need_core_num
    e = td.expert_num
    per_former = (e + need - 1) // need
    i = c.block_idx
    if i < td.ms_former_num:
        return i * per_former, per_former
    former_experts = td.ms_former_num * per_former
    tail_experts = e - former_experts
    tail_cores = need - td.ms_former_num
    if tail_cores <= 0 or i >= need:
        return e, 0
    per_tail = tail_experts // tail_cores
    start = former_experts + (i - td.ms_former_num) * per_tail
    if i - td.ms_former_num == tail_cores - 1:
        return start, tail_experts - per_tail * (tail_cores - 1)
    return start, per_tail


@aicore
def _rank_tile(td):
    """Init: tokenTileLength (the masked select's tile, at most 4096 and N, at least 1)."""
    tile = td.ms_formertile_length
    if tile <= 0 or tile > RANK_MAX_TOKEN_TILE_LENGTH:
        tile = RANK_MAX_TOKEN_TILE_LENGTH
    if tile > td.n:
        tile = td.n
    if tile <= 0:
        tile = 1
    return tile


@aicore
def _copy_in_mask_row(c, mask_gm, length):
    """CopyInMaskRow: one tile of one expert row's bytes."""
    mask_local = asc.alloc_tensor(c, IN_QUEUE_MASK, asc.ub_u8(c))
    asc.data_copy_pad(c, mask_local, mask_gm, asc.DataCopyExtParams(1, length, 0, 0), asc.NO_PAD)
    asc.en_que(c, IN_QUEUE_MASK, mask_local)


@aicore
def _mask_row_to_int32(c, length):
    """DeQue the mask tile and CastMaskRowToInt32: uint8 -> half -> float -> int32 (CAST_ROUND) in maskWorkBuf."""
    mask_local = asc.de_que(c, IN_QUEUE_MASK, asc.ub_u8(c))
    mask_half = asc.tbuf_get(c, MASK_CAST_HALF_BUF, asc.ub_u16(c))
    mask_float = asc.tbuf_get(c, MASK_FLOAT_BUF, asc.ub_f32(c))
    mask_int32 = asc.tbuf_get(c, MASK_WORK_BUF, asc.ub_i32(c))
    asc.cast_u8_to_half(c, mask_half, mask_local, asc.CAST_NONE, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast(c, mask_float, asc.DT_FLOAT, mask_half, asc.DT_FLOAT16, asc.CAST_NONE, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast_f32_to_i32(c, mask_int32, mask_float, asc.CAST_ROUND, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.free_tensor(c, IN_QUEUE_MASK, mask_local)
    return mask_int32


@aicore
def _copy_out_int32(c, dst_gm, length):
    """CopyOutPartialGm / CopyOutSortRow: DeQue outQueueInt32 and write `length` int32."""
    out_local = asc.de_que(c, OUT_QUEUE_INT32, asc.ub_i32(c))
    asc.data_copy_pad(c, dst_gm, out_local, asc.DataCopyExtParams(1, length * 4, 0, 0))
    asc.free_tensor(c, OUT_QUEUE_INT32, out_local)


@aicore
def _accumulate_partial_count(c, td, gm, tile, tiles, last_tile, partial_gm):
    """AccumulatePartialCount: per token tile, the sum over this core's expert rows -> partial[core]."""
    expert_start, expert_count = _rank_experts(c, td)
    n = td.n
    partial_tile = asc.tbuf_get(c, PARTIAL_BUF, asc.ub_i32(c))
    for tile_idx in range(tiles):
        token_start = tile_idx * tile
        length = last_tile if tile_idx == tiles - 1 else tile
        asc.duplicate(c, partial_tile, np.int32(0), length)
        asc.pipe_barrier(c, asc.PIPE_V)
        for e in range(expert_count):
            _copy_in_mask_row(c, asc.gm_at(gm.mask, (expert_start + e) * n + token_start), length)
            mask_int32 = _mask_row_to_int32(c, length)
            asc.add(c, partial_tile, partial_tile, mask_int32, length)
            asc.pipe_barrier(c, asc.PIPE_V)
        out_local = asc.alloc_tensor(c, OUT_QUEUE_INT32, asc.ub_i32(c))        # ComputePartialOut
        asc.duplicate(c, out_local, np.int32(0), length)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.add(c, out_local, out_local, partial_tile, length)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.en_que(c, OUT_QUEUE_INT32, out_local)
        _copy_out_int32(c, asc.gm_at(partial_gm, c.block_idx * n + token_start), length)


@aicore
def _build_sort_position(c, td, gm, tile, tiles, last_tile, partial_gm, sort_position_gm):
    """BuildSortPosition: running count = partials of lower cores; per expert row, sortPosition = t * topK +
    running count, then running count += mask."""
    expert_start, expert_count = _rank_experts(c, td)
    n = td.n
    running = asc.tbuf_get(c, PARTIAL_BUF, asc.ub_i32(c))
    token_base = asc.tbuf_get(c, TOKEN_BASE_BUF, asc.ub_i32(c))
    for tile_idx in range(tiles):
        token_start = tile_idx * tile
        length = last_tile if tile_idx == tiles - 1 else tile
        asc.duplicate(c, running, np.int32(0), length)
        asc.pipe_barrier(c, asc.PIPE_V)
        for core in range(c.block_idx):
            partial_local = asc.alloc_tensor(c, IN_QUEUE_INT32, asc.ub_i32(c))     # CopyInPartial
            asc.data_copy_pad(c, partial_local, asc.gm_at(partial_gm, core * n + token_start),
                              asc.DataCopyExtParams(1, length * 4, 0, 0), asc.NO_PAD)
            asc.en_que(c, IN_QUEUE_INT32, partial_local)
            partial_local = asc.de_que(c, IN_QUEUE_INT32, asc.ub_i32(c))
            asc.add(c, running, running, partial_local, length)
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.free_tensor(c, IN_QUEUE_INT32, partial_local)
        arith_progression_support_int32(c, token_base, np.int32(token_start * td.top_k), np.int32(td.top_k), length)
        asc.pipe_barrier(c, asc.PIPE_V)
        for e in range(expert_count):
            row_offset = (expert_start + e) * n + token_start
            _copy_in_mask_row(c, asc.gm_at(gm.mask, row_offset), length)
            mask_int32 = _mask_row_to_int32(c, length)                         # ComputeSortRow
            sort_row = asc.alloc_tensor(c, OUT_QUEUE_INT32, asc.ub_i32(c))
            asc.add(c, sort_row, running, token_base, length)
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.en_que(c, OUT_QUEUE_INT32, sort_row)
            asc.add(c, running, running, mask_int32, length)
            asc.pipe_barrier(c, asc.PIPE_V)
            _copy_out_int32(c, asc.gm_at(sort_position_gm, row_offset), length)


@global_aicore
def rank_stage(c, td, gm, step):
    """MoeRoutingRankMultiCore::Process between its SyncAll()s: step 0 AccumulatePartialCount, step 1
    BuildSortPosition (cores below the masked select's needCoreNum)."""
    need = td.ms_need_core_num
    if c.block_idx >= need:
        return
    tile = _rank_tile(td)
    tiles = (td.n + tile - 1) // tile
    last_tile = td.n % tile
    if last_tile == 0:
        last_tile = tile
    partial_offset = (need * 4 + 31) // 32 * 32 // 4
    partial_gm = asc.gm_at(gm.workspace, partial_offset)
    if step == 0:
        _accumulate_partial_count(c, td, gm, tile, tiles, last_tile, partial_gm)
    else:
        _build_sort_position(c, td, gm, tile, tiles, last_tile, partial_gm,
                             asc.gm_at(gm.workspace, partial_offset + need * td.n))


# --- MoeSortIndicesScatterMultiCore ------------------------------------------------------------------------------
ScatterGm = namedtuple("ScatterGm", ["out", "values", "assist"])
"""sortedIndices (int32 output), the value stream (int32, to the end of the workspace), scatterAssist."""

SCATTER_BUFFERS = ("copyInQueue", "copyOutQueue", "assistBuffer")
COPY_IN_QUEUE, COPY_OUT_QUEUE, ASSIST_BUFFER = asc.buffer_ids(SCATTER_BUFFERS, "copyInQueue", "copyOutQueue",
                                                              "assistBuffer")
# CopyIn reads the value stream with DataCopy of Align(currentLoopRows, sizeof(int32_t)) elements: up to 28 bytes
# past the stream's end, workspace no core wrote (only currentLoopRows values are scattered)
SCATTER_VALUE_TAIL_READ = InitWaiver("workspace", "moe/moe_token_permute_with_routing_map/op_kernel/"
                                     "moe_sortindices_scatter_multi_core.h:151 @ 25fb6b92890d (CopyIn's aligned "
                                     "DataCopy of the value stream)", tail=32)


@aicore
def _c_ceil(a, b):
    return (a + b - 1) // b


@global_aicore
def scatter_stage(c, td, gm, step):
    """MoeSortIndicesScatterMultiCore::Process between its SyncAll()s: step 0 InitMinusOne (fill sortedIndices
    with -1, slices of whole 256-element blocks per core), step 1 the scatter of the value stream."""
    total = td.n * td.top_k
    block_num = c.block_num
    if step == 0:
        init_per_core = _c_ceil(_c_ceil(total, block_num), ASSIST_NUM) * ASSIST_NUM
        start = c.block_idx * init_per_core
        if c.block_idx >= _c_ceil(total, init_per_core) or start >= total:
            return
        count = min(init_per_core, total - start)
        asc.init_output(c, asc.gm_at(gm.out, start), count, np.int32(-1))     # InitGlobalMemory
        evt = asc.fetch_event_id(c, asc.MTE3_MTE2)
        asc.set_flag(c, asc.MTE3_MTE2, evt)
        asc.wait_flag(c, asc.MTE3_MTE2, evt)
        return
    actual = asc.members(c)[M_ACTUAL_OUT_TOKENS]
    if actual <= 0:
        return
    per_core = _c_ceil(_c_ceil(actual, block_num), ASSIST_NUM) * ASSIST_NUM
    value_start = c.block_idx * per_core
    if c.block_idx >= _c_ceil(actual, per_core) or value_start >= actual:
        return
    core_rows = min(per_core, actual - value_start)
    per_loop = min(core_rows, SCATTER_PER_LOOP_MAX_ROWS)
    if per_loop <= 0:
        per_loop = 1
    loops = (core_rows + per_loop - 1) // per_loop
    last_loop = core_rows - (loops - 1) * per_loop
    # AssistInit: the table + this core's first value-stream position
    assist = asc.tbuf_get(c, ASSIST_BUFFER, asc.ub_i32(c))
    asc.data_copy(c, assist, gm.assist, ASSIST_NUM)
    evt = asc.fetch_event_id(c, asc.MTE2_V)
    asc.set_flag(c, asc.MTE2_V, evt)
    asc.wait_flag(c, asc.MTE2_V, evt)
    asc.adds(c, assist, assist, np.int32(value_start), ASSIST_NUM)
    for loop in range(loops):
        rows = last_loop if loop == loops - 1 else per_loop
        in_local = asc.alloc_tensor(c, COPY_IN_QUEUE, asc.ub_i32(c))                       # CopyIn
        asc.data_copy(c, in_local, asc.gm_at(gm.values, value_start + loop * per_loop), (rows * 4 + 31) // 32 * 8)
        asc.en_que(c, COPY_IN_QUEUE, in_local)
        out_local = asc.alloc_tensor(c, COPY_OUT_QUEUE, asc.ub_i32(c))                     # Compute
        asc.pipe_barrier(c, asc.PIPE_V)
        for i in range((rows + ASSIST_INDEX_NUM - 1) // ASSIST_INDEX_NUM):
            asc.adds(c, out_local[i * ASSIST_NUM:], assist, np.int32(per_loop * loop + i * ASSIST_INDEX_NUM),
                     ASSIST_NUM)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.en_que(c, COPY_OUT_QUEUE, out_local)
        in_local = asc.de_que(c, COPY_IN_QUEUE, asc.ub_i32(c))                             # CopyOut
        out_local = asc.de_que(c, COPY_OUT_QUEUE, asc.ub_i32(c))
        evt = asc.fetch_event_id(c, asc.MTE2_S)
        asc.set_flag(c, asc.MTE2_S, evt)
        asc.wait_flag(c, asc.MTE2_S, evt)
        params = asc.DataCopyExtParams(1, 4, 0, 0)
        for idx in range(rows):
            dst = np.uint32(asc.get_value(c, in_local, idx))        # unsigned: a negative value is skipped too
            if dst < np.uint32(total):
                asc.data_copy_pad(c, asc.gm_at(gm.out, np.int64(dst)), out_local[idx * 8:], params)
        asc.free_tensor(c, COPY_IN_QUEUE, in_local)
        asc.free_tensor(c, COPY_OUT_QUEUE, out_local)


# --- the kernel: GENERAL_OP_IMPL ---------------------------------------------------------------------------------
def _i32_at(gm: GmTensors, offset: int) -> GlobalTensor:
    return GlobalTensor(gm.ws_i32.data, gm.ws_i32.id, offset)


def _ms_full(td, gm, tmpl):
    """MASKSELECT_ONLY_IMPL: kFull over routingMap^T; token ids into sortedIndices, probs^T into permuteProbs."""
    mgm = masked_select_gm(gm.routing_t, gm.probs_t if tmpl.has_prob else None,
                           gm.permute_probs if tmpl.has_prob else None, gm.sorted_indices, _i32_at(gm, 0))
    return masked_select_td(_ms_fields(td), td.top_k), mgm, pwrm_template(tmpl.prob_t, tmpl.has_prob)


def _ms_gather(td, gm, tmpl):
    """MASKSELECT_GATHER_RANK_IMPL: kGatherExternalIndex over sortPosition; the value stream into the workspace."""
    _, sort_position, value_stream = non_aligned_layout(td.ms_need_core_num, td.n, td.expert_num)
    mgm = masked_select_gm(gm.routing_t, gm.probs_t if tmpl.has_prob else None,
                           gm.permute_probs if tmpl.has_prob else None, _i32_at(gm, value_stream), _i32_at(gm, 0),
                           _i32_at(gm, sort_position))
    return masked_select_td(_ms_fields(td), td.top_k), mgm, pwrm_template(tmpl.prob_t, tmpl.has_prob, True)


def _ms_fields(td) -> dict:
    return {k[3:]: getattr(td, k) for k in td._fields if k.startswith("ms_")}


def _sort2_args(td, gm, tmpl):
    """Sort #2: sortedIndices (token ids, expert-major) in place -> the output row of each token-major slot."""
    return sort_td(td._asdict()), moe_sort.sort_gm(gm.sorted_indices, gm.sorted_indices, gm.ws_f32)


def _copy_args(flag: int):
    def args(td, gm, tmpl):
        return (index_copy_td(td),
                IndexCopyGm(gm.tokens, gm.sorted_indices, gm.permute_tokens),
                IndexCopyTemplate(tmpl.token_t, flag, 1))
    return args


def _rank_args(td, gm, tmpl):
    return td, RankGm(gm.routing_t, gm.ws_i32)


def _scatter_args(td, gm, tmpl):
    _, _, value_stream = non_aligned_layout(td.ms_need_core_num, td.n, td.expert_num)
    return td, ScatterGm(gm.sorted_indices, _i32_at(gm, value_stream), gm.scatter_assist)


def _not_aligned(core, td, gm, tmpl) -> int:
    """`if (actualOutTokens != t->n * t->topK)`, from the member the masked select left on this core."""
    return int(member(core, M_ACTUAL_OUT_TOKENS) != td.n * td.top_k)


# GENERAL_OP_IMPL (moe_token_permute_with_routing_map.cpp lines 47-49 and 68 @ 25fb6b92890d): the masked select
# writes the token ids into sortedIndices from every core, SyncAll, then the sort runs on sortedIndices in place
# (op2.Init(sortedIndices, sortedIndices, ...)) and writes the sorted slots over them from other cores
SORTED_INDICES_REWRITE = OverlapWaiver(
    "DataCopyPad(UB->GM)", "DataCopyPad(UB->GM)",
    "the sort rewrites sortedIndices in place over the ids the masked select's cores wrote there")
# MoeSortIndicesScatterMultiCore::Process (moe_sortindices_scatter_multi_core.h lines 144 and 182, 192-196
# @ 25fb6b92890d): InitMinusOne fills sortedIndices with -1 in per-core slices, SyncAll, then every core's scatter
# writes slots anywhere in it, over another core's -1s
SCATTER_OVER_MINUS_ONE = OverlapWaiver(
    "InitOutput", "DataCopyPad(UB->GM)",
    "the scatter writes each slot over the -1 another core's InitMinusOne (InitGlobalMemory) put there")


def non_pad_kernel(key: int, ms_buffers: tuple, with_index_copy: bool = True) -> Kernel:
    """GENERAL_OP_IMPL of key 1..4; ms_buffers: the masked select's buffer names (they depend on probs).
    with_index_copy False (hidden size 0: no row bytes to move): the same kernel without its index copy, which
    leaves sortedIndices and permuteProbs as they are."""
    multi = key in (2, 4)
    split = key in (3, 4)
    copy_stage = index_copy_split_d if split else index_copy
    copy_buffers = ("copyInQueue", "indicesQueue" if split else "indicesBuffer")
    copy_name = "MoeindexCopySplitDOp" if split else "MoeindexCopyOp"
    ms_sync = PipePhase("sortPipe", ms_buffers, (SYNC_ALL,))       # the SyncAll() after opMS.Process()
    copy = ((PipePhase("MoeindexCopyPipe", copy_buffers, (copy_stage,), _copy_args(0)),) if with_index_copy
            else ())
    aligned = (moe_sort.sort_phase("sortPipe2", multi, _sort2_args),) + copy
    non_aligned = (
        PipePhase("rankPipe", RANK_BUFFERS, (SYNC_ALL, (rank_stage, 0), SYNC_ALL, (rank_stage, 1), SYNC_ALL),
                  _rank_args),
        masked_select_phase("sortPipe", _ms_gather, ms_buffers), ms_sync,
        PipePhase("scatterPipe", SCATTER_BUFFERS,
                  (SYNC_ALL, (scatter_stage, 0), SYNC_ALL, (scatter_stage, 1), SYNC_ALL), _scatter_args))
    if with_index_copy:
        non_aligned += (PipePhase("MoeindexCopyPipe", copy_buffers, (copy_stage,), _copy_args(1)),)
    sort_name = "MoeSortMultiCore" if multi else "MoeSortOneCore"
    if with_index_copy:
        name = (f"KernelMaskedSelectV3 + ({sort_name} + {copy_name}<false> | MoeRoutingRankMultiCore + "
                f"MaskedSelect(gather) + MoeSortIndicesScatterMultiCore + {copy_name}<true>)")
    else:
        name = (f"KernelMaskedSelectV3 + ({sort_name} | MoeRoutingRankMultiCore + MaskedSelect(gather) + "
                "MoeSortIndicesScatterMultiCore), no index copy (hidden size 0)")
    return Kernel(OP, name,
                  (masked_select_phase("sortPipe", _ms_full, ms_buffers), ms_sync,
                   Branch("actualOutTokens != n * topK", _not_aligned, (aligned, non_aligned))),
                  (SORTED_INDICES_REWRITE, SCATTER_OVER_MINUS_ONE, MASK_CAST_TAIL_READ_V3, SCATTER_VALUE_TAIL_READ)
                  + moe_sort.sort_waivers(multi))


_KERNELS: dict = {}


def kernel_for(key: int, ms_buffers: tuple, with_index_copy: bool = True) -> Kernel:
    """The (cached) kernel of a non-pad key for a masked-select buffer list (see non_pad_kernel)."""
    k = (key, tuple(ms_buffers), bool(with_index_copy))
    if k not in _KERNELS:
        _KERNELS[k] = non_pad_kernel(key, tuple(ms_buffers), bool(with_index_copy))
    return _KERNELS[k]


# --- the kernel: GENERAL_PAD_OP_IMPL -----------------------------------------------------------------------------
def _pad_sort_args(td, gm, tmpl):
    """MoeSortMultiLastDimCore<uint8_t>: routingMap^T bytes -> sortedIndices (E x capacity), ping-pong in ws_f32."""
    return td, last_dim_sort_gm(gm.routing_t, gm.sorted_indices, gm.ws_f32)


def _pad_prob_args(td, gm, tmpl):
    """MoePermuteProb: probsT gathered by sortedIndices into permuteProbs."""
    return td, permute_prob_gm(gm.permute_probs, gm.probs_t, gm.sorted_indices)


# the real MoePermuteProb allocates MTE2_S / S_MTE3 / MTE3_S event ids but never sets or waits for them: its
# scalar loop reads the copied-in indices and probs and fills the out tile the copy-out reads with no event
# (moe_permute_prob.h Process); checked mode lets those pairs pass
PERMUTE_PROB_RACES = (
    RaceWaiver("MTE2", "DataCopyPad(GM->UB)", "S", "LocalTensor::GetValue",
               "MoePermuteProb reads what it copied in with GetValue with no MTE2 -> S event"),
    RaceWaiver("S", "LocalTensor::SetValue", "MTE3", "DataCopyPad(UB->GM)",
               "MoePermuteProb copies out what it set with SetValue with no S -> MTE3 event"),
    RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "S", "LocalTensor::SetValue",
               "MoePermuteProb refills its out tile with no MTE3 -> S event after the copy-out"))


# MoeMrgsortOut::CopyIn (moe_mrgsort_out.h lines 146-147 @ 25fb6b92890d) copies a core's sorted list from its
# workspace slice with DataCopy of Align(GetSortLen(length), sizeof(float)) floats, which moves whole 32-byte
# blocks, so the last block runs past the slice into the next core's, which that core may still be writing (VBSCopyOut)
# with no SyncAll between; MrgSort never reads those lanes
LAST_DIM_SORT_SLICE_READ = RaceWaiver(
    "MTE3", "DataCopyPad(UB->GM)", "MTE2", "DataCopy(GM->UB)",
    "MoeMrgsortOut::CopyIn's whole-block DataCopy reads past the core's workspace slice into the next core's",
    cross_core=True)
# the last-dim sort's waivers: its uninitialised reads (index lanes past a loop's count, its merges', moe_sort) and
# its cross-core slice read
LAST_DIM_SORT_WAIVERS = (INDEX_TAIL_READ, moe_sort.MRGSORT_ALIGNED_READ, moe_sort.MRGSORT_OUT_EXTRACT_TAIL,
                         LAST_DIM_SORT_SLICE_READ)


def pad_kernel(has_prob: bool) -> Kernel:
    """GENERAL_PAD_OP_IMPL of key 9 / 19. On ascend950 the real kernel then gathers the tokens itself
    (gather_v2 SIMD for key 9, SIMT for key 19); the simulator leaves that to the host GatherV2 step, which
    writes the same rows."""
    k = ("pad", bool(has_prob))
    if k not in _KERNELS:
        phases = (last_dim_sort_phase(_pad_sort_args, "sortPipe2"),)
        name = "MoeSortMultiLastDimCore<uint8_t>"
        if has_prob:
            phases += (permute_prob_phase(_pad_prob_args, "sortPipe"),)     # starts with the SyncAll
            name += " + SyncAll + MoePermuteProb"
        _KERNELS[k] = Kernel(OP, name, phases, (PERMUTE_PROB_RACES if has_prob else ()) + LAST_DIM_SORT_WAIVERS)
    return _KERNELS[k]


# --- the kernel: GENERAL_PAD_OP_IMPL_3510 + the token gather (ascend950) ----------------------------------------
NO_TPIPE_PROBS = "none (SIMT prob gather)"      # the SIMT calls build no TPipe: phases with no buffers
NO_TPIPE_TOKENS = "none (SIMT token gather)"


def _prob_gather_args(td, gm, tmpl):
    """Gatherv2SimtTwoDim<DTYPE_PERMUTE_PROBS>: probsT gathered by sortedIndices into permuteProbs."""
    return gather_td(td), simt_gather_gm(gm.probs_t, gm.sorted_indices, gm.permute_probs)


def _token_simt_args(td, gm, tmpl):
    """Gatherv2SimtTwoDim<DTYPE_TOKENS>: tokens gathered element-wise into permuteTokens."""
    return gather_td(td), simt_gather_gm(gm.tokens, gm.sorted_indices, gm.permute_tokens)


def _token_simd_args(td, gm, tmpl):
    """Gatherv2SimdTwoDim<int32_t>: token rows gathered as bytes into permuteTokens."""
    return gather_td(td), simd_gather_gm(gm.tokens, gm.sorted_indices, gm.permute_tokens)


# ArithProgressionSupportInt32 (moe_sort_base.h) writes a count of at most 8 with SetValue alone and returns
# without the S -> V event it sets for longer counts; MoeSortMultiLastDimCore then sorts those indices (rows of
# N <= 8 tokens). The gathers need no waiver: each UB hand-over in gather_v2_simd_two_dim.h has its event.
# and the sort's later copy-in (the merge) overwrites those bytes with no S -> MTE2 event either.
SHORT_INDEX_ROW_RACES = (
    RaceWaiver("S", "LocalTensor::SetValue", "V", "Sort",
               "ArithProgressionSupportInt32 (moe_sort_base.h) fills up to 8 indices with SetValue and no S -> V "
               "event before the last-dim sort's Sort reads them"),
    RaceWaiver("S", "LocalTensor::SetValue", "MTE2", "DataCopy(GM->UB)",
               "ArithProgressionSupportInt32 (moe_sort_base.h): no event after its SetValue fill of up to 8 indices "
               "before the last-dim sort copies into the same buffer"))


def pad_kernel_arch35(has_prob: bool, simd: bool) -> Kernel:
    """Key 9 (simd) / 19 of ascend950: the pad sort, [SyncAll, SIMT prob gather,] SyncAll, token gather."""
    k = ("pad950", bool(has_prob), bool(simd))
    if k not in _KERNELS:
        phases = (last_dim_sort_phase(_pad_sort_args, "sortPipe2"),)
        name = "MoeSortMultiLastDimCore<uint8_t>"
        if has_prob:
            phases += (PipePhase(NO_TPIPE_PROBS, (), (SYNC_ALL, (gather_simt_stage, SIMT_PROB)), _prob_gather_args),)
            name += " + SyncAll + Gatherv2SimtTwoDim::ProbProcess"
        if simd:
            phases += (PipePhase("MoeindexCopyPipe", SIMD_BUFFERS, (SYNC_ALL, gather_simd_stage), _token_simd_args),)
            name += " + SyncAll + Gatherv2SimdTwoDim"
        else:
            phases += (PipePhase(NO_TPIPE_TOKENS, (), (SYNC_ALL, (gather_simt_stage, SIMT_TOKEN)), _token_simt_args),)
            name += " + SyncAll + Gatherv2SimtTwoDim::Process"
        _KERNELS[k] = Kernel(OP, name, phases, SHORT_INDEX_ROW_RACES + LAST_DIM_SORT_WAIVERS)
    return _KERNELS[k]
