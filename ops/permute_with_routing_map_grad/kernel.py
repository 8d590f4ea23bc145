"""Kernels of the l0 op MoeTokenPermuteWithRoutingMapGrad, by tilingKey.

source: moe/moe_token_permute_with_routing_map_grad/op_kernel/moe_token_permute_with_routing_map_grad.cpp,
moe_token_permute_with_routing_map_grad.h, moe_token_unpermute.h @ 25fb6b92890d.

    moe_token_permute_with_routing_map_grad.cpp   entry: TILING_KEY_IS dispatch
    key 0     moe_token_unpermute.h                 KernelMoeTokenUnpermute<T, int32_t, T, PROBS=false>:
                                                    kernel G (ops.common.unpermute_gather), skipping -1 slots
    key 1000  moe_token_permute_with_routing_map_grad.h
                                                    KernelMoeTokenPermuteWithRoutingMap<T, int32_t, T>: the
                                                    drop-and-pad probs-gradient scatter below

Key 1000 walks the core's range of output slots i one at a time, as the original does: scalar reads of
the slot's prob gradient and token id from GM, SetValue into a 32-byte VECOUT buffer, an S->MTE3
flag, and a one-element DataCopyPad to probsGrad[token * experts + i / capacity]. The element is
moved as raw bits (uint16 for bf16 / fp16, uint32 for fp32), so one compilation serves each width.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, PipePhase
from ascend_sim.check import RaceWaiver
from ascend_sim.kernel_api import global_aicore
from tiling.moe_token_permute_with_routing_map_grad import (
    DROP_PAD_FIELDS,
    DROP_PAD_PIPE,
    GATHER_PIPE,
    TILING_KEY_DROP_PAD,
    TILING_KEY_GATHER,
)

from ..common.unpermute_gather import gather_buffers, gather_gm, gather_phase

OP = "MoeTokenPermuteWithRoutingMapGrad"

# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenpermuteWithRoutingMapDropPadTilingData = namedtuple("MoeTokenpermuteWithRoutingMapDropPadTilingData",
                                                            DROP_PAD_FIELDS)
DropPadTilingData = MoeTokenpermuteWithRoutingMapDropPadTilingData

DropPadGm = namedtuple("DropPadGm", [
    "permuted_probs",   # permutedProbsGM: (M,) prob gradients as bits (uint16 / uint32), read-only
    "sorted_indices",   # sortedIndicesGM: (M,) int32 token id of each slot, read-only
    "probs_grad",       # probsGradOutGM: (N, E) as bits of the same width, output
])

GmTensors = namedtuple("GmTensors", [
    "permuted_token_output_grad",   # Gp (M, H) in its carrier dtype
    "permuted_probs_output_grad",   # gp (M,), empty when absent
    "sorted_indices",               # S (M,) int32
    "tokens_grad",                  # tokens gradient (N, H), output of key 0
    "probs_grad",                   # probs gradient (N, E), output of key 1000; empty when absent
])
"""The GM tensors of one launch (the kernel's own argument list minus the routing map, which no key reads)."""

DROP_PAD_BUFFERS = ("ProbGradOutQue",)     # TQue<VECOUT, 1>, 32 bytes
(PROB_GRAD_OUT_QUE,) = asc.buffer_ids(DROP_PAD_BUFFERS, "ProbGradOutQue")


@global_aicore
def drop_pad_process(c, td, gm):
    """KernelMoeTokenPermuteWithRoutingMap::Init + Process on one core (block dim 1 or all cores)."""
    start_idx = c.block_idx * td.single_core_len
    process_num = td.single_core_len
    if c.block_idx + 1 == c.block_num:
        process_num = td.last_core_len
    end_idx = start_idx + process_num
    T = asc.ub_like(c, gm.probs_grad)
    prob_grad_out_tensor = asc.alloc_tensor(c, PROB_GRAD_OUT_QUE, T)
    copy_params = asc.DataCopyExtParams(1, T.itemsize, 0, 0)
    event_id_s_to_mte3 = asc.fetch_event_id(c, asc.S_MTE3)
    for i in range(start_idx, end_idx):
        permute_probs_output_tmp = asc.get_value(c, gm.permuted_probs, i)
        x_index = np.int64(asc.get_value(c, gm.sorted_indices, i))
        y_index = i // td.capacity          # capacity > 0 whenever a slot exists (slots = capacity * experts)
        out_offset = x_index * td.expert_num + y_index
        asc.set_value(c, prob_grad_out_tensor, 0, permute_probs_output_tmp)
        asc.set_flag(c, asc.S_MTE3, event_id_s_to_mte3)
        asc.wait_flag(c, asc.S_MTE3, event_id_s_to_mte3)
        asc.data_copy_pad(c, asc.gm_at(gm.probs_grad, out_offset), prob_grad_out_tensor, copy_params)
    # the original leaves it to the TPipe's destructor; the simulator's queue model wants it back
    asc.free_tensor(c, PROB_GRAD_OUT_QUE, prob_grad_out_tensor)


# --- host side: what each phase's stages receive ------------------------------------------------------------
def _bits(g, writeable: bool):
    """GlobalTensor g with its data seen as unsigned bits of the same width (read-only for inputs)."""
    data = g.data.view(np.uint16 if g.data.itemsize == 2 else np.uint32)
    if not writeable:
        data = data.view()
        data.flags.writeable = False
    return asc.GlobalTensor(data, g.id, g.offset)


def _read_only(g):
    data = g.data.view()
    data.flags.writeable = False
    return asc.GlobalTensor(data, g.id, g.offset)


def _drop_pad_args(td, gm, tmpl):
    """DropPadTilingData of Python ints and the three tensors key 1000 touches."""
    d = DropPadTilingData(*(int(getattr(td, name)) for name in DROP_PAD_FIELDS))
    return d, DropPadGm(_bits(gm.permuted_probs_output_grad, False), _read_only(gm.sorted_indices),
                        _bits(gm.probs_grad, True))


def _gather_select(td, gm, tmpl):
    """Kernel G's (td, GatherGm, GatherTemplate) for key 0: no probs, -1 slots skipped."""
    return td, gather_gm(gm.permuted_token_output_grad, gm.sorted_indices, None, gm.tokens_grad), tmpl


# the real key-1000 kernel sets each pass's prob with SetValue while the previous pass's copy-out may still read
# the tile: it syncs S -> MTE3 but never MTE3 -> S (moe_token_permute_with_routing_map_grad.h); waived in checked mode
REFILL_RACE = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "S", "LocalTensor::SetValue",
                         "the real kernel refills its out tile with SetValue with no MTE3 -> S event after the "
                         "copy-out")
KERNELS = {
    TILING_KEY_GATHER: {
        tokens_fp32: Kernel(OP, "KernelMoeTokenUnpermute",
                            (gather_phase(GATHER_PIPE, _gather_select, gather_buffers(tokens_fp32, False, False)),))
        for tokens_fp32 in (False, True)
    },
    TILING_KEY_DROP_PAD: Kernel(OP, "KernelMoeTokenPermuteWithRoutingMap",
                                (PipePhase(DROP_PAD_PIPE, DROP_PAD_BUFFERS, (drop_pad_process,),
                                           _drop_pad_args),), (REFILL_RACE,)),
}
"""KERNELS[0][tokens are fp32] (kernel G has fp32 and 2-byte instantiations) and KERNELS[1000]."""
