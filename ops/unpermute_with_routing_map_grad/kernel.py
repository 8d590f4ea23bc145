"""Kernels of MoeTokenUnpermuteWithRoutingMapGrad on 910B / 910_93 (membase), one per AscendC kernel class.

source: moe/moe_token_unpermute_with_routing_map_grad/op_kernel/moe_token_unpermute_with_routing_map_grad.cpp and
op_kernel/moe_token_unpermute_with_routing_map_grad_*.h @ 25fb6b92890d. Layout mirrored:

    moe_token_unpermute_with_routing_map_grad_base.h             -> base helpers below
    ..._prob_none_drop_pad_false.h        key 0                    -> prob_none_drop_pad_false
    ..._prob_none_drop_pad_true.h         key 10                   -> prob_none_drop_pad_true
    ..._prob_not_none_drop_pad_true.h     keys 11, 111             -> prob_not_none_drop_pad_true_*
    ..._prob_not_none_drop_pad_false.h    keys 1, 101              -> prob_not_none_drop_pad_false_*
    arch35/ (Ascend 950, _apt.cpp)        same keys                -> arch35.py (keys 0 / 10 shared)

Every stage takes (c, td, gm, tmpl): the core, the tiling struct (TilingData namedtuple),
the GM tensors (GmTensors) and the template parameters (Template). A kernel with SyncAll()
is split into an init stage and a process stage at that call.

fp16 / bf16 GM and UB data are uint16 bit patterns; `tmpl.permuted_token_t` / `tmpl.probs_t`
say which (ge dtype codes), as PermutedTokenT / ProbsT do in the C++ templates.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.check import OverlapWaiver, RaceWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math
from ops.common.core_split import former_tail_offsets
from ops.common.reduce_sum import FP32_ONE_REPEAT, reduce_sum
from ops.common.reduce_sum import copy_fp32 as _copy_fp32

OP = "MoeTokenUnpermuteWithRoutingMapGrad"

GmTensors = namedtuple("GmTensors", [
    "unpermuted_tokens_grad",  # unpermutedTokensGradGm (N, H)
    "out_index",               # sortedTwiceIndexGm: permuted row of each slot (M,)
    "permute_token_id",        # sortedTwiceIndicesGm: token of each slot (M,)
    "routing_map",             # routingMapGm, int8 view of bool/int8 (N, E)
    "permuted_tokens",         # permutedTokensGm (M, H)
    "probs",                   # probGm (N, E)
    "permuted_tokens_grad",    # permutedTokensGradGm (M, H), output
    "probs_grad",              # probGradGm (N, E), output
])

Template = namedtuple("Template", ["permuted_token_t", "probs_t"])
"""PermutedTokenT and ProbsT as ge dtype codes."""

# --- base: moe_token_unpermute_with_routing_map_grad_base.h -------------------------------------
INDICES_PROBS_MAX_RESERVE_NUM = 512
STRICT = 1                 # ReduceSumFunc tiers of this op are strict (> 4096 / 512 / 64)

# scalar-array ids for fault messages
ARR_INDICES = 1
ARR_PROBS = 2
ARR_PROBS_ADDR = 3


@aicore
def _hidden_piece(td, hidden_loop):
    """(elements, element offset) of hidden piece `hidden_loop`; the last piece is the tail."""
    n = td.hidden_size_tail if hidden_loop == td.hidden_size_loop_times - 1 else td.hidden_size_align
    return n, hidden_loop * td.hidden_size_align


# --- keys 0 and 10: probs absent, pure copies -------------------------------------------------------
PAD_FALSE_IN_OUT_QUE = 0   # TQueBind<VECIN, VECOUT, 1> padFalseInOutque (padTrueInOutque for key 10)


@aicore
def _copy_rows_process(c, td, gm, tmpl, drop_and_pad):
    """Process() of ProbNoneDropPadFalse (key 0) / ProbNoneDropPadTrue (key 10).

    Slot r of this core: the source token is r / topK (key 0) or permuteTokenId[r] (key 10),
    the destination row is outIndex[r]; key 0 skips slots whose outIndex is -1. Each hidden
    piece goes GM -> UB -> GM through the bound queue, with no vector work.
    """
    row_start, _ = former_tail_offsets(c, td)
    out_num = td.row_id_map_each_core if c.block_idx < td.former_core_num else td.row_id_map_tail_core
    T = asc.ub_like(c, gm.unpermuted_tokens_grad)
    type_size = T.itemsize
    for indices_loop in range(out_num):
        row = row_start + indices_loop
        if drop_and_pad:
            token_id = np.int64(asc.get_value(c, gm.permute_token_id, row))
        else:
            token_id = int_math.safe_div(row, td.top_k)
        permute_token_id = np.int64(asc.get_value(c, gm.out_index, row))
        if not drop_and_pad and permute_token_id < 0:
            continue
        asc.sync_pipes(c, asc.S_MTE2)
        for hidden_loop in range(td.hidden_size_loop_times):
            n, h_off = _hidden_piece(td, hidden_loop)
            copy_params = asc.DataCopyExtParams(1, n * type_size, 0, 0)
            in_out_local = asc.alloc_tensor(c, PAD_FALSE_IN_OUT_QUE, T)
            asc.data_copy_pad(c, in_out_local, asc.gm_at(gm.unpermuted_tokens_grad, token_id * td.hidden_size + h_off),
                              copy_params, asc.NO_PAD)
            asc.en_que(c, PAD_FALSE_IN_OUT_QUE, in_out_local)
            in_out_local = asc.de_que(c, PAD_FALSE_IN_OUT_QUE, T)
            asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, permute_token_id * td.hidden_size + h_off),
                              in_out_local, copy_params)
            asc.free_tensor(c, PAD_FALSE_IN_OUT_QUE, in_out_local)


@global_aicore
def prob_none_drop_pad_false_process(c, td, gm, tmpl):
    """Key 0: permutedTokensGrad[outIndex[r]] = unpermutedTokensGrad[r / topK]."""
    _copy_rows_process(c, td, gm, tmpl, False)


@global_aicore
def prob_none_drop_pad_true_process(c, td, gm, tmpl):
    """Key 10: permutedTokensGrad[outIndex[r]] = unpermutedTokensGrad[permuteTokenId[r]]."""
    _copy_rows_process(c, td, gm, tmpl, True)


# --- keys 11 and 111: probs, dropAndPad -------------------------------------------------------------
_PAD_TRUE_BUFFERS = (
    "unpermutedGradTQue",       # TQue<VECIN, 2>, fp32-sized
    "permutedTokensTQue",       # TQue<VECIN, 2>, fp32-sized
    "probGradReduceSumTBuf",    # TBuf: per-piece partial sums (hiddenSizeLoopTimesAlign fp32)
    "permutedTokensGradTQue",   # TQue<VECOUT, 2>
    "probGradOutTBuf")          # TBuf: 32 bytes for the one prob gradient
(UNPERMUTED_GRAD_TQUE, PERMUTED_TOKENS_TQUE, PROB_GRAD_REDUCE_SUM_TBUF, PERMUTED_TOKENS_GRAD_TQUE,
 PROB_GRAD_OUT_TBUF) = asc.buffer_ids(_PAD_TRUE_BUFFERS, *_PAD_TRUE_BUFFERS)


@global_aicore
def prob_not_none_drop_pad_true_init(c, td, gm, tmpl):
    """Init(): InitOutput zeroes probsGrad before SyncAll(): every core fills tokensNum * numExpert elements
    from its token offset, which is 0 in this mode, so all cores zero the whole tensor."""
    _, token_start = former_tail_offsets(c, td)
    asc.init_output(c, asc.gm_at(gm.probs_grad, token_start * td.num_expert), td.tokens_num * td.num_expert, 0)


@global_aicore
def prob_not_none_drop_pad_true_process(c, td, gm, tmpl):
    """Keys 11 / 111: for each slot r: t = permuteTokenId[r], p = outIndex[r], e = p / capacity:
    permutedTokensGrad[p] = G[t] * probs[t, e]; probsGrad[t, e] = sum_h permutedTokens[p, h] * G[t, h]."""
    prob_not_none_drop_pad_true_body(c, td, gm, tmpl, False)


@aicore
def prob_not_none_drop_pad_true_body(c, td, gm, tmpl, v_to_mte3_sync):
    """Process() of keys 11 / 111, shared by the membase and the arch35 kernels: after the Muls the membase header
    re-queues the product through the VECIN queue, the arch35 one calls VToMTE3Sync() (`v_to_mte3_sync`)."""
    row_start, _ = former_tail_offsets(c, td)
    out_num = td.row_id_map_each_core if c.block_idx < td.former_core_num else td.row_id_map_tail_core
    T = asc.ub_like(c, gm.unpermuted_tokens_grad)      # PermutedTokenT
    P = asc.ub_like(c, gm.probs)                        # ProbsT
    F32 = asc.ub_f32(c)
    token_fp32 = tmpl.permuted_token_t == asc.DT_FLOAT
    h = td.hidden_size
    prob_grad_out_local = asc.tbuf_get(c, PROB_GRAD_OUT_TBUF, P)
    prob_grad_reduce_sum_local = asc.tbuf_get(c, PROB_GRAD_REDUCE_SUM_TBUF, F32)
    for indices_loop in range(out_num):
        row = row_start + indices_loop
        token_id = np.int64(asc.get_value(c, gm.permute_token_id, row))
        permute_token_id = np.int64(asc.get_value(c, gm.out_index, row))
        prob_offset = token_id * td.num_expert + int_math.safe_div(permute_token_id, td.capacity)
        prob = asc.to_float(asc.get_value(c, gm.probs, prob_offset), tmpl.probs_t)   # ToFloat / static_cast
        asc.duplicate(c, prob_grad_reduce_sum_local, 0.0, td.hidden_size_loop_times_align)
        asc.sync_pipes(c, asc.S_MTE2)
        n = 0
        for hidden_loop in range(td.hidden_size_loop_times):
            n, h_off = _hidden_piece(td, hidden_loop)
            copy_params = asc.DataCopyExtParams(1, n * T.itemsize, (h - n) * T.itemsize, 0)
            permuted_tokens_offset = permute_token_id * h + h_off
            unpermuted_tokens_grad_offset = token_id * h + h_off
            unpermuted_grad_local_fp32 = asc.alloc_tensor(c, UNPERMUTED_GRAD_TQUE, F32)
            permuted_tokens_local_fp32 = asc.alloc_tensor(c, PERMUTED_TOKENS_TQUE, F32)
            if token_fp32:
                asc.data_copy_pad(c, unpermuted_grad_local_fp32,
                                  asc.gm_at(gm.unpermuted_tokens_grad, unpermuted_tokens_grad_offset),
                                  copy_params, asc.NO_PAD)
                asc.data_copy_pad(c, permuted_tokens_local_fp32,
                                  asc.gm_at(gm.permuted_tokens, permuted_tokens_offset), copy_params, asc.NO_PAD)
                asc.sync_pipes(c, asc.MTE2_V)
            else:
                # fp16/bf16 land in the upper half of the fp32-sized buffer and widen in place
                unpermuted_grad_local = asc.view_as(c, unpermuted_grad_local_fp32, T)   # ReinterpretCast
                asc.data_copy_pad(c, unpermuted_grad_local[td.hidden_size_align:],
                                  asc.gm_at(gm.unpermuted_tokens_grad, unpermuted_tokens_grad_offset),
                                  copy_params, asc.NO_PAD)
                asc.sync_pipes(c, asc.MTE2_V)
                asc.cast(c, unpermuted_grad_local_fp32, asc.DT_FLOAT, unpermuted_grad_local[td.hidden_size_align:],
                         tmpl.permuted_token_t, asc.CAST_NONE, n)
                permuted_tokens_local = asc.view_as(c, permuted_tokens_local_fp32, T)
                asc.data_copy_pad(c, permuted_tokens_local[td.hidden_size_align:],
                                  asc.gm_at(gm.permuted_tokens, permuted_tokens_offset), copy_params, asc.NO_PAD)
                asc.sync_pipes(c, asc.MTE2_V)
                asc.cast(c, permuted_tokens_local_fp32, asc.DT_FLOAT, permuted_tokens_local[td.hidden_size_align:],
                         tmpl.permuted_token_t, asc.CAST_NONE, n)
            # prob gradient of this piece: dot(permutedTokens, unpermutedTokensGrad)
            asc.mul(c, permuted_tokens_local_fp32, permuted_tokens_local_fp32, unpermuted_grad_local_fp32, n)
            asc.en_que(c, PERMUTED_TOKENS_TQUE, permuted_tokens_local_fp32)
            permuted_tokens_local_fp32 = asc.de_que(c, PERMUTED_TOKENS_TQUE, F32)
            reduce_sum(c, prob_grad_reduce_sum_local[hidden_loop:], permuted_tokens_local_fp32, n, STRICT)
            asc.sync_pipes(c, asc.V_S)
            asc.muls(c, permuted_tokens_local_fp32, unpermuted_grad_local_fp32, prob, n)
            if v_to_mte3_sync:
                asc.sync_pipes(c, asc.V_MTE3)   # VToMTE3Sync(): orders the fp32 copy-out below too
            else:
                asc.en_que(c, PERMUTED_TOKENS_TQUE, permuted_tokens_local_fp32)
                permuted_tokens_local_fp32 = asc.de_que(c, PERMUTED_TOKENS_TQUE, F32)
            permuted_tokens_grad_local = asc.alloc_tensor(c, PERMUTED_TOKENS_GRAD_TQUE, T)
            if token_fp32:
                asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, permuted_tokens_offset),
                                  permuted_tokens_local_fp32, copy_params)
            else:
                asc.cast(c, permuted_tokens_grad_local, tmpl.permuted_token_t, permuted_tokens_local_fp32,
                         asc.DT_FLOAT, asc.CAST_RINT, n)
                asc.sync_pipes(c, asc.V_MTE3)
                asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, permuted_tokens_offset),
                                  permuted_tokens_grad_local, copy_params)
            asc.free_tensor(c, UNPERMUTED_GRAD_TQUE, unpermuted_grad_local_fp32)
            asc.free_tensor(c, PERMUTED_TOKENS_TQUE, permuted_tokens_local_fp32)
            asc.free_tensor(c, PERMUTED_TOKENS_GRAD_TQUE, permuted_tokens_grad_local)
        # the slot's prob gradient: sum of the per-piece partial sums
        reduce_sum(c, prob_grad_reduce_sum_local, prob_grad_reduce_sum_local, td.hidden_size_loop_times, STRICT)
        if tmpl.probs_t == asc.DT_FLOAT:
            asc.copy(c, prob_grad_out_local, prob_grad_reduce_sum_local, 1, 1, asc.CopyRepeatParams(1, 1, 8, 8))
        else:
            asc.cast(c, prob_grad_out_local, tmpl.probs_t, prob_grad_reduce_sum_local, asc.DT_FLOAT, asc.CAST_RINT, 1)
        asc.sync_pipes(c, asc.V_MTE3)
        # copyParams keeps the last piece's strides; only blockLen changes (one element out)
        copy_params = asc.DataCopyExtParams(1, P.itemsize, (h - n) * T.itemsize, 0)
        asc.data_copy_pad(c, asc.gm_at(gm.probs_grad, prob_offset), prob_grad_out_local, copy_params)
        asc.sync_pipes(c, asc.MTE3_V)


# --- keys 1 and 101: probs, no dropAndPad -----------------------------------------------------------
_PAD_FALSE_BUFFERS = (                 # TBufs, in InitBuffer order:
    "inQueueUnpermuted",                # 2 x hiddenSizeAlign tokens (manual ping-pong)
    "inQueuePermutedTokens",            # 2 x hiddenSizeAlign tokens
    "outQueueProbGrad",                 # indicesReserveNumAlign ProbsT
    "outQueuePermutedTokensGrad",       # 2 x hiddenSizeAlign tokens
    "tmpBufferPermutedTokensCast",      # fp32 hiddenSizeAlign
    "tmpBufferUnpermutedCast",          # fp32 hiddenSizeAlign
    "tmpBufferProbGradReduceSum",       # fp32 indicesReserveNumAlign: accumulated over pieces
    "tmpBufferProbGradCast",            # fp32 indicesReserveNumAlign: one piece's partial sums
    "tmpBufferPermutedTokensGrad",      # fp32 hiddenSizeAlign
    "routingMapTBuf",                   # numExpertAlign bytes: one routing-map row
    "probGradTBuf")                     # numExpertAlign ProbsT: one probsGrad row
(IN_QUEUE_UNPERMUTED, IN_QUEUE_PERMUTED_TOKENS, OUT_QUEUE_PROB_GRAD, OUT_QUEUE_PERMUTED_TOKENS_GRAD,
 TMP_BUFFER_PERMUTED_TOKENS_CAST, TMP_BUFFER_UNPERMUTED_CAST, TMP_BUFFER_PROB_GRAD_REDUCE_SUM,
 TMP_BUFFER_PROB_GRAD_CAST, TMP_BUFFER_PERMUTED_TOKENS_GRAD, ROUTING_MAP_TBUF, PROB_GRAD_TBUF) = asc.buffer_ids(
    _PAD_FALSE_BUFFERS, *_PAD_FALSE_BUFFERS)

EVENT_ID0, EVENT_ID1, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 = 0, 1, 4, 5, 6, 7


@global_aicore
def prob_not_none_drop_pad_false_init(c, td, gm, tmpl):
    """Init(): zero this core's rows of probsGrad (InitOutput) before SyncAll()."""
    _, token_start = former_tail_offsets(c, td)
    tokens = td.token_num_each_core if c.block_idx < td.former_core_num else td.token_num_tail_core
    asc.init_output(c, asc.gm_at(gm.probs_grad, token_start * td.num_expert), tokens * td.num_expert, 0)


@global_aicore
def prob_not_none_drop_pad_false_process(c, td, gm, tmpl):
    """Keys 1 / 101: slot q = t * topK + k takes the k-th selected expert of token t (ascending; missing
    ones get prob 0 and address -1); p = outIndex[q] (skipped if < 0):
    permutedTokensGrad[p] = G[t] * prob; probsGrad[t, e] = sum_h permutedTokens[p, h] * G[t, h]."""
    prob_not_none_drop_pad_false_body(c, td, gm, tmpl, True)


@aicore
def prob_not_none_drop_pad_false_body(c, td, gm, tmpl, zero_piece_sums):
    """Process() of keys 1 / 101, shared by the membase and the arch35 kernels: the two C++ headers differ in one
    line, the per-piece Duplicate of tmpBufferProbGradFp32 (`zero_piece_sums`: membase has it, arch35 not)."""
    row_start, token_start = former_tail_offsets(c, td)
    top_k, h, num_expert = td.top_k, td.hidden_size, td.num_expert
    indices_num_each_core = td.row_id_map_each_core if c.block_idx < td.former_core_num else td.row_id_map_tail_core
    indices_loop_times = int_math.ceil_div(indices_num_each_core, td.indices_reserve_num)
    indices_last_loop = indices_num_each_core - td.indices_reserve_num * (indices_loop_times - 1)
    top_k_in_indices_last_loop_times = int_math.ceil_div(indices_last_loop, top_k)
    top_k_in_indices_each_loop_times = int_math.ceil_div(td.indices_reserve_num, top_k)

    T = asc.ub_like(c, gm.unpermuted_tokens_grad)   # PermutedTokenT
    P = asc.ub_like(c, gm.probs)                     # ProbsT
    F32 = asc.ub_f32(c)
    token_fp32 = tmpl.permuted_token_t == asc.DT_FLOAT
    h_align = td.hidden_size_align
    hidden_repeat_times = h_align // FP32_ONE_REPEAT
    hidden_tail_mask = h_align % FP32_ONE_REPEAT
    hidden_tail_offset = hidden_repeat_times * FP32_ONE_REPEAT
    indices_repeat_times = td.indices_reserve_num_align // FP32_ONE_REPEAT
    indices_tail_mask = td.indices_reserve_num_align % FP32_ONE_REPEAT
    indices_tail_offset = indices_repeat_times * FP32_ONE_REPEAT

    tmp_buffer_prob_grad_reduce_sum_fp32 = asc.tbuf_get(c, TMP_BUFFER_PROB_GRAD_REDUCE_SUM, F32)
    tmp_buffer_unpermuted_fp32 = asc.tbuf_get(c, TMP_BUFFER_UNPERMUTED_CAST, F32)
    tmp_buffer_permuted_tokens_grad_fp32 = asc.tbuf_get(c, TMP_BUFFER_PERMUTED_TOKENS_GRAD, F32)
    tmp_buffer_permuted_tokens_fp32 = asc.tbuf_get(c, TMP_BUFFER_PERMUTED_TOKENS_CAST, F32)
    tmp_buffer_prob_grad_fp32 = asc.tbuf_get(c, TMP_BUFFER_PROB_GRAD_CAST, F32)
    tmp_buffer_routing_map = asc.tbuf_get(c, ROUTING_MAP_TBUF, asc.ub_i8(c))
    prob_grad_line_local = asc.tbuf_get(c, PROB_GRAD_TBUF, P)

    # scalar arrays on the core's stack (the kernel keeps them to avoid UB GetValue)
    indices_array = np.zeros(INDICES_PROBS_MAX_RESERVE_NUM, dtype=np.int64)
    probs_array = np.zeros(INDICES_PROBS_MAX_RESERVE_NUM, dtype=np.float32)
    probs_addr_array = np.zeros(INDICES_PROBS_MAX_RESERVE_NUM, dtype=np.int64)
    ping_pong_unpermute = 0
    ping_pong_permute_token = 0
    ping_pong_permute_token_grad = 0

    for evt_id in (EVENT_ID0, EVENT_ID1, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7):
        asc.set_flag(c, asc.V_MTE2, evt_id)
    asc.set_flag(c, asc.MTE3_V, EVENT_ID0)
    asc.set_flag(c, asc.MTE3_V, EVENT_ID1)
    for indices_loop in range(indices_loop_times):
        last = indices_loop == indices_loop_times - 1
        indices_num_loop = indices_last_loop if last else td.indices_reserve_num
        top_k_in_indices_loop_times = int_math.safe_div(indices_num_loop, top_k)
        indices_loop_offset = indices_loop * td.indices_reserve_num
        loop_offset = row_start + indices_loop_offset
        token_loop_base_offset = int_math.safe_div(indices_loop_offset, top_k)
        for i in range(indices_num_loop):
            asc.scalar_store(c, indices_array, i, asc.get_value(c, gm.out_index, loop_offset + i), ARR_INDICES)

        # probs of the batch: each token's selected experts in ascending order, padded to topK
        top_k_in_indices = top_k_in_indices_last_loop_times if last else top_k_in_indices_each_loop_times
        prob_index = 0
        for top_k_loop in range(top_k_in_indices):
            token_index = int_math.safe_div(loop_offset, top_k) + top_k_loop
            routing_map_offset = token_index * num_expert
            asc.data_copy_pad(c, tmp_buffer_routing_map, asc.gm_at(gm.routing_map, routing_map_offset),
                              asc.DataCopyExtParams(1, num_expert, 0, 0), asc.NO_PAD)
            asc.sync_pipes(c, asc.MTE3_S)   # (sic) the kernel syncs MTE3 -> S after this MTE2 copy
            entries_for_token = 0
            for expert_index in range(num_expert):
                is_choose = asc.get_value(c, tmp_buffer_routing_map, expert_index)
                prob_offset = routing_map_offset + expert_index
                if is_choose != 0:
                    prob = asc.to_float(asc.get_value(c, gm.probs, prob_offset), tmpl.probs_t)
                    asc.scalar_store(c, probs_array, prob_index, prob, ARR_PROBS)
                    asc.scalar_store(c, probs_addr_array, prob_index, prob_offset, ARR_PROBS_ADDR)
                    prob_index += 1
                    entries_for_token += 1
            for _ in range(entries_for_token, top_k):
                asc.scalar_store(c, probs_array, prob_index, 0.0, ARR_PROBS)
                asc.scalar_store(c, probs_addr_array, prob_index, -1, ARR_PROBS_ADDR)
                prob_index += 1

        asc.duplicate(c, tmp_buffer_prob_grad_reduce_sum_fp32, 0.0, td.indices_reserve_num_align)
        for hidden_loop in range(td.hidden_size_loop_times):
            n, h_off = _hidden_piece(td, hidden_loop)
            if zero_piece_sums:
                asc.duplicate(c, tmp_buffer_prob_grad_fp32, 0.0, td.indices_reserve_num_align)
            copy_params = asc.DataCopyExtParams(1, n * T.itemsize, 0, 0)
            for top_k_in_indices_loop in range(top_k_in_indices_loop_times):
                # copy in one row piece of unpermutedTokensGrad (ping-pong on events 4 / 5)
                unpermuted_index = token_loop_base_offset + top_k_in_indices_loop
                unpermuted_offset = (token_start + unpermuted_index) * h + h_off
                event_unpermute = EVENT_ID4 if ping_pong_unpermute else EVENT_ID5
                asc.wait_flag(c, asc.V_MTE2, event_unpermute)
                in_queue_unpermuted_local = asc.tbuf_get_with_offset(
                    c, IN_QUEUE_UNPERMUTED, T, h_align, h_align * T.itemsize * ping_pong_unpermute)
                asc.data_copy_pad(c, in_queue_unpermuted_local, asc.gm_at(gm.unpermuted_tokens_grad, unpermuted_offset),
                                  copy_params, asc.NO_PAD)
                asc.set_flag(c, asc.MTE2_V, event_unpermute)
                asc.wait_flag(c, asc.MTE2_V, event_unpermute)
                if token_fp32:
                    _copy_fp32(c, tmp_buffer_unpermuted_fp32, in_queue_unpermuted_local, hidden_repeat_times,
                               hidden_tail_offset, hidden_tail_mask)
                else:
                    asc.cast(c, tmp_buffer_unpermuted_fp32, asc.DT_FLOAT, in_queue_unpermuted_local,
                             tmpl.permuted_token_t, asc.CAST_NONE, n)
                asc.set_flag(c, asc.V_MTE2, event_unpermute)
                ping_pong_unpermute = 1 - ping_pong_unpermute

                for permute_in_top_k_loop in range(top_k):
                    indices_offset = top_k_in_indices_loop * top_k + permute_in_top_k_loop
                    permuted_token_offset = asc.scalar_load(c, indices_array, indices_offset, ARR_INDICES)
                    if permuted_token_offset < 0:
                        continue
                    asc.muls(c, tmp_buffer_permuted_tokens_grad_fp32, tmp_buffer_unpermuted_fp32,
                             asc.scalar_load(c, probs_array, indices_offset, ARR_PROBS), n)
                    # copy out the permuted-token gradient (ping-pong on events 0 / 1)
                    event_v_mte3 = EVENT_ID0 if ping_pong_permute_token_grad else EVENT_ID1
                    asc.wait_flag(c, asc.MTE3_V, event_v_mte3)
                    permuted_tokens_grad_local = asc.tbuf_get_with_offset(
                        c, OUT_QUEUE_PERMUTED_TOKENS_GRAD, T, h_align,
                        h_align * T.itemsize * ping_pong_permute_token_grad)
                    if token_fp32:
                        _copy_fp32(c, permuted_tokens_grad_local, tmp_buffer_permuted_tokens_grad_fp32,
                                   hidden_repeat_times, hidden_tail_offset, hidden_tail_mask)
                    else:
                        asc.cast(c, permuted_tokens_grad_local, tmpl.permuted_token_t,
                                 tmp_buffer_permuted_tokens_grad_fp32, asc.DT_FLOAT, asc.CAST_RINT, n)
                    asc.set_flag(c, asc.V_MTE3, event_v_mte3)
                    asc.wait_flag(c, asc.V_MTE3, event_v_mte3)
                    asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, permuted_token_offset * h + h_off),
                                      permuted_tokens_grad_local, copy_params)
                    asc.set_flag(c, asc.MTE3_V, event_v_mte3)
                    ping_pong_permute_token_grad = 1 - ping_pong_permute_token_grad
                    # copy in the permuted-token row piece (ping-pong on events 6 / 7)
                    event_permute = EVENT_ID6 if ping_pong_permute_token else EVENT_ID7
                    asc.wait_flag(c, asc.V_MTE2, event_permute)
                    in_queue_permuted_tokens_local = asc.tbuf_get_with_offset(
                        c, IN_QUEUE_PERMUTED_TOKENS, T, h_align, h_align * T.itemsize * ping_pong_permute_token)
                    asc.data_copy_pad(c, in_queue_permuted_tokens_local,
                                      asc.gm_at(gm.permuted_tokens, permuted_token_offset * h + h_off),
                                      copy_params, asc.NO_PAD)
                    asc.set_flag(c, asc.MTE2_V, event_permute)
                    asc.wait_flag(c, asc.MTE2_V, event_permute)
                    if token_fp32:
                        _copy_fp32(c, tmp_buffer_permuted_tokens_fp32, in_queue_permuted_tokens_local,
                                   hidden_repeat_times, hidden_tail_offset, hidden_tail_mask)
                    else:
                        asc.cast(c, tmp_buffer_permuted_tokens_fp32, asc.DT_FLOAT, in_queue_permuted_tokens_local,
                                 tmpl.permuted_token_t, asc.CAST_NONE, n)
                    asc.set_flag(c, asc.V_MTE2, event_permute)
                    ping_pong_permute_token = 1 - ping_pong_permute_token
                    # this slot's prob gradient for the piece
                    asc.mul(c, tmp_buffer_permuted_tokens_fp32, tmp_buffer_permuted_tokens_fp32,
                            tmp_buffer_unpermuted_fp32, n)
                    reduce_sum(c, tmp_buffer_prob_grad_fp32[indices_offset:], tmp_buffer_permuted_tokens_fp32, n,
                               STRICT)
            asc.add(c, tmp_buffer_prob_grad_reduce_sum_fp32, tmp_buffer_prob_grad_reduce_sum_fp32,
                    tmp_buffer_prob_grad_fp32, indices_num_loop)

        # copy out probsGrad: one full row of numExpert per token, gradients at the selected experts
        prob_grad_local = asc.tbuf_get(c, OUT_QUEUE_PROB_GRAD, P)
        if tmpl.probs_t == asc.DT_FLOAT:
            _copy_fp32(c, prob_grad_local, tmp_buffer_prob_grad_reduce_sum_fp32, indices_repeat_times,
                       indices_tail_offset, indices_tail_mask)
        else:
            asc.cast(c, prob_grad_local, tmpl.probs_t, tmp_buffer_prob_grad_reduce_sum_fp32, asc.DT_FLOAT,
                     asc.CAST_RINT, indices_num_loop)
        asc.sync_pipes(c, asc.V_S)
        for top_k_in_indices_loop in range(top_k_in_indices_loop_times):
            asc.duplicate(c, prob_grad_line_local, 0, num_expert)
            base = top_k_in_indices_loop * top_k
            for prob_grad_index in range(top_k):
                prob_grad_offset = base + prob_grad_index
                addr = asc.scalar_load(c, probs_addr_array, prob_grad_offset, ARR_PROBS_ADDR)
                if addr < 0:
                    continue
                prob_grad = asc.get_value(c, prob_grad_local, prob_grad_offset)
                asc.set_value(c, prob_grad_line_local, addr % num_expert, prob_grad)
            asc.sync_pipes(c, asc.S_MTE3)
            asc.data_copy_pad(c, asc.gm_at(gm.probs_grad,
                                           (token_start + token_loop_base_offset + top_k_in_indices_loop) * num_expert),
                              prob_grad_line_local, asc.DataCopyExtParams(1, num_expert * P.itemsize, 0, 0))
            asc.sync_pipes(c, asc.MTE3_S)
    for evt_id in (EVENT_ID0, EVENT_ID1, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7):
        asc.wait_flag(c, asc.V_MTE2, evt_id)
    asc.wait_flag(c, asc.MTE3_V, EVENT_ID0)
    asc.wait_flag(c, asc.MTE3_V, EVENT_ID1)


# --- the kernel entry: TILING_KEY_IS dispatch --------------------------------------------------------
# the real Process() reads the routing-map row it just copied in (MTE2) with GetValue after syncing MTE3 -> S,
# not MTE2 -> S: a race on the chip that checked mode reports, waived here because the real kernel has it
ROUTING_MAP_ROW_RACE = RaceWaiver("MTE2", "DataCopyPad(GM->UB)", "S", "LocalTensor::GetValue",
                                  "the real kernel syncs MTE3 -> S, not MTE2 -> S, after copying a routing-map row")
# it syncs V -> S once before the loop over tokens, then zeroes each token's probs-gradient line with Duplicate (V),
# fills it with SetValue (S) and copies it out (MTE3) with no event between V and S or V and MTE3 inside the loop
PROB_GRAD_LINE_RACES = (
    RaceWaiver("V", "Duplicate", "S", "LocalTensor::SetValue",
               "the real kernel zeroes the probs-gradient line (V) and fills it (S) with no V -> S event in its loop"),
    RaceWaiver("V", "Duplicate", "MTE3", "DataCopyPad(UB->GM)",
               "the real kernel copies the line out with no V -> MTE3 event after zeroing it"),
    RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "V", "Duplicate",
               "the real kernel zeroes the next line with no MTE3 -> V event after the copy-out"),
    RaceWaiver("S", "LocalTensor::SetValue", "V", "Duplicate",
               "the real kernel zeroes the next line with no S -> V event after filling the last one"))
# keys 11 / 111 with fp32 gradients (..._prob_not_none_drop_pad_true.h, Process(), lines 139-145): the
# product written by Muls (V) goes through EnQue / DeQue of permutedTokensTQue, a TQue<VECIN> whose event is
# MTE2 -> V, and is then copied out by DataCopyPad (MTE3) with no V -> MTE3 event; the fp16 / bf16 branch has
# its VToMTE3Sync() after the Cast, the fp32 branch none
PAD_TRUE_FP32_OUT_RACE = RaceWaiver("V", "Muls", "MTE3", "DataCopyPad(UB->GM)",
                                    "the real kernel copies the fp32 Muls result out after only the MTE2 -> V "
                                    "event of a VECIN queue, with no V -> MTE3 event")
# keys 11 / 111 Init() (..._prob_not_none_drop_pad_true.h lines 64-67 @ 25fb6b92890d): every core zeroes the
# whole probsGrad (InitOutput from unpermutedOutputDStartOffset * numExpert, 0 in this mode, tokensNum * numExpert
# elements) before the SyncAll, so the cores write the same zeros at once, and after it each core writes its
# tokens' probs gradients over bytes the other cores zeroed (the arch35 copy splits the fill between the cores)
PAD_TRUE_INIT_WAIVERS = (
    RaceWaiver("MTE3", "InitOutput", "MTE3", "InitOutput",
               "every core zeroes the whole probsGrad before the SyncAll (InitOutput of tokensNum * numExpert)",
               cross_core=True),
    OverlapWaiver("InitOutput", "InitOutput", "every core zeroes the whole probsGrad"),
    OverlapWaiver("InitOutput", "DataCopyPad(UB->GM)",
                  "each core writes its tokens' probs gradients over zeros every core wrote"))

KERNELS = {
    0: Kernel.single_pipe(OP, "MoeTokenUnpermuteWithRoutingMapGradProbNoneDropPadFalse",
              (prob_none_drop_pad_false_process,), ("padFalseInOutque",)),
    10: Kernel.single_pipe(OP, "MoeTokenUnpermuteWithRoutingMapGradProbNoneDropPadTrue",
               (prob_none_drop_pad_true_process,), ("padTrueInOutque",)),
    1: Kernel.single_pipe(OP, "MoeTokenUnpermuteWithRoutingMapGradProbNotNoneDropPadFalse",
              (prob_not_none_drop_pad_false_init, prob_not_none_drop_pad_false_process), _PAD_FALSE_BUFFERS,
              waivers=(ROUTING_MAP_ROW_RACE, *PROB_GRAD_LINE_RACES)),
    11: Kernel.single_pipe(OP, "MoeTokenUnpermuteWithRoutingMapGradProbNotNoneDropPadTrue",
               (prob_not_none_drop_pad_true_init, prob_not_none_drop_pad_true_process), _PAD_TRUE_BUFFERS,
               waivers=(PAD_TRUE_FP32_OUT_RACE, *PAD_TRUE_INIT_WAIVERS)),
}
KERNELS[101] = KERNELS[1]    # ProbsT = float
KERNELS[111] = KERNELS[11]
