"""Ascend 950 (arch35) kernels of MoeTokenUnpermuteWithRoutingMapGrad: what the regbase config launches.

source: moe/moe_token_unpermute_with_routing_map_grad/op_kernel/moe_token_unpermute_with_routing_map_grad_apt.cpp
and op_kernel/arch35/moe_token_unpermute_with_routing_map_grad_{base,prob_none_drop_pad_false,
prob_none_drop_pad_true,prob_not_none_drop_pad_false,prob_not_none_drop_pad_true}.h @ 25fb6b92890d
(op_host/moe_token_unpermute_with_routing_map_grad_def.cpp registers ascend950 with opFile
moe_token_unpermute_with_routing_map_grad_apt; the tiling is the one host tiling of every chip).

The arch35 kernels are membase-style AscendC (TQue / TBuf, Add / Mul / Cast / BlockReduceSum; no
__VEC_SCOPE__ or MicroAPI), so they run on the same machine-model calls as kernel.py. Per file at the commit:

    arch35/..._base.h                      identical to the membase base.h   -> kernel.py helpers
    arch35/..._prob_none_drop_pad_false.h  identical (key 0)                 -> kernel.prob_none_drop_pad_false_process
    arch35/..._prob_none_drop_pad_true.h   identical (key 10)                -> kernel.prob_none_drop_pad_true_process
    arch35/..._prob_not_none_drop_pad_false.h  keys 1 / 101                  -> prob_not_none_drop_pad_false_* below
        Init(): Fill of this core's probsGrad rows, then SyncAll, before the InitBuffer calls (membase:
        InitOutput after them; same zeros). Process(): no Duplicate of tmpBufferProbGradCast at the top of
        each hidden piece, so a slot skipped for outIndex < 0 adds whatever that element last held into its
        accumulated sum (see prob_not_none_drop_pad_false_process).
    arch35/..._prob_not_none_drop_pad_true.h   keys 11 / 111                 -> prob_not_none_drop_pad_true_* below
        Init(): the zero Fill of probsGrad (tokensNum * numExpert) is split over the cores (membase: every core
        zeroes all of it). Process(): VToMTE3Sync() after Muls where membase re-queues the product through the
        VECIN queue, so the fp32 copy-out is ordered (membase's fp32 V -> MTE3 gap is gone).

Stages take (c, td, gm, tmpl) as in kernel.py; GM / UB half data are uint16 bit patterns.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.check import OverlapWaiver
from ascend_sim._jit import global_aicore
from ops.common import int_math
from ops.common.core_split import former_tail_offsets
from ops.common.reduce_sum import reduce_sum

from .kernel import (OP, PERMUTED_TOKENS_GRAD_TQUE, PERMUTED_TOKENS_TQUE, PROB_GRAD_LINE_RACES, PROB_GRAD_OUT_TBUF,
                     PROB_GRAD_REDUCE_SUM_TBUF, ROUTING_MAP_ROW_RACE, STRICT, UNPERMUTED_GRAD_TQUE, _PAD_FALSE_BUFFERS,
                     _PAD_TRUE_BUFFERS, _hidden_piece, prob_none_drop_pad_false_process,
                     prob_none_drop_pad_true_process, prob_not_none_drop_pad_false_body)


# --- keys 11 and 111: arch35/..._prob_not_none_drop_pad_true.h ----------------------------------------------
@global_aicore
def prob_not_none_drop_pad_true_init(c, td, gm, tmpl):
    """Init(): zero probsGrad before SyncAll(), the tokensNum * numExpert elements split over all cores
    (the first taskNum % cores cores take one more), each core Fill-ing its own range. With taskNum 0 the
    real Init() skips both the Fill and its SyncAll(); the stage list keeps the SyncAll (no data moves)."""
    task_num = td.tokens_num * td.num_expert
    if task_num > 0:
        total_core_num = td.tail_core_num + td.former_core_num
        init_prob_num_per_core = task_num // total_core_num
        init_former_core_num = task_num % total_core_num
        i = c.block_idx
        init_num = init_prob_num_per_core + 1 if i < init_former_core_num else init_prob_num_per_core
        if init_num > 0:
            if i < init_former_core_num:
                init_addr = (init_prob_num_per_core + 1) * i
            else:
                init_addr = ((init_prob_num_per_core + 1) * init_former_core_num
                             + (i - init_former_core_num) * init_prob_num_per_core)
            asc.init_output(c, asc.gm_at(gm.probs_grad, init_addr), init_num, 0)   # Fill(probGradInitGm, ...)


@global_aicore
def prob_not_none_drop_pad_true_process(c, td, gm, tmpl):
    """Keys 11 / 111: for each slot r: t = permuteTokenId[r], p = outIndex[r], e = p / capacity:
    permutedTokensGrad[p] = G[t] * probs[t, e]; probsGrad[t, e] = sum_h permutedTokens[p, h] * G[t, h]."""
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
            asc.sync_pipes(c, asc.V_MTE3)   # VToMTE3Sync(): orders the fp32 copy-out below too
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


# --- keys 1 and 101: arch35/..._prob_not_none_drop_pad_false.h ---------------------------------------------
@global_aicore
def prob_not_none_drop_pad_false_init(c, td, gm, tmpl):
    """Init(): Fill this core's rows of probsGrad with zeros, then SyncAll() (before the InitBuffer calls)."""
    _, token_start = former_tail_offsets(c, td)
    tokens = td.token_num_each_core if c.block_idx < td.former_core_num else td.token_num_tail_core
    asc.init_output(c, asc.gm_at(gm.probs_grad, token_start * td.num_expert), tokens * td.num_expert, 0)   # Fill


@global_aicore
def prob_not_none_drop_pad_false_process(c, td, gm, tmpl):
    """Keys 1 / 101: slot q = t * topK + k takes the k-th selected expert of token t (ascending; missing
    ones get prob 0 and address -1); p = outIndex[q] (skipped if < 0):
    permutedTokensGrad[p] = G[t] * prob; probsGrad[t, e] = sum_h permutedTokens[p, h] * G[t, h].

    Unlike membase, the per-piece partial sums (tmpBufferProbGradFp32) are never zeroed: a slot that owns a
    selected expert but has outIndex < 0 writes no partial sum, so its probsGrad element gets the accumulation
    of whatever that UB element held (poison on a fresh launch, an earlier slot's sum later). Every other
    element is the membase value."""
    prob_not_none_drop_pad_false_body(c, td, gm, tmpl, False)


# keys 11 / 111 Init() (arch35/..._prob_not_none_drop_pad_true.h lines 57-72 @ 25fb6b92890d): the cores split the
# zero fill of probsGrad between them, SyncAll, then each core writes its tokens' probs gradients, which lie in
# slices other cores zeroed
PAD_TRUE_FILL_OVERLAP = OverlapWaiver("InitOutput", "DataCopyPad(UB->GM)",
                                      "each core writes its tokens' probs gradients over another core's zero fill")


# --- the kernel entry of moe_token_unpermute_with_routing_map_grad_apt.cpp: TILING_KEY_IS dispatch ------------
# keys 1 / 101 keep membase's routing-map-row and probs-gradient-line event gaps (the arch35 Process() has the
# same syncs there), so the same waivers; keys 11 / 111 need none: VToMTE3Sync() closes the fp32 copy-out gap
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
               waivers=(PAD_TRUE_FILL_OVERLAP,)),
}
KERNELS[101] = KERNELS[1]    # ProbsT = float
KERNELS[111] = KERNELS[11]
