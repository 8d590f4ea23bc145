"""Kernels of MoeTokenUnpermuteGrad, one per AscendC kernel class (op_kernel/).

source: moe/moe_token_unpermute_grad/op_kernel/moe_token_unpermute_grad.cpp, moe_token_unpermute_grad_base.h,
moe_token_unpermute_grad_prob_none.h, moe_token_unpermute_grad_prob_not_none.h @ 25fb6b92890d.

    moe_token_unpermute_grad_base.h          -> ops/common/core_split (Base::Init), ops/common/reduce_sum
    moe_token_unpermute_grad_prob_none.h     key 0 -> prob_none_process
    moe_token_unpermute_grad_prob_not_none.h key 1 -> prob_not_none_process

Every stage takes (c, td, gm, tmpl): the core, the tiling struct (TilingData namedtuple), the GM tensors
(GmTensors) and the template parameters (Template).

Compilation: token and probs data move through both kernels as BYTES (uint8 GM views and UB views);
their types come from the dtype codes in the template and the vector calls see uint16 / fp32 views
of the same bytes. Each stage therefore compiles exactly once, for every token x probs dtype pair and
for both chip families.

The Ascend 950 path does not run these kernels: its aclnn launches l0op::MoeFinalizeRoutingV2Grad
(ops.l0.moe_finalize_routing_v2_grad).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.check import InitWaiver, RaceWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math
from ops.common.core_split import former_tail_offsets
from ops.common.reduce_sum import FP32_ONE_REPEAT, copy_fp32, reduce_sum

OP = "MoeTokenUnpermuteGrad"

GmTensors = namedtuple("GmTensors", [
    "permuted_tokens",         # permutedTokensGm (len(S), H) bytes, read-only (empty when absent)
    "unpermuted_tokens_grad",  # unpermutedOutputDGm (N, H) bytes, read-only
    "sorted_indices",          # sortedIndicesGm (N * K) int32, read-only
    "probs",                   # probGm (N, K) bytes, read-only (empty without probs)
    "permuted_tokens_grad",    # permutedTokensGradGm (len(S), H) bytes, output
    "probs_grad",              # probGradGm (N, K) bytes, output
])

Template = namedtuple("Template", ["token_t", "probs_t"])
"""OriT and ProbT as ge dtype codes (probs_t = token_t without probs)."""

STRICT = 0                        # this op's ReduceSumFunc tiers are inclusive (>= 4096 / 512 / 64)
INDICES_PROBS_MAX_RESERVE_NUM = 512

ARR_INDICES = 1                   # scalar-array ids for fault messages
ARR_PROBS = 2


@aicore
def _bytes_of(dt):
    """sizeof(OriT) / sizeof(ProbT) from a ge dtype code (fp32 4, fp16 / bf16 2)."""
    return 4 if dt == asc.DT_FLOAT else 2


@aicore
def _row_written(index, num_out_tokens):
    """Whether slot index `index` addresses a row: < numOutTokens (a negative one addresses GM before the
    tensor, which the simulator reports)."""
    return index < num_out_tokens


# --- key 0: probs absent, pure copies ---------------------------------------------------------------
# TQue<VECIN, 2> inQueueRowIdMap: indicesReserveNum int32; TQueBind<VECIN, VECOUT, 1> inOutque: inputReserveNum x
# hiddenSizeAlign tokens, 2 buffers
PROB_NONE_BUFFERS = ("inQueueRowIdMap", "inOutque")
IN_QUEUE_ROW_ID_MAP, IN_OUT_QUE = asc.buffer_ids(PROB_NONE_BUFFERS, *PROB_NONE_BUFFERS)


@global_aicore
def prob_none_process(c, td, gm, tmpl):
    """Key 0: permutedTokensGrad[S[j]] = unpermutedTokensGrad[j] (topK is 1), rows with S[j] >= numOutTokens
    skipped. Batches of indicesReserveNum rows: the indices, then per hidden piece one strided multi-row
    DataCopyPad of the gradient rows and one DataCopyPad out per row to the row its index names."""
    row_start, _ = former_tail_offsets(c, td)
    indices_core_num = td.row_id_map_each_core if c.block_idx < td.former_core_num else td.row_id_map_tail_core
    indices_each_loop = td.indices_reserve_num
    indices_loop_times = int_math.ceil_div(indices_core_num, indices_each_loop)
    indices_last_loop = indices_core_num - indices_each_loop * (indices_loop_times - 1)
    tok = _bytes_of(tmpl.token_t)
    input_block_num = 32 // tok
    h = td.hidden_size
    B = asc.ub_u8(c)
    I = asc.ub_like(c, gm.sorted_indices)
    for indices_loop_time in range(indices_loop_times):
        # the kernel keeps the batch length in a uint16_t
        indices_loop_num = (indices_last_loop if indices_loop_time == indices_loop_times - 1
                            else indices_each_loop) & 0xFFFF
        row_id_map_loop_offset = row_start + indices_loop_time * indices_each_loop
        row_id_map_local = asc.alloc_tensor(c, IN_QUEUE_ROW_ID_MAP, I)
        asc.data_copy_pad(c, row_id_map_local, asc.gm_at(gm.sorted_indices, row_id_map_loop_offset),
                          asc.DataCopyExtParams(1, indices_loop_num * I.itemsize, 0, 0), asc.NO_PAD)
        asc.en_que(c, IN_QUEUE_ROW_ID_MAP, row_id_map_local)
        row_id_map_local = asc.de_que(c, IN_QUEUE_ROW_ID_MAP, I)
        for hidden_loop in range(td.hidden_size_loop_times):
            hidden_loop_num = td.hidden_size_tail if hidden_loop == td.hidden_size_loop_times - 1 \
                else td.hidden_size_align
            block_len = hidden_loop_num * tok
            hidden_loop_offset = hidden_loop * td.hidden_size_align
            # indicesLoopNum consecutive gradient rows in one strided copy (each row lands 32-byte aligned)
            in_out_local = asc.alloc_tensor(c, IN_OUT_QUE, B)
            grad_offset = (row_id_map_loop_offset * h + hidden_loop_offset) * tok
            asc.data_copy_pad(c, in_out_local, asc.gm_at(gm.unpermuted_tokens_grad, grad_offset),
                              asc.DataCopyExtParams(indices_loop_num, block_len, (h - hidden_loop_num) * tok, 0),
                              asc.NO_PAD)
            asc.en_que(c, IN_OUT_QUE, in_out_local)
            in_out_local = asc.de_que(c, IN_OUT_QUE, B)
            row_bytes = int_math.ceil_div(hidden_loop_num, input_block_num) * input_block_num * tok
            out_params = asc.DataCopyExtParams(1, block_len, 0, 0)
            for index in range(indices_loop_num):
                offset = np.int64(asc.get_value(c, row_id_map_local, index))
                if _row_written(offset, td.num_out_tokens):
                    asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, (offset * h + hidden_loop_offset) * tok),
                                      in_out_local[index * row_bytes:], out_params)
            asc.free_tensor(c, IN_OUT_QUE, in_out_local)
        asc.free_tensor(c, IN_QUEUE_ROW_ID_MAP, row_id_map_local)


# --- key 1: probs present ----------------------------------------------------------------------------
PROB_NOT_NONE_BUFFERS = (           # TBufs, in InitBuffer order:
    "inQueueUnpermuted",                # 2 x hiddenSizeAlign tokens (manual ping-pong)
    "inQueuePermutedTokens",            # 2 x inputReserveNum x hiddenSizeAlign tokens
    "inQueueProb",                      # 2 x indicesReserveNumAlign probs
    "outQueueProbGrad",                 # 2 x indicesReserveNumAlign probs
    "outQueuePermutedTokensGrad",       # 2 x hiddenSizeAlign tokens
    "tmpBufferPermutedTokensCast",      # fp32 hiddenSizeAlign (also ReduceSumFunc's scratch)
    "tmpBufferReserve",                 # 256 bytes after it
    "tmpBufferUnpermutedCast",          # fp32 hiddenSizeAlign
    "tmpBufferProbGradReduceSum",       # fp32 indicesReserveNumAlign: accumulated over hidden pieces
    "tmpBufferProbCast",                # fp32 indicesReserveNumAlign
    "tmpBufferProbGradCast",            # fp32 indicesReserveNumAlign: one piece's row sums
    "tmpBufferPermutedTokensGrad")      # fp32 hiddenSizeAlign
(IN_QUEUE_UNPERMUTED, IN_QUEUE_PERMUTED_TOKENS, IN_QUEUE_PROB, OUT_QUEUE_PROB_GRAD, OUT_QUEUE_PERMUTED_TOKENS_GRAD,
 TMP_BUFFER_PERMUTED_TOKENS_CAST, TMP_BUFFER_RESERVE, TMP_BUFFER_UNPERMUTED_CAST, TMP_BUFFER_PROB_GRAD_REDUCE_SUM,
 TMP_BUFFER_PROB_CAST, TMP_BUFFER_PROB_GRAD_CAST, TMP_BUFFER_PERMUTED_TOKENS_GRAD) = asc.buffer_ids(
    PROB_NOT_NONE_BUFFERS, *PROB_NOT_NONE_BUFFERS)

EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 = range(8)


@aicore
def _widen(c, dt, dst_f32, src_bytes, n, repeat_times, tail_offset, tail_mask):
    """fp32 input: the Copy pair over the aligned length; fp16 / bf16: Cast CAST_NONE of n elements."""
    if dt == asc.DT_FLOAT:
        copy_fp32(c, dst_f32, asc.view_as(c, src_bytes, asc.ub_f32(c)), repeat_times, tail_offset, tail_mask)
    else:
        asc.cast(c, dst_f32, asc.DT_FLOAT, asc.view_as(c, src_bytes, asc.ub_u16(c)), dt, asc.CAST_NONE, n)


@aicore
def _narrow(c, dt, dst_bytes, src_f32, n, repeat_times, tail_offset, tail_mask):
    """fp32 output: the Copy pair; fp16 / bf16: Cast CAST_RINT of n elements."""
    if dt == asc.DT_FLOAT:
        copy_fp32(c, asc.view_as(c, dst_bytes, asc.ub_f32(c)), src_f32, repeat_times, tail_offset, tail_mask)
    else:
        asc.cast(c, asc.view_as(c, dst_bytes, asc.ub_u16(c)), dt, src_f32, asc.DT_FLOAT, asc.CAST_RINT, n)


@global_aicore
def prob_not_none_process(c, td, gm, tmpl):
    """Key 1, slot j = t * topK + k of token t: permutedTokensGrad[S[j]] = G[t] * probs[t, k] (CAST_RINT) and
    probsGrad[t, k] = sum_h permutedTokens[S[j], h] * G[t, h] (ReduceSumFunc per hidden piece, pieces added in
    order), both in fp32. A slot with S[j] >= numOutTokens writes no row and sums a zero row."""
    row_start, token_start = former_tail_offsets(c, td)
    top_k, h = td.top_k, td.hidden_size
    tok = _bytes_of(tmpl.token_t)
    pb = _bytes_of(tmpl.probs_t)
    h_align = td.hidden_size_align
    idx_align = td.indices_reserve_num_align
    input_each_loop = td.input_reserve_num
    indices_each_loop = td.indices_reserve_num
    indices_num_each_core = td.row_id_map_each_core if c.block_idx < td.former_core_num else td.row_id_map_tail_core
    indices_loop_times = int_math.ceil_div(indices_num_each_core, indices_each_loop)
    indices_last_loop = indices_num_each_core - indices_each_loop * (indices_loop_times - 1)
    permute_in_top_k_loop_times = int_math.safe_div(top_k, input_each_loop)
    idx_repeat_times = idx_align // FP32_ONE_REPEAT
    idx_tail_mask = idx_align % FP32_ONE_REPEAT
    idx_tail_offset = idx_repeat_times * FP32_ONE_REPEAT
    h_repeat_times = h_align // FP32_ONE_REPEAT
    h_tail_mask = h_align % FP32_ONE_REPEAT
    h_tail_offset = h_repeat_times * FP32_ONE_REPEAT

    B = asc.ub_u8(c)
    F32 = asc.ub_f32(c)
    tmp_buffer_prob_fp32 = asc.tbuf_get(c, TMP_BUFFER_PROB_CAST, F32)
    tmp_buffer_prob_grad_reduce_sum_fp32 = asc.tbuf_get(c, TMP_BUFFER_PROB_GRAD_REDUCE_SUM, F32)
    tmp_buffer_unpermuted_fp32 = asc.tbuf_get(c, TMP_BUFFER_UNPERMUTED_CAST, F32)
    tmp_buffer_permuted_tokens_grad_fp32 = asc.tbuf_get(c, TMP_BUFFER_PERMUTED_TOKENS_GRAD, F32)
    tmp_buffer_permuted_tokens_fp32 = asc.tbuf_get(c, TMP_BUFFER_PERMUTED_TOKENS_CAST, F32)
    tmp_buffer_prob_grad_fp32 = asc.tbuf_get(c, TMP_BUFFER_PROB_GRAD_CAST, F32)

    # the kernel's scalar arrays (it keeps indices and probs out of UB to avoid GetValue)
    indices_array = np.zeros(INDICES_PROBS_MAX_RESERVE_NUM, dtype=np.int64)
    probs_array = np.zeros(INDICES_PROBS_MAX_RESERVE_NUM, dtype=np.float32)
    ping_pong_probs = 0
    ping_pong_unpermute = 0
    ping_pong_permute_token = 0
    ping_pong_permute_token_grad = 0
    ping_pong_probs_grad = 0

    for evt_id in range(8):
        asc.set_flag(c, asc.V_MTE2, evt_id)
    asc.set_flag(c, asc.MTE3_V, EVENT_ID0)
    asc.set_flag(c, asc.MTE3_V, EVENT_ID1)
    for indices_loop in range(indices_loop_times):
        indices_num_loop = indices_last_loop if indices_loop == indices_loop_times - 1 else indices_each_loop
        indices_loop_offset = indices_loop * indices_each_loop
        loop_offset = row_start + indices_loop_offset
        for i in range(indices_num_loop):    # scalar GM reads of the batch's indices
            asc.scalar_store(c, indices_array, i, asc.get_value(c, gm.sorted_indices, loop_offset + i), ARR_INDICES)

        # the batch's probs (ping-pong on events 2 / 3), widened to fp32 and kept as scalars
        event_probs = EVENT_ID2 if ping_pong_probs else EVENT_ID3
        asc.wait_flag(c, asc.V_MTE2, event_probs)
        in_queue_prob_local = asc.tbuf_get_with_offset(c, IN_QUEUE_PROB, B, idx_align * pb,
                                                       idx_align * pb * ping_pong_probs)
        asc.data_copy_pad(c, in_queue_prob_local, asc.gm_at(gm.probs, loop_offset * pb),
                          asc.DataCopyExtParams(1, indices_num_loop * pb, 0, 0), asc.NO_PAD)
        asc.set_flag(c, asc.MTE2_V, event_probs)
        asc.wait_flag(c, asc.MTE2_V, event_probs)
        _widen(c, tmpl.probs_t, tmp_buffer_prob_fp32, in_queue_prob_local, indices_num_loop, idx_repeat_times,
               idx_tail_offset, idx_tail_mask)
        asc.set_flag(c, asc.V_MTE2, event_probs)
        ping_pong_probs = 1 - ping_pong_probs
        for i in range(indices_num_loop):
            asc.scalar_store(c, probs_array, i, asc.get_value(c, tmp_buffer_prob_fp32, i), ARR_PROBS)

        asc.duplicate(c, tmp_buffer_prob_grad_reduce_sum_fp32, 0.0, idx_align)
        for hidden_loop in range(td.hidden_size_loop_times):
            n = td.hidden_size_tail if hidden_loop == td.hidden_size_loop_times - 1 else h_align
            h_off = hidden_loop * h_align
            row_params = asc.DataCopyExtParams(1, n * tok, 0, 0)
            top_k_in_indices_loop_times = int_math.safe_div(indices_num_loop, top_k)
            for top_k_in_indices_loop in range(top_k_in_indices_loop_times):
                # one gradient row piece (ping-pong on events 4 / 5), widened to fp32
                unpermuted_index = int_math.safe_div(indices_loop_offset, top_k) + top_k_in_indices_loop
                unpermuted_offset = (token_start + unpermuted_index) * h + h_off
                event_unpermute = EVENT_ID4 if ping_pong_unpermute else EVENT_ID5
                asc.wait_flag(c, asc.V_MTE2, event_unpermute)
                in_queue_unpermuted_local = asc.tbuf_get_with_offset(c, IN_QUEUE_UNPERMUTED, B, h_align * tok,
                                                                     h_align * tok * ping_pong_unpermute)
                asc.data_copy_pad(c, in_queue_unpermuted_local,
                                  asc.gm_at(gm.unpermuted_tokens_grad, unpermuted_offset * tok), row_params, asc.NO_PAD)
                asc.set_flag(c, asc.MTE2_V, event_unpermute)
                asc.wait_flag(c, asc.MTE2_V, event_unpermute)
                _widen(c, tmpl.token_t, tmp_buffer_unpermuted_fp32, in_queue_unpermuted_local, n, h_repeat_times,
                       h_tail_offset, h_tail_mask)
                asc.set_flag(c, asc.V_MTE2, event_unpermute)
                ping_pong_unpermute = 1 - ping_pong_unpermute

                for permute_in_top_k_loop in range(permute_in_top_k_loop_times):
                    # inputReserveNum permuted rows of this token (ping-pong on events 6 / 7); a row past
                    # numOutTokens is zero-filled instead
                    event_permute = EVENT_ID6 if ping_pong_permute_token else EVENT_ID7
                    asc.wait_flag(c, asc.V_MTE2, event_permute)
                    input_loop_start = top_k_in_indices_loop * top_k + permute_in_top_k_loop * input_each_loop
                    group_bytes = input_each_loop * h_align * tok
                    in_queue_permuted_tokens_local = asc.tbuf_get_with_offset(
                        c, IN_QUEUE_PERMUTED_TOKENS, B, group_bytes, group_bytes * ping_pong_permute_token)
                    for input_loop in range(input_each_loop):
                        input_loop_offset = asc.scalar_load(c, indices_array, input_loop_start + input_loop,
                                                            ARR_INDICES)
                        row_local = in_queue_permuted_tokens_local[input_loop * h_align * tok:]
                        if _row_written(input_loop_offset, td.num_out_tokens):
                            asc.data_copy_pad(c, row_local,
                                              asc.gm_at(gm.permuted_tokens, (input_loop_offset * h + h_off) * tok),
                                              row_params, asc.NO_PAD)
                        elif tok == 4:
                            asc.duplicate(c, asc.view_as(c, row_local, F32), 0.0, h_align)
                        else:
                            asc.duplicate(c, asc.view_as(c, row_local, asc.ub_u16(c)), 0, h_align)
                    asc.set_flag(c, asc.MTE2_V, event_permute)
                    asc.wait_flag(c, asc.MTE2_V, event_permute)
                    for permute_loop in range(input_each_loop):
                        indices_index = input_loop_start + permute_loop
                        input_grad_offset = asc.scalar_load(c, indices_array, indices_index, ARR_INDICES)
                        written = _row_written(input_grad_offset, td.num_out_tokens)
                        # permuted-token gradient: G * prob (ping-pong on MTE3 -> V events 0 / 1)
                        if written:
                            asc.muls(c, tmp_buffer_permuted_tokens_grad_fp32, tmp_buffer_unpermuted_fp32,
                                     asc.scalar_load(c, probs_array, indices_index, ARR_PROBS), n)
                        else:
                            asc.duplicate(c, tmp_buffer_permuted_tokens_grad_fp32, 0.0, h_align)
                        event_v_mte3 = EVENT_ID0 if ping_pong_permute_token_grad else EVENT_ID1
                        asc.wait_flag(c, asc.MTE3_V, event_v_mte3)
                        permuted_tokens_grad_local = asc.tbuf_get_with_offset(
                            c, OUT_QUEUE_PERMUTED_TOKENS_GRAD, B, h_align * tok,
                            h_align * tok * ping_pong_permute_token_grad)
                        _narrow(c, tmpl.token_t, permuted_tokens_grad_local, tmp_buffer_permuted_tokens_grad_fp32, n,
                                h_repeat_times, h_tail_offset, h_tail_mask)
                        asc.set_flag(c, asc.V_MTE3, event_v_mte3)
                        asc.wait_flag(c, asc.V_MTE3, event_v_mte3)
                        if written:
                            asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad,
                                                           (input_grad_offset * h + h_off) * tok),
                                              permuted_tokens_grad_local, row_params)
                        asc.set_flag(c, asc.MTE3_V, event_v_mte3)
                        ping_pong_permute_token_grad = 1 - ping_pong_permute_token_grad
                        # probs gradient of the piece: sum_h permuted * G
                        _widen(c, tmpl.token_t, tmp_buffer_permuted_tokens_fp32,
                               in_queue_permuted_tokens_local[permute_loop * h_align * tok:], n, h_repeat_times,
                               h_tail_offset, h_tail_mask)
                        asc.mul(c, tmp_buffer_permuted_tokens_fp32, tmp_buffer_permuted_tokens_fp32,
                                tmp_buffer_unpermuted_fp32, n)
                        reduce_sum(c, tmp_buffer_prob_grad_fp32[indices_index:], tmp_buffer_permuted_tokens_fp32, n,
                                   STRICT)
                    asc.set_flag(c, asc.V_MTE2, event_permute)
                    ping_pong_permute_token = 1 - ping_pong_permute_token
            asc.add(c, tmp_buffer_prob_grad_reduce_sum_fp32, tmp_buffer_prob_grad_reduce_sum_fp32,
                    tmp_buffer_prob_grad_fp32, indices_num_loop)

        # the batch's probs gradient in the probs dtype (ping-pong on MTE3 -> V events 0 / 1)
        event_v_mte3 = EVENT_ID0 if ping_pong_probs_grad else EVENT_ID1
        asc.wait_flag(c, asc.MTE3_V, event_v_mte3)
        prob_grad_local = asc.tbuf_get_with_offset(c, OUT_QUEUE_PROB_GRAD, B, idx_align * pb,
                                                   idx_align * pb * ping_pong_probs_grad)
        _narrow(c, tmpl.probs_t, prob_grad_local, tmp_buffer_prob_grad_reduce_sum_fp32, indices_num_loop,
                idx_repeat_times, idx_tail_offset, idx_tail_mask)
        asc.set_flag(c, asc.V_MTE3, event_v_mte3)
        asc.wait_flag(c, asc.V_MTE3, event_v_mte3)
        asc.data_copy_pad(c, asc.gm_at(gm.probs_grad, loop_offset * pb), prob_grad_local,
                          asc.DataCopyExtParams(1, indices_num_loop * pb, 0, 0))
        asc.set_flag(c, asc.MTE3_V, event_v_mte3)
        ping_pong_probs_grad = 1 - ping_pong_probs_grad
    for evt_id in range(8):
        asc.wait_flag(c, asc.V_MTE2, evt_id)
    asc.wait_flag(c, asc.MTE3_V, EVENT_ID0)
    asc.wait_flag(c, asc.MTE3_V, EVENT_ID1)


# --- the kernel entry: TILING_KEY_IS dispatch ---------------------------------------------------------

# the real ProbNotNone kernel widens the probs to fp32 (Cast, or Copy for fp32 probs) and reads them with GetValue
# with no V -> S event in between (moe_token_unpermute_grad_prob_not_none.h): checked mode lets those two pass
# fp32 rows are widened by the Copy pair over hiddenSizeAlign lanes after a DataCopyPad of hiddensizeLoopNum: the
# lanes past the row were never written (the lanes of the other operand there are never written either, and
# neither is copied out); checked mode "init" lets those reads pass
FP32_ROW_TAIL_READS = (
    InitWaiver("inQueueUnpermuted", "moe/moe_token_unpermute_grad/op_kernel/moe_token_unpermute_grad_prob_not_none.h"
               ":213-219 @ 25fb6b92890d: Copy of hiddenSizeAlign fp32 lanes after the DataCopyPad of "
               "hiddensizeLoopNum (:207)"),
    InitWaiver("inQueueProb", "moe/moe_token_unpermute_grad/op_kernel/moe_token_unpermute_grad_prob_not_none.h"
               ":171-175 @ 25fb6b92890d: the Copy pair of fp32 probs over indicesReserveNumAlign lanes after the "
               "DataCopyPad of indicesNumLoop (:167)"),
    InitWaiver("inQueuePermutedTokens", "moe/moe_token_unpermute_grad/op_kernel/"
               "moe_token_unpermute_grad_prob_not_none.h:306-313 @ 25fb6b92890d: the same Copy pair over a permuted "
               "row"),
    InitWaiver("tmpBufferPermutedTokensGrad", "moe/moe_token_unpermute_grad/op_kernel/"
               "moe_token_unpermute_grad_prob_not_none.h:265 (Muls of hiddensizeLoopNum) and :280-286 (the Copy pair "
               "over hiddenSizeAlign into the out row) @ 25fb6b92890d"))
PROBS_READ_RACES = tuple(RaceWaiver("V", call, "S", "LocalTensor::GetValue", "the real kernel reads the widened "
                                    "probs with GetValue with no V -> S event") for call in ("Cast", "Copy"))
KERNELS = {
    0: Kernel.single_pipe(OP, "MoeTokenUnpermuteGradProbNone", (prob_none_process,),
                          PROB_NONE_BUFFERS),
    1: Kernel.single_pipe(OP, "MoeTokenUnpermuteGradProbNotNone", (prob_not_none_process,), PROB_NOT_NONE_BUFFERS,
                          waivers=PROBS_READ_RACES + FP32_ROW_TAIL_READS),
}
