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

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.check import OverlapWaiver
from ascend_sim.kernel_api import global_aicore
from ops.common.core_split import former_tail_offsets

from .kernel import (
    _PAD_FALSE_BUFFERS,
    _PAD_TRUE_BUFFERS,
    OP,
    PROB_GRAD_LINE_RACES,
    ROUTING_MAP_ROW_RACE,
    prob_none_drop_pad_false_process,
    prob_none_drop_pad_true_process,
    prob_not_none_drop_pad_false_body,
    prob_not_none_drop_pad_true_body,
)


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
    prob_not_none_drop_pad_true_body(c, td, gm, tmpl, True)


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
