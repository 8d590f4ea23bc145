"""The in-kernel gathers of MoeTokenPermuteWithRoutingMap's drop-and-pad keys on ascend950
(op_kernel/arch35/gather_v2_simt_two_dim.h and gather_v2_simd_two_dim.h; the entry
moe_token_permute_with_routing_map.cpp runs them under __NPU_ARCH__ == 3510).

source: moe/moe_token_permute_with_routing_map/op_kernel/arch35/gather_v2_simt_two_dim.h,
gather_v2_simd_two_dim.h, moe_token_permute_with_routing_map.cpp @ 25fb6b92890d.

After the pad sort has written sortedIndices (E x capacity token ids) and a SyncAll:

* Gatherv2SimtTwoDim::ProbProcess (with probs; one SIMT call per core, no TPipe):
      permuteProbs[y] = probsT[y div capacity, sortedIndices[y]]
  cores below frontCoreNum take frontCoreLoop outputs each from y = blockIdx * frontCoreLoop, the last one
  tailCoreLoop; blockDim.x = onceIndices threads, thread t doing y = t, t + threads, ...
  (sic) onceIndices is also the SIMD gather's index window: under key 9 the tiling overwrites the prob thread
  count with 2048 (INDICES_SIZE / 4), so the call always has 2048 threads there.
* then a SyncAll and the token gather the tiling chose:
  - key 19, Gatherv2SimtTwoDim::Process: element-wise over the E * capacity * cols output,
        permuteTokens[y] = tokens[sortedIndices[y div cols] * cols + y mod cols]
    with needCoreNum / coreCalcNum / tailCoreNum and onceIndicesTokenNums threads.
  - key 9, Gatherv2SimdTwoDim (TPipe MoeindexCopyPipe): cores take coreCalcNum rows (the first tailCoreNum
    cores one more), rows move as bytes: a row is copied in from GM unless its token is one of the last three
    copied in this loop, then it is copied from that UB row instead (Copy, after an MTE2 -> V event); a loop of
    up to tokenUB * oneTokenBtypeSize / colsAlign rows leaves in one multi-block DataCopyPad. A row wider than
    the buffer goes through in tokenUB-element pieces, one at a time (SplitColProcess). Indices come in
    windows of onceIndices (2048) int32 through indexBuf.

The SIMT functions compute in uint32 (INDEX_SIZE_T), as here: indices wrap at 2**32 (beyond any shape the
aclnn accepts for one call on a real UB). Simt::UintDiv with the magic of GetUintDivMagicAndShift is taken as
the exact quotient it stands for. The SIMT bodies are one function (one compile per element width, 2 or 4
bytes); the SIMD gather moves bytes and compiles once.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

GATHER_TD_FIELDS = ("n", "capacity", "need_core_num", "front_core_num", "tail_core_num", "core_calc_num",
                    "one_token_btype_size", "once_ub_token_nums", "once_indices_token_nums", "once_indices",
                    "front_core_loop", "tail_core_loop", "token_ub")
GatherTilingData = namedtuple("GatherTilingData", GATHER_TD_FIELDS)
"""The fields the gathers read: n and capacity of the op's struct, the rest from its indexCopyComputeParamsOp."""

GatherGm = namedtuple("GatherGm", ["x", "indices", "y"])
"""x: the gathered source (probsT (E x N) or tokens (N x cols)), read-only; indices: sortedIndices (int32,
E * capacity), read-only; y: permuteProbs or permuteTokens. SIMT: carrier elements of the dtype's width; SIMD:
bytes (uint8)."""

SIMT_PROB, SIMT_TOKEN = 1, 0        # Init(..., isprob)
UINT32_MASK = 0xFFFFFFFF

SIMD_BUFFERS = ("inQueue", "indexBuf")     # TQueBind<VECIN, VECOUT, 2> inQueue_, TBuf<VECCALC> indexBuf_
IN_QUEUE, INDEX_BUF = asc.buffer_ids(SIMD_BUFFERS, "inQueue", "indexBuf")
_CARRIERS = {2: np.uint16, 4: np.uint32}


def gather_td(td) -> GatherTilingData:
    """GatherTilingData from the op's MoeTokenPermuteWithRoutingMapTilingData."""
    return GatherTilingData(td.n, td.capacity, *(int(getattr(td, "index_copy_" + f)) for f in GATHER_TD_FIELDS[2:]))


def _read_only(data: np.ndarray) -> np.ndarray:
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return data


def simt_gather_gm(x: GlobalTensor, indices: GlobalTensor, y: GlobalTensor) -> GatherGm:
    """GatherGm of a SIMT gather: x and y as unsigned bits of their (common) width, inputs read-only."""
    carrier = _CARRIERS.get(x.data.itemsize)
    if carrier is None or y.data.itemsize != x.data.itemsize:
        raise ValueError(f"Gatherv2SimtTwoDim moves 2- or 4-byte elements of one width; got {x.data.dtype} in, "
                         f"{y.data.dtype} out")
    return GatherGm(x._replace(data=_read_only(x.data.view(carrier))), indices._replace(data=_read_only(indices.data)),
                    y._replace(data=y.data.view(carrier)))


def simd_gather_gm(x: GlobalTensor, indices: GlobalTensor, y: GlobalTensor) -> GatherGm:
    """GatherGm of Gatherv2SimdTwoDim: tokens and permuteTokens as bytes (GlobalTensor<int8_t>)."""
    return GatherGm(x._replace(data=_read_only(x.data.view(np.uint8))), indices._replace(data=_read_only(indices.data)),
                    y._replace(data=y.data.view(np.uint8)))


# --- Gatherv2SimtTwoDim ------------------------------------------------------------------------------------------
@aicore
def _gather_simt_thread(c, th, is_prob, y_base, count, divisor, inner, x, indices, y):
    """GatherSimtProb (is_prob) / GatherSimt: the __simt_vf__ body of one thread, in uint32 arithmetic."""
    index = np.int64(asc.thread_idx(th, 0))
    step = np.int64(asc.thread_num(th, 0))
    while index < count:
        y_index = (y_base + index) & UINT32_MASK
        quotient = y_index // divisor                   # Simt::UintDiv(yIndex, m0, shift0)
        if is_prob:
            # divisor = capacity, inner = tokenNum: the token id within the expert's row of probsT
            x_index = (np.int64(asc.simt_load(c, th, indices, y_index)) + quotient * inner) & UINT32_MASK
        else:
            # divisor = inner = cols: gather row quotient, element y_index - quotient * cols of it
            x_index = (np.int64(asc.simt_load(c, th, indices, quotient)) * inner + y_index - quotient * inner) \
                & UINT32_MASK
        asc.simt_store(c, th, y, y_index, asc.simt_load(c, th, x, x_index))
        index += step


@global_aicore
def gather_simt_stage(c, td, gm, is_prob):
    """Gatherv2SimtTwoDim::Init(..., isprob) + ProbProcess (is_prob 1) / Process (0) on this core."""
    if is_prob:
        need = td.front_core_num
        threads = td.once_indices
        per_core = td.front_core_loop
        count = td.tail_core_loop if c.block_idx == need - 1 else per_core
        divisor = td.capacity
        inner = td.n
    else:
        need = td.need_core_num
        threads = td.once_indices_token_nums
        per_core = td.core_calc_num
        count = td.tail_core_num if c.block_idx == need - 1 else per_core
        divisor = td.once_ub_token_nums
        inner = divisor
    if c.block_idx >= need:
        return
    y_base = (c.block_idx * per_core) & UINT32_MASK
    count = count & UINT32_MASK
    sc = asc.simt_vf_call(c, threads, 1, 1)     # asc_vf_call<GatherSimt(Prob)<false>>(dim3(threadNum), ...)
    for t in range(sc.threads):
        _gather_simt_thread(c, asc.simt_thread(c, sc, t), is_prob, y_base, count, divisor, inner, gm.x, gm.indices,
                            gm.y)
    asc.simt_end(c, sc)


# --- Gatherv2SimdTwoDim ------------------------------------------------------------------------------------------
@aicore
def _core_range(c, td):
    """CalculateCoreRange: (yStart, yEnd) rows of this core."""
    i = c.block_idx
    if i < td.tail_core_num:
        start = (td.core_calc_num + 1) * i
        return start, start + td.core_calc_num + 1
    start = td.core_calc_num * i + td.tail_core_num
    return start, start + td.core_calc_num


@aicore
def _get_index(c, td, gm, window, idx, end_idx):
    """GetIndex: sortedIndices[idx], the window [window[0], window[0] + window[1]) refilled from idx when idx is
    past it."""
    if idx >= window[0] + window[1]:
        length = min(end_idx - idx, td.once_indices)
        window[0] = idx
        window[1] = length
        index_local = asc.tbuf_get(c, INDEX_BUF, asc.ub_i32(c))
        asc.data_copy_pad(c, index_local, asc.gm_at(gm.indices, idx), asc.DataCopyExtParams(1, length * 4, 0, 0),
                          asc.NO_PAD)
        evt = asc.fetch_event_id(c, asc.MTE2_S)
        asc.set_flag(c, asc.MTE2_S, evt)
        asc.wait_flag(c, asc.MTE2_S, evt)
    index_local = asc.tbuf_get(c, INDEX_BUF, asc.ub_i32(c))
    return np.int64(asc.get_value(c, index_local, idx - window[0]))


@aicore
def _simd_copy_out(c, gm, offset, blocks, block_bytes):
    """CopyOut: DeQue the rows, V -> MTE3, one DataCopyPad of `blocks` rows of block_bytes (UB rows 32-byte
    aligned, GM rows back to back)."""
    y_local = asc.de_que(c, IN_QUEUE, asc.ub_u8(c))
    evt = asc.fetch_event_id(c, asc.V_MTE3)
    asc.set_flag(c, asc.V_MTE3, evt)
    asc.wait_flag(c, asc.V_MTE3, evt)
    asc.data_copy_pad(c, asc.gm_at(gm.y, offset), y_local, asc.DataCopyExtParams(blocks, block_bytes, 0, 0))
    asc.free_tensor(c, IN_QUEUE, y_local)


@aicore
def _no_split_col(c, td, gm, cols_align, window):
    """NoSplitColProcess: whole rows, up to tokenUB * oneTokenBtypeSize / colsAlign of them per loop."""
    y_start, y_end = _core_range(c, td)
    rows_total = y_end - y_start
    row_bytes = td.once_ub_token_nums * td.one_token_btype_size
    max_rows = td.token_ub * td.one_token_btype_size // cols_align
    loops = (rows_total + max_rows - 1) // max_rows
    for i in range(loops):
        rows = rows_total - i * max_rows if i == loops - 1 else max_rows
        x_local = asc.alloc_tensor(c, IN_QUEUE, asc.ub_u8(c))
        evt = asc.fetch_event_id(c, asc.MTE3_V)
        asc.set_flag(c, asc.MTE3_V, evt)
        asc.wait_flag(c, asc.MTE3_V, evt)
        pre0, pre1, pre2 = np.int64(-1), np.int64(-1), np.int64(-1)
        back0, back1, back2 = np.int64(0), np.int64(0), np.int64(0)
        for j in range(rows):
            x_index = _get_index(c, td, gm, window, y_start + i * max_rows + j, y_end) * td.once_ub_token_nums
            if x_index == pre0 or x_index == pre1 or x_index == pre2:
                evt = asc.fetch_event_id(c, asc.MTE2_V)
                asc.set_flag(c, asc.MTE2_V, evt)
                asc.wait_flag(c, asc.MTE2_V, evt)
                back = back0 if x_index == pre0 else (back1 if x_index == pre1 else back2)
                asc.copy_count(c, x_local[j * cols_align:], x_local[back:], row_bytes)
            else:
                asc.data_copy_pad(c, x_local[j * cols_align:], asc.gm_at(gm.x, x_index * td.one_token_btype_size),
                                  asc.DataCopyExtParams(1, row_bytes, 0, 0), asc.NO_PAD)
                pre2, pre1, pre0 = pre1, pre0, x_index
                back2, back1, back0 = back1, back0, np.int64(j * cols_align)
        asc.en_que(c, IN_QUEUE, x_local)
        _simd_copy_out(c, gm, (y_start + i * max_rows) * row_bytes, rows, row_bytes)


@aicore
def _split_col(c, td, gm, window):
    """SplitColProcess: one row at a time, in pieces of tokenUB elements of oneTokenBtypeSize bytes."""
    y_start, y_end = _core_range(c, td)
    once = td.once_ub_token_nums
    piece = td.token_ub
    btype = td.one_token_btype_size
    pieces = (once + piece - 1) // piece
    for i in range(y_start, y_end):
        x_index = _get_index(c, td, gm, window, i, y_end) * once
        y_index = i * once
        for j in range(pieces):
            cols = once - j * piece if j == pieces - 1 else piece
            x_local = asc.alloc_tensor(c, IN_QUEUE, asc.ub_u8(c))
            asc.data_copy_pad(c, x_local, asc.gm_at(gm.x, (x_index + j * piece) * btype),
                              asc.DataCopyExtParams(1, cols * btype, 0, 0), asc.NO_PAD)
            asc.en_que(c, IN_QUEUE, x_local)
            _simd_copy_out(c, gm, (y_index + j * piece) * btype, 1, cols * btype)


@global_aicore
def gather_simd_stage(c, td, gm):
    """Gatherv2SimdTwoDim<int32_t>::Process on this core (Init's InitBuffer rows: the pipe's plan)."""
    if c.block_idx >= td.need_core_num:
        return
    cols_align = (td.once_ub_token_nums * td.one_token_btype_size + BLOCK_BYTES - 1) // BLOCK_BYTES \
        * BLOCK_BYTES
    window = np.zeros(2, dtype=np.int64)     # indicesOffsetBase_, curIndexSize_
    if cols_align <= td.token_ub * td.one_token_btype_size:
        _no_split_col(c, td, gm, cols_align, window)
    else:
        _split_col(c, td, gm, window)
