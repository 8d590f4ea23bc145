"""DataCopyPad's UB footprint at its exact boundary, in both directions.

On the device DataCopyPad moves whole 32-byte blocks on the UB side: GM->UB writes each block as
AlignUp(blockLen + pads, 32) bytes (the tail filled with dummies / pad values), UB->GM reads each block as
AlignUp(blockLen, 32) bytes and drops the tail on the way to GM. Block i starts i * (that + stride * 32)
bytes in (dstStride on GM->UB, srcStride on UB->GM, both in 32-byte blocks). So a LocalTensor that holds
blockLen bytes but not the rounded footprint is overrun: the copy must raise OutOfBoundsError naming the
footprint. Each case gives the copy a LocalTensor of an exact size (TBuf::GetWithOffset) and sits on one
side of the boundary: the footprint exactly fits, or the tensor is a few bytes short of it (while the
unrounded bytes, (n - 1) * row stride + blockLen, would fit).
"""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import OutOfBoundsError
from ascend_sim._jit import global_aicore
from ascend_sim.layout import POISON
from tests.bits import assert_bits_equal

from .harness import run, tbuf

UB_BYTES = 1024
SRC_ELEMS = 512   # uint16 GM source / destination


@global_aicore
def pad_in_sized_kernel(c, p, src, dump):
    """DataCopyPad GM->UB into a LocalTensor of exactly p[8] elements at the TBuf's start; dump the TBuf."""
    T = asc.ub_like(c, src)
    dst = asc.tbuf_get_with_offset(c, 0, T, p[8], 0)
    pad = asc.DataCopyPadExtParams(p[4] != 0, p[5], p[6], asc.as_elem(dst, p[7]))
    asc.data_copy_pad(c, dst, asc.gm_at(src, 0), asc.DataCopyExtParams(p[0], p[1], p[2], p[3]), pad)
    whole = asc.tbuf_get(c, 0, T)
    asc.data_copy(c, asc.gm_at(dump, 0), whole, whole.size)


@global_aicore
def pad_out_sized_kernel(c, p, ub_image, dst):
    """Fill the TBuf from ub_image, then DataCopyPad UB->GM from a LocalTensor of exactly p[8] elements."""
    T = asc.ub_like(c, ub_image)
    whole = asc.tbuf_get(c, 0, T)
    asc.data_copy(c, whole, asc.gm_at(ub_image, 0), whole.size)
    src = asc.tbuf_get_with_offset(c, 0, T, p[8], 0)
    asc.data_copy_pad(c, asc.gm_at(dst, 0), src, asc.DataCopyExtParams(p[0], p[1], p[2], p[3]))


def _params(count, block_len, *, tensor_bytes, src_stride=0, dst_stride=0, is_pad=0, left=0, right=0, value=0):
    return np.array([count, block_len, src_stride, dst_stride, is_pad, left, right, value, tensor_bytes // 2],
                    dtype=np.int64)


IN_CASES = {
    # id: (params, footprint bytes or None when it fits). uint16 elements; footprints by hand:
    # one block of 40 B -> AlignUp(40, 32) = 64 B
    "1x40B-tensor-64B-fits": (_params(1, 40, tensor_bytes=64), None),
    "1x40B-tensor-48B-short": (_params(1, 40, tensor_bytes=48), 64),
    "1x40B-tensor-40B-short": (_params(1, 40, tensor_bytes=40), 64),
    # whole blocks: 64 B needs exactly 64 B
    "1x64B-tensor-64B-fits": (_params(1, 64, tensor_bytes=64), None),
    # 3 blocks of 40 B, dstStride 1 block: row stride 64 + 32 = 96, footprint 2 * 96 + 64 = 256
    "3x40B-dstStride1-tensor-256B-fits": (_params(3, 40, tensor_bytes=256, dst_stride=1), None),
    "3x40B-dstStride1-tensor-232B-short": (_params(3, 40, tensor_bytes=232, dst_stride=1), 256),   # 2 * 96 + 40
    "3x40B-dstStride1-tensor-254B-short": (_params(3, 40, tensor_bytes=254, dst_stride=1), 256),
    # srcStride is GM bytes: it does not move the UB rows. 2 blocks of 40 B, 10 B apart on GM: 64 + 64 = 128
    "2x40B-srcStride10-tensor-128B-fits": (_params(2, 40, tensor_bytes=128, src_stride=10), None),
    "2x40B-srcStride10-tensor-104B-short": (_params(2, 40, tensor_bytes=104, src_stride=10), 128),
    # pads count in the footprint: 40 B + right 8 elements (16 B) = 56 -> 64
    "1x40B-rightPad16B-tensor-64B-fits": (_params(1, 40, tensor_bytes=64, is_pad=1, right=8, value=7), None),
    "1x40B-rightPad16B-tensor-56B-short": (_params(1, 40, tensor_bytes=56, is_pad=1, right=8, value=7), 64),
    # 2 blocks of left 4 elements (8 B) + 48 B = 56 -> 64: footprint 64 + 64 = 128 (unrounded 64 + 56 = 120)
    "2x48B-leftPad8B-tensor-128B-fits": (_params(2, 48, tensor_bytes=128, is_pad=1, left=4, value=7), None),
    "2x48B-leftPad8B-tensor-120B-short": (_params(2, 48, tensor_bytes=120, is_pad=1, left=4, value=7), 128),
}


def _in_expected(src: np.ndarray, p) -> np.ndarray:
    """UB image after the copy, for the fitting cases: GM rows at their 32-byte rounded UB rows, dummies or
    pads in the row tails, poison (untouched UB) everywhere else."""
    count, blen, sstride, dstride, is_pad, left, right, value, _ = (int(v) for v in p)
    ub = np.resize(POISON, UB_BYTES).astype(np.uint8)
    src_bytes = src.view(np.uint8)
    foot = (blen + 2 * (left + right) + 31) // 32 * 32
    pad_bytes = np.array([value], np.uint16).view(np.uint8)
    for r in range(count):
        row = r * (foot + dstride * 32)
        g = r * (blen + sstride)
        data = row + 2 * left
        ub[data: data + blen] = src_bytes[g: g + blen]
        fill = src_bytes[g: g + 2] if left == right == 0 else pad_bytes
        for b in list(range(row, data, 2)) + list(range(data + blen, row + foot, 2)):
            ub[b: b + 2] = fill
    return ub


@pytest.mark.parametrize("case", IN_CASES)
def test_gm_to_ub_footprint_is_rounded_to_32_bytes(case, rng):
    p, short_of = IN_CASES[case]
    src = rng.integers(1, 1000, SRC_ELEMS).astype(np.uint16)
    dump = np.zeros(UB_BYTES // 2, dtype=np.uint16)
    args = ([pad_in_sized_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(src, 0, 0),
            asc.GlobalTensor(dump, 1, 0))
    if short_of is None:
        run(*args)
        want = _in_expected(src, p)
        assert_bits_equal(dump.view(np.uint8), want, f"{case}: UB bytes")
        return
    with pytest.raises(OutOfBoundsError) as info:
        run(*args, gm_names=("src", "dump"))
    e = info.value
    assert e.call.startswith("DataCopyPad(GM->UB)") and (e.core, e.tiling_key) == (0, 7)
    assert f"UB access of {short_of} bytes" in str(e) and f"tensor's {int(p[8]) * 2} bytes" in str(e), str(e)
    assert not dump.any(), "no byte may move after the fault"


OUT_CASES = {
    # id: (params, footprint bytes or None when it fits). UB->GM reads AlignUp(blockLen, 32) per block.
    "1x40B-tensor-64B-fits": (_params(1, 40, tensor_bytes=64), None),
    "1x40B-tensor-48B-short": (_params(1, 40, tensor_bytes=48), 64),
    "1x40B-tensor-40B-short": (_params(1, 40, tensor_bytes=40), 64),
    "1x64B-tensor-64B-fits": (_params(1, 64, tensor_bytes=64), None),
    # 3 blocks of 40 B, srcStride 1 block (UB side): row stride 96, footprint 2 * 96 + 64 = 256
    "3x40B-srcStride1-tensor-256B-fits": (_params(3, 40, tensor_bytes=256, src_stride=1), None),
    "3x40B-srcStride1-tensor-232B-short": (_params(3, 40, tensor_bytes=232, src_stride=1), 256),   # 2 * 96 + 40
    "3x40B-srcStride1-tensor-254B-short": (_params(3, 40, tensor_bytes=254, src_stride=1), 256),
    # dstStride is GM bytes: the UB rows stay 64 B apart. 2 blocks of 40 B: 64 + 64 = 128
    "2x40B-dstStride6-tensor-128B-fits": (_params(2, 40, tensor_bytes=128, dst_stride=6), None),
    "2x40B-dstStride6-tensor-104B-short": (_params(2, 40, tensor_bytes=104, dst_stride=6), 128),
}


@pytest.mark.parametrize("case", OUT_CASES)
def test_ub_to_gm_footprint_is_rounded_to_32_bytes(case, rng):
    p, short_of = OUT_CASES[case]
    count, blen, sstride, dstride = (int(v) for v in p[:4])
    image = rng.integers(1, 1000, UB_BYTES // 2).astype(np.uint16)
    dst = np.zeros(SRC_ELEMS, dtype=np.uint16)
    args = ([pad_out_sized_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(image, 0, 0),
            asc.GlobalTensor(dst, 1, 0))
    if short_of is None:
        run(*args)
        want = np.zeros(dst.nbytes, dtype=np.uint8)
        image_bytes = image.view(np.uint8)
        for r in range(count):   # UB rows 32-byte rounded + srcStride blocks apart, GM rows blockLen + dstStride
            u, g = r * ((blen + 31) // 32 * 32 + sstride * 32), r * (blen + dstride)
            want[g: g + blen] = image_bytes[u: u + blen]
        assert_bits_equal(dst.view(np.uint8), want, f"{case}: GM bytes")
        return
    with pytest.raises(OutOfBoundsError) as info:
        run(*args, gm_names=("ub_image", "dst"))
    e = info.value
    assert e.call.startswith("DataCopyPad(UB->GM)") and (e.core, e.tiling_key) == (0, 7)
    assert f"UB access of {short_of} bytes" in str(e) and f"tensor's {int(p[8]) * 2} bytes" in str(e), str(e)
    assert not dst.any(), "no byte may reach GM after the fault"
