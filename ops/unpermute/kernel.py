"""Kernels of MoeTokenUnpermute, by tilingKey (op_kernel/moe_token_unpermute.cpp).

source: moe/moe_token_unpermute/op_kernel/moe_token_unpermute.cpp, moe_token_unpermute.h,
moe_token_unpermute_common.h @ 25fb6b92890d.

    keys 0 1 17 25 / 2 3 11 27 / 4 5 13 21    KernelMoeTokenUnpermute<T1, int32_t, T3, PROBS> of
                                             moe_token_unpermute.h: kernel G (ops.common.unpermute_gather)

Every key is the same class: T1 = the tokens' dtype (bits 1-2 of the key), PROBS = bit 0, T3 = the probs'
dtype (bits 3-4, or T1). Negative indices are not skipped (the kernel reads before the tensor: an
OutOfBoundsError here); indices >= rows of permuted_tokens and, with probs, zero probs are skipped.

On Ascend 950 the aclnn calls MoeFinalizeRoutingV2 (arch35 kernels, dropPadMode 2) instead: see
ops.l0.moe_finalize_routing_v2.

Kernel G compiles once for 2-byte tokens and once for fp32 tokens; the probs dtype and the flags are template
values, so this op adds no compilation to the ones PWRM-grad and UWRM already make.
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel
from tiling.moe_token_unpermute import PIPE

from ..common.unpermute_gather import gather_buffers, gather_gm, gather_phase

OP = "MoeTokenUnpermute"

GmTensors = namedtuple("GmTensors", [
    "permuted_tokens",     # (R, H) in its carrier dtype (uint16 bits for bf16 / fp16)
    "sorted_indices",      # (N*K,) int32
    "probs",               # (N, K) in its own dtype, None without probs
    "unpermuted_tokens",   # (N, H) output
])
"""The GM tensors of one launch, in the kernel's argument order."""


def _select(td, gm, tmpl):
    """(td, GatherGm, GatherTemplate) of kernel G: the op's tensors map one to one."""
    return td, gather_gm(gm.permuted_tokens, gm.sorted_indices, gm.probs, gm.unpermuted_tokens), tmpl


def _kernel(tokens_fp32: bool, has_probs: bool, probs_fp32: bool) -> Kernel:
    name = f"KernelMoeTokenUnpermute<PROBS={'true' if has_probs else 'false'}>"
    return Kernel(OP, name, (gather_phase(PIPE, _select, gather_buffers(tokens_fp32, has_probs, probs_fp32)),))


_KERNELS = {(t, h, p): _kernel(t, h, p) for t in (False, True) for h in (False, True) for p in (False, True)
            if h or not p}


def kernel_for(tokens_fp32: bool, has_probs: bool, probs_fp32: bool) -> Kernel:
    """The Kernel of one instantiation (kernel G's buffer list depends on the dtypes and PROBS)."""
    return _KERNELS[(bool(tokens_fp32), bool(has_probs), bool(probs_fp32) and bool(has_probs))]
