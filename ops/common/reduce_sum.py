"""Building block R: ReduceSumFunc, the fp32 row sum behind every probs gradient.

Two copies exist in the real kernels (@ 25fb6b92890d): moe_token_unpermute_grad_base.h (MoeTokenUnpermuteGrad) and
moe_token_unpermute_with_routing_map_grad_base.h (its routing-map sibling). They differ in one thing: the
tier thresholds 4096 / 512 / 64 are inclusive (`>=`) in the first and strict (`>`) in the second. A row of
exactly a threshold's length takes a different instruction sequence (the fold of an exact threshold is an
empty Add in one copy, a skipped tier in the other) with the same value; `strict` picks the copy, so the
vector-instruction counts of a report match the operator's own.

The sum is a fixed tree in fp32: fold the upper half onto the lower half (halves rounded up to whole 32-byte
blocks) until the row fits the tier's window, fold the window onto its lower part, then BlockReduceSum
(8 -> 1 per 32-byte block) and WholeReduceSum. tmp_buffer is scratch and ends up overwritten.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore

from . import int_math

BUFFER_32B_CALNUM = 8      # fp32 elements per 32-byte block
FP32_ONE_REPEAT = 64       # fp32 elements per 256-byte repeat


@aicore
def binary_add(c, tmp_buffer, length, threshold, offset):
    """BinaryAddFunc: fold halves (32-byte aligned) until <= threshold, then fold onto `offset` elements."""
    total = length
    half = int_math.align_up(int_math.ceil_div(total, 2), BUFFER_32B_CALNUM)
    while total > threshold:
        asc.add(c, tmp_buffer, tmp_buffer, tmp_buffer[half:], total - half)
        total = half
        half = int_math.align_up(int_math.ceil_div(total, 2), BUFFER_32B_CALNUM)
    asc.add(c, tmp_buffer, tmp_buffer, tmp_buffer[offset:], total - offset)


@aicore
def _tier(length, threshold, strict):
    """The tier test: length > threshold (strict, the routing-map gradient) or >= (MoeTokenUnpermuteGrad)."""
    return length > threshold if strict else length >= threshold


@aicore
def reduce_sum(c, dst_buffer, tmp_buffer, length, strict):
    """ReduceSumFunc: dst_buffer[0] = fp32 sum of tmp_buffer[:length] in the kernel's tree order.

    Args: dst_buffer / tmp_buffer fp32 LocalTensors (tmp_buffer at least AlignUp(length, 64) elements and
    overwritten); length in elements; strict 1 for the `>` thresholds, 0 for `>=`.
    """
    if _tier(length, 4096, strict):
        binary_add(c, tmp_buffer, length, 8192, 4096)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 64, 64, 1, 1, 8)   # 4096 -> 512
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 8, 64, 1, 1, 8)    # -> 64
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, 64, 1, 1, 8)    # -> 8
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)     # -> 1
    elif _tier(length, 512, strict):
        binary_add(c, tmp_buffer, length, 1024, 512)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 8, 64, 1, 1, 8)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, 64, 1, 1, 8)
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)
    elif _tier(length, 64, strict):
        binary_add(c, tmp_buffer, length, 128, 64)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, 64, 1, 1, 8)
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)
    else:
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, length, 1, 1, 1, 8)


@aicore
def copy_fp32(c, dst, src, repeat_times, tail_offset, tail_mask):
    """The gradient kernels' fp32 "Copy" pair: whole 64-element repeats, then the tail repeat."""
    params = asc.CopyRepeatParams(1, 1, 8, 8)
    asc.copy(c, dst, src, FP32_ONE_REPEAT, repeat_times, params)
    asc.copy(c, dst[tail_offset:], src[tail_offset:], tail_mask, 1, params)
