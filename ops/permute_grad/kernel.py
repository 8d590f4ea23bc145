"""Kernels of MoeTokenPermuteGrad.

source: moe/moe_token_permute_grad/op_kernel/moe_token_permute_grad.cpp, moe_token_permute_grad.h @ 25fb6b92890d.

    keys 0 / 2 / 4 (bf16 / fp16 / fp32)   KernelMoeTokenUnpermute<T, int32_t, T, PROBS=false>: kernel G
                                          (ops.common.unpermute_gather), the same two compilations every
                                          kernel-G operator uses; negative indices are not skipped.

Ascend 950 has no MoeTokenPermuteGrad kernel: the aclnn calls l0 MoeInitRoutingV2Grad
(ops.l0.moe_init_routing_v2_grad).
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel
from tiling.moe_token_permute_grad import PIPE

from ..common.unpermute_gather import gather_buffers, gather_gm, gather_phase

OP = "MoeTokenPermuteGrad"
L0_950 = "MoeInitRoutingV2Grad"

GmTensors = namedtuple("GmTensors", [
    "permuted_output_grad",   # (R, H) gradient rows in their carrier dtype
    "sorted_indices",         # (N * topK,) int32: the permuted row of every slot
    "input_grad",             # (N, H) output
])


# --- host side ----------------------------------------------------------------------------------------------
def _gather_select(td, gm, tmpl):
    """Kernel G's (td, GatherGm, GatherTemplate): no probs."""
    return td, gather_gm(gm.permuted_output_grad, gm.sorted_indices, None, gm.input_grad), tmpl


KERNELS = {
    tokens_fp32: Kernel(OP, "KernelMoeTokenUnpermute",
                        (gather_phase(PIPE, _gather_select, gather_buffers(tokens_fp32, False, False)),))
    for tokens_fp32 in (False, True)
}
"""KERNELS[tokens are fp32]: kernel G (keys 0 / 2 share the 2-byte compilation, key 4 the fp32 one)."""
