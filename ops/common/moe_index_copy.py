"""The index copy of MoeTokenPermute and MoeTokenPermuteWithRoutingMap (moe_index_copy.h,
moe_index_copy_split_d.h of both op directories).

Every core owns a contiguous range of source tokens; it copies each token row to the output rows its topK
sortedIndices slots name. Two classes:
* MoeindexCopyOp (`index_copy`): index batches of onceIndicesTokenNums tokens; inside them row batches of
  onceUbTokenNums rows, copied in with one DataCopyPad (rows land colsAlign apart).
* MoeindexCopySpiltDOp (`index_copy_split_d`): a row too long for UB moves in pieces of oneTokenOnceMove
  elements.

The ifNumOutTokens template flag differs between the two op directories (IndexCopyTemplate):
* MoeTokenPermute (routing_map 0): skip destination rows >= numOutTokens (keys 5..8).
* MoeTokenPermuteWithRoutingMap (routing_map 1, the non-aligned path of non-topK routing maps): a slot
  holding -1 is unused and skipped, a token whose slot 0 is -1 has no slot at all and is skipped whole,
  and rows >= numOutTokens are skipped; when colsAlign >= 256 elements the batch path is replaced by a
  per-token one (a token is read only when it has a slot).

Stages take (c, td, gm, tmpl): an IndexCopyTilingData, an IndexCopyGm and an IndexCopyTemplate. Both
operators hand the stages these same types, so one compiled stage per token carrier dtype serves both.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore, global_aicore
from tiling.moe_token_permute import INDEX_COPY_FIELDS

IndexCopyTilingData = namedtuple("IndexCopyTilingData", ("cols", "cols_align", "top_k")
                                 + tuple(f"index_copy_{f}" for f in INDEX_COPY_FIELDS))
"""The part of either op's tiling struct the index copy reads (field names as in both structs)."""

IndexCopyGm = namedtuple("IndexCopyGm", [
    "tokens",           # srcGm: (N, cols) tokens
    "sorted_indices",   # (N * topK) int32: output row of each slot
    "permute_tokens",   # dstGm: (numOutTokens, cols) output
])

IndexCopyTemplate = namedtuple("IndexCopyTemplate", ["token_t", "if_num_out_tokens", "routing_map"])
"""DTYPE_TOKENS (ge code), the ifNumOutTokens flag and which op directory's class (1:
MoeTokenPermuteWithRoutingMap, whose flag also skips -1 slots)."""

SPARSE_COLS_ALIGN_THRESH = 256   # INDEX_COPY_SPARSE_COLS_ALIGN_THRESH (elements)


def index_copy_td(fields) -> IndexCopyTilingData:
    """IndexCopyTilingData from an op's tiling struct (a dict of fields or a namedtuple of them)."""
    get = fields.get if isinstance(fields, dict) else (lambda k: getattr(fields, k))
    return IndexCopyTilingData(*(int(get(k)) for k in IndexCopyTilingData._fields))


# --- index copy: MoeindexCopyOp ---------------------------------------------------------------------------
COPY_IN_QUEUE = 0      # TQueBind<VECIN, VECOUT, 1> copyInQueue (2 buffers of tokenUB bytes)
INDICES_BUFFER = 1     # TQue<VECOUT, 1> indicesBuffer (MoeindexCopyOp) / TQue<VECIN, 1> indicesQueue (split-D)


@aicore
def _core_share(c, td):
    """Init: (first token of this core, tokens, loops, tokens in the last loop, moves in the last loop,
    tokens of its last move) for a front or tail core."""
    if c.block_idx > td.index_copy_front_core_num - 1:
        first = td.index_copy_core_calc_num * td.index_copy_front_core_num + \
            (c.block_idx - td.index_copy_front_core_num) * td.index_copy_core_calc_tail
        return (first, td.index_copy_core_calc_tail, td.index_copy_tail_core_loop,
                td.index_copy_tail_core_last_token_nums, td.index_copy_tail_last_once_indices_token_move_times,
                td.index_copy_tail_last_indices_last_token_nums)
    return (td.index_copy_core_calc_num * c.block_idx, td.index_copy_core_calc_num, td.index_copy_front_core_loop,
            td.index_copy_front_core_last_token_nums, td.index_copy_front_last_once_indices_token_move_times,
            td.index_copy_front_last_indices_last_token_nums)


@aicore
def _dst_row(c, td, tmpl, indices_local, i):
    """Output row of slot i of the UB indices (a scalar read); -1 when the flag drops it: row >= numOutTokens,
    or (routing-map class) an unused -1 slot."""
    row = np.int64(asc.get_value(c, indices_local, i))
    if tmpl.if_num_out_tokens and (row >= td.index_copy_num_out_tokens or (tmpl.routing_map and row == -1)):
        return np.int64(-1)
    return row


@aicore
def _token_unused(c, tmpl, indices_local, i):
    """Routing-map class with its flag: a token whose first slot (at i) is -1 has no slot (they fill r = 0 ..
    count - 1), so the class skips it whole."""
    return tmpl.routing_map != 0 and tmpl.if_num_out_tokens != 0 and asc.get_value(c, indices_local, i) == -1


@aicore
def _copy_out_rows(c, td, gm, tmpl, in_local, indices_local, offset, out_token_num):
    """CopyOut: each of out_token_num rows in UB to its topK output rows (scalar reads of the indices)."""
    cols_align, top_k = td.cols_align, td.top_k
    params = asc.DataCopyExtParams(1, td.index_copy_one_token_btype_size, 0, 0)
    for token in range(out_token_num):
        if _token_unused(c, tmpl, indices_local, offset):
            offset += top_k
            continue
        token_local = in_local[token * cols_align:]
        for k in range(top_k):
            row = _dst_row(c, td, tmpl, indices_local, offset + k)
            if row >= 0:
                asc.data_copy_pad(c, asc.gm_at(gm.permute_tokens, row * td.cols), token_local, params)
        offset += top_k


@aicore
def _copy_batch(c, td, gm, tmpl, src, src_offset, indices_local, inner_loop, tokens):
    """CopyIn `tokens` rows (one DataCopyPad, rows land colsAlign apart), then CopyOut them."""
    T = asc.ub_like(c, gm.tokens)
    in_local = asc.alloc_tensor(c, COPY_IN_QUEUE, T)
    asc.data_copy_pad(c, in_local, asc.gm_at(src, src_offset),
                      asc.DataCopyExtParams(tokens, td.index_copy_one_token_btype_size, 0, 0), asc.NO_PAD)
    asc.en_que(c, COPY_IN_QUEUE, in_local)
    in_local = asc.de_que(c, COPY_IN_QUEUE, T)
    _copy_out_rows(c, td, gm, tmpl, in_local, indices_local, inner_loop * td.index_copy_once_ub_token_nums * td.top_k,
                   tokens)
    asc.free_tensor(c, COPY_IN_QUEUE, in_local)


@aicore
def _copy_in_indices(c, indices_gm, progress, once_indices, count):
    indices_local = asc.alloc_tensor(c, INDICES_BUFFER, asc.ub_i32(c))
    asc.data_copy_pad(c, indices_local, asc.gm_at(indices_gm, progress * once_indices),
                      asc.DataCopyExtParams(1, count * 4, 0, 0), asc.NO_PAD)
    return indices_local


@aicore
def _copy_tokens_sparse(c, td, gm, tmpl, src, src_offset, indices_local, tokens):
    """CopyInPerToken / CopyOutPerToken of the routing-map class (colsAlign >= 256): each token that has a slot
    is read alone and written to its used slots."""
    T = asc.ub_like(c, gm.tokens)
    params = asc.DataCopyExtParams(1, td.index_copy_one_token_btype_size, 0, 0)
    for token in range(tokens):
        base = token * td.top_k
        if _token_unused(c, tmpl, indices_local, base):
            continue
        in_local = asc.alloc_tensor(c, COPY_IN_QUEUE, T)
        asc.data_copy_pad(c, in_local, asc.gm_at(src, src_offset + token * td.cols), params, asc.NO_PAD)
        asc.en_que(c, COPY_IN_QUEUE, in_local)
        in_local = asc.de_que(c, COPY_IN_QUEUE, T)
        for k in range(td.top_k):
            row = _dst_row(c, td, tmpl, indices_local, base + k)
            if row >= 0:
                asc.data_copy_pad(c, asc.gm_at(gm.permute_tokens, row * td.cols), in_local, params)
        asc.free_tensor(c, COPY_IN_QUEUE, in_local)


@aicore
def _sparse(td, tmpl):
    return tmpl.routing_map != 0 and tmpl.if_num_out_tokens != 0 and td.cols_align >= SPARSE_COLS_ALIGN_THRESH


@global_aicore
def index_copy(c, td, gm, tmpl):
    """MoeindexCopyOp::Process: batches of indices, and inside them batches of onceUbTokenNums rows."""
    if c.block_idx >= td.index_copy_need_core_num:
        return
    first, _, core_loop, last_tokens, last_moves, last_move_tokens = _core_share(c, td)
    src = asc.gm_at(gm.tokens, first * td.cols)
    indices_gm = asc.gm_at(gm.sorted_indices, first * td.top_k)
    once_indices = td.index_copy_once_indices_token_nums * td.top_k
    once_ub_cols = td.index_copy_once_ub_token_nums * td.cols
    mte2_to_s = asc.fetch_event_id(c, asc.MTE2_S)
    s_to_mte2 = asc.fetch_event_id(c, asc.S_MTE2)
    out_offset = 0
    for out_loop in range(core_loop - 1):
        indices_local = _copy_in_indices(c, indices_gm, out_loop, once_indices, once_indices)
        asc.set_flag(c, asc.MTE2_S, mte2_to_s)
        asc.wait_flag(c, asc.MTE2_S, mte2_to_s)
        if _sparse(td, tmpl):
            _copy_tokens_sparse(c, td, gm, tmpl, src, out_offset, indices_local, td.index_copy_once_indices_token_nums)
            out_offset += td.index_copy_once_indices_token_nums * td.cols
        else:
            for inner_loop in range(td.index_copy_once_indices_token_move_times):
                _copy_batch(c, td, gm, tmpl, src, out_offset, indices_local, inner_loop,
                            td.index_copy_once_ub_token_nums)
                out_offset += once_ub_cols
        asc.free_tensor(c, INDICES_BUFFER, indices_local)
        asc.set_flag(c, asc.S_MTE2, s_to_mte2)
        asc.wait_flag(c, asc.S_MTE2, s_to_mte2)
    indices_local = _copy_in_indices(c, indices_gm, core_loop - 1, once_indices, last_tokens * td.top_k)
    asc.set_flag(c, asc.MTE2_S, mte2_to_s)
    asc.wait_flag(c, asc.MTE2_S, mte2_to_s)
    if _sparse(td, tmpl):
        _copy_tokens_sparse(c, td, gm, tmpl, src, out_offset, indices_local, last_tokens)
        asc.free_tensor(c, INDICES_BUFFER, indices_local)
        return
    for inner_loop in range(last_moves - 1):
        _copy_batch(c, td, gm, tmpl, src, out_offset, indices_local, inner_loop, td.index_copy_once_ub_token_nums)
        out_offset += once_ub_cols
    _copy_batch(c, td, gm, tmpl, src, out_offset, indices_local, last_moves - 1, last_move_tokens)
    asc.free_tensor(c, INDICES_BUFFER, indices_local)


# --- index copy: MoeindexCopySpiltDOp (one token row in pieces of oneTokenOnceMove elements) -------------
@aicore
def _copy_piece(c, td, gm, tmpl, src, row_offset, col_offset, indices_local, indices_offset, elems):
    """One piece of CopyInAndOut: the piece in once (the DeQue result is the same buffer), then out to each
    of the token's topK rows."""
    T = asc.ub_like(c, gm.tokens)
    params = asc.DataCopyExtParams(1, elems * T.itemsize, 0, 0)
    in_local = asc.alloc_tensor(c, COPY_IN_QUEUE, T)
    asc.data_copy_pad(c, in_local, asc.gm_at(src, row_offset + col_offset), params, asc.NO_PAD)
    asc.en_que(c, COPY_IN_QUEUE, in_local)
    asc.de_que(c, COPY_IN_QUEUE, T)
    for k in range(td.top_k):
        row = _dst_row(c, td, tmpl, indices_local, indices_offset + k)
        if row >= 0:
            asc.data_copy_pad(c, asc.gm_at(gm.permute_tokens, row * td.cols + col_offset), in_local, params)
    asc.free_tensor(c, COPY_IN_QUEUE, in_local)


@aicore
def _copy_row_split(c, td, gm, tmpl, src, row_offset, indices_local, progress):
    """CopyInAndOut: the row's pieces of oneTokenOnceMove elements, the last one oneTokenlastMove."""
    if _token_unused(c, tmpl, indices_local, progress * td.top_k):
        return
    once = td.index_copy_one_token_once_move
    times = td.index_copy_one_token_move_times
    for inner in range(times - 1):
        _copy_piece(c, td, gm, tmpl, src, row_offset, inner * once, indices_local, progress * td.top_k, once)
    _copy_piece(c, td, gm, tmpl, src, row_offset, (times - 1) * once, indices_local, progress * td.top_k,
                td.index_copy_one_token_last_move)


@global_aicore
def index_copy_split_d(c, td, gm, tmpl):
    """MoeindexCopySpiltDOp::Process: per source token, each piece of its row to its topK rows."""
    if c.block_idx >= td.index_copy_need_core_num:
        return
    first, _, core_loop, last_tokens, _, _ = _core_share(c, td)
    src = asc.gm_at(gm.tokens, first * td.cols)
    indices_gm = asc.gm_at(gm.sorted_indices, first * td.top_k)
    once_indices = td.index_copy_once_indices_token_nums * td.top_k
    s_to_mte2 = asc.fetch_event_id(c, asc.S_MTE2)
    offset = 0
    for out_loop in range(core_loop - 1):
        indices_local = _copy_in_indices(c, indices_gm, out_loop, once_indices, once_indices)
        asc.pipe_barrier(c, asc.PIPE_MTE2)
        for inner_loop in range(td.index_copy_once_indices_token_nums):
            _copy_row_split(c, td, gm, tmpl, src, offset, indices_local, inner_loop)
            offset += td.cols
        asc.free_tensor(c, INDICES_BUFFER, indices_local)
        asc.set_flag(c, asc.S_MTE2, s_to_mte2)
        asc.wait_flag(c, asc.S_MTE2, s_to_mte2)
    indices_local = _copy_in_indices(c, indices_gm, core_loop - 1, once_indices, last_tokens * td.top_k)
    asc.pipe_barrier(c, asc.PIPE_MTE2)
    for inner_loop in range(last_tokens):
        _copy_row_split(c, td, gm, tmpl, src, offset, indices_local, inner_loop)
        offset += td.cols
    asc.free_tensor(c, INDICES_BUFFER, indices_local)


