"""DataCopyPad / DataCopy: the unit table in both directions, padding rules, ranges and limits.

Each case runs a one-core kernel; the UB image after the copy (or the GM bytes after a copy
out) is compared with a layout computed here from the documented rules, byte by byte.
"""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, OutOfBoundsError, ParamRangeError
from ascend_sim._jit import global_aicore
from ascend_sim.layout import POISON
from tests.bits import assert_bits_equal
from tiling import get_soc

from .harness import run, tbuf

UB_BYTES = 1024


@global_aicore
def pad_in_kernel(c, p, src, dump):
    """DataCopyPad GM->UB into a 1 KiB TBuf with parameters p, then dump the whole TBuf to GM."""
    T = asc.ub_like(c, src)
    buf = asc.tbuf_get(c, 0, T)
    dst = buf[p[9]:]
    params = asc.DataCopyExtParams(p[0], p[1], p[2], p[3])
    pad = asc.DataCopyPadExtParams(p[4] != 0, p[5], p[6], asc.as_elem(buf, p[7]))
    asc.data_copy_pad(c, dst, asc.gm_at(src, p[8]), params, pad)
    asc.data_copy(c, asc.gm_at(dump, 0), buf, buf.size)


@global_aicore
def pad_out_kernel(c, p, ub_image, dst):
    """Fill the TBuf from ub_image (DataCopy), then DataCopyPad UB->GM with parameters p."""
    T = asc.ub_like(c, ub_image)
    buf = asc.tbuf_get(c, 0, T)
    asc.data_copy(c, buf, asc.gm_at(ub_image, 0), buf.size)
    asc.data_copy_pad(c, asc.gm_at(dst, p[8]), buf[p[9]:], asc.DataCopyExtParams(p[0], p[1], p[2], p[3]))


def _params(count, block_len, src_stride=0, dst_stride=0, is_pad=0, left=0, right=0, value=0, gm_off=0, ub_off=0):
    return np.array([count, block_len, src_stride, dst_stride, is_pad, left, right, value, gm_off, ub_off],
                    dtype=np.int64)


def _poison_image(nbytes):
    return np.resize(POISON, nbytes).astype(np.uint8)


def _align32(n):
    return (n + 31) // 32 * 32


def expected_ub(src: np.ndarray, p) -> np.ndarray:
    """UB bytes after DataCopyPad GM->UB, from the documented layout rules."""
    count, blen, sstride, dstride, is_pad, left, right, value, gm_off, ub_off = (int(v) for v in p)
    isz = src.itemsize
    ub = _poison_image(UB_BYTES)
    src_bytes = src.view(np.uint8)
    foot = _align32(blen + (left + right) * isz)
    elem = np.array([value], dtype=src.dtype).view(np.uint8)
    for r in range(count):
        row = ub_off * isz + r * (foot + dstride * 32)
        g = gm_off * isz + r * (blen + sstride)
        data_at = row + left * isz
        ub[data_at: data_at + blen] = src_bytes[g: g + blen]
        if left == 0 and right == 0:
            first = src_bytes[g: g + isz]
            for b in range(data_at + blen, row + foot, isz):
                ub[b: b + isz] = first
        elif is_pad:
            for b in list(range(row, data_at, isz)) + list(range(data_at + blen, row + foot, isz)):
                ub[b: b + isz] = elem
    return ub


IN_CASES = {
    # id: (dtype, params)
    "aligned-64B": (np.uint16, _params(1, 64)),
    "unaligned-47B-dummy-first-elem": (np.int8, _params(1, 47)),
    "3-blocks-srcStride-bytes-dstStride-blocks": (np.uint16, _params(3, 48, src_stride=16, dst_stride=1)),
    "right-pad-16B-isPad": (np.uint16, _params(3, 48, is_pad=1, right=8, value=0x1234)),
    "left-right-pad-isPad-fp32": (np.float32, _params(2, 20, is_pad=1, left=2, right=3, value=7)),
    "pads-without-isPad-are-undefined": (np.uint16, _params(2, 20, left=2, right=1)),
    "gm-offset-and-ub-offset": (np.uint16, _params(2, 30, src_stride=6, gm_off=5, ub_off=48)),
    "blockCount-0-is-nop": (np.uint16, _params(0, 64)),
    "blockLen-0-is-nop": (np.uint16, _params(4, 0)),
}


@pytest.mark.parametrize("case", IN_CASES)
def test_gm_to_ub_layout(case, rng):
    dtype, p = IN_CASES[case]
    src = rng.integers(0, 100, 512).astype(dtype)
    dump = np.zeros(UB_BYTES // np.dtype(dtype).itemsize, dtype=dtype)
    run([pad_in_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dump, 1, 0))
    want = expected_ub(src, p)
    assert_bits_equal(dump.view(np.uint8), want, f"{case}: UB bytes")


OUT_CASES = {
    "aligned-64B": (np.uint16, _params(1, 64)),
    "unaligned-46B-writes-exactly-blockLen": (np.uint16, _params(1, 46)),
    "3-blocks-srcStride-blocks-dstStride-bytes": (np.uint16, _params(3, 40, src_stride=1, dst_stride=10)),
    "fp32-gm-offset": (np.float32, _params(2, 12, dst_stride=4, gm_off=3, ub_off=16)),
    "blockCount-0-is-nop": (np.uint16, _params(0, 64)),
}


@pytest.mark.parametrize("case", OUT_CASES)
def test_ub_to_gm_layout(case, rng):
    dtype, p = OUT_CASES[case]
    count, blen, sstride, dstride, *_rest, gm_off, ub_off = (int(v) for v in p)
    isz = np.dtype(dtype).itemsize
    image = rng.integers(1, 100, UB_BYTES // isz).astype(dtype)
    dst = np.full(512, 0, dtype=dtype)
    run([pad_out_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(image, 0, 0), asc.GlobalTensor(dst, 1, 0))
    want = np.zeros(dst.nbytes, dtype=np.uint8)
    image_bytes = image.view(np.uint8)
    for r in range(count):
        u = ub_off * isz + r * (_align32(blen) + sstride * 32)
        g = gm_off * isz + r * (blen + dstride)
        want[g: g + blen] = image_bytes[u: u + blen]
    assert_bits_equal(dst.view(np.uint8), want, f"{case}: GM bytes")


ERROR_CASES = {
    # id: (direction, dtype, params, chip, error type, message fragment)
    "blockCount-4096-on-910b": ("in", np.uint8, _params(4096, 0 + 1), "ascend910b", ParamRangeError, "blockCount"),
    "blockLen-not-multiple-of-sizeof": ("in", np.uint16, _params(1, 3), "ascend910b", AlignmentError, "sizeof"),
    "blockLen-beyond-21-bits": ("out", np.uint16, _params(1, 2097152), "ascend910b", ParamRangeError, "blockLen"),
    "leftPadding-over-32B": ("in", np.uint16, _params(1, 32, is_pad=1, left=17), "ascend910b", ParamRangeError,
                             "leftPadding"),
    "gm-read-past-end": ("in", np.uint16, _params(2, 64, gm_off=480), "ascend910b", OutOfBoundsError, "'src'"),
    "gm-negative-offset": ("out", np.uint16, _params(1, 64, gm_off=-1), "ascend910b", OutOfBoundsError, "'dst'"),
    "ub-rows-past-tensor": ("in", np.uint16, _params(20, 64), "ascend910b", OutOfBoundsError, "exceeds"),
    "ub-unaligned-address": ("in", np.uint16, _params(1, 32, ub_off=1), "ascend910b", AlignmentError, "aligned"),
    "ub-unaligned-source": ("out", np.uint16, _params(1, 32, ub_off=3), "ascend910b", AlignmentError, "aligned"),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_rule_violations_raise(case):
    direction, dtype, p, chip, err, fragment = ERROR_CASES[case]
    src = np.zeros(512, dtype=dtype)
    other = np.zeros(UB_BYTES // np.dtype(dtype).itemsize, dtype=dtype)
    kernel = pad_in_kernel if direction == "in" else pad_out_kernel
    a, b = (src, other) if direction == "in" else (other, src)
    with pytest.raises(err) as info:
        run([kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(a, 0, 0), asc.GlobalTensor(b, 1, 0),
            chip=get_soc(chip), gm_names=("src", "dst") if direction == "in" else ("ub_image", "dst"))
    e = info.value
    assert fragment in str(e)
    assert (e.core, e.op, e.tiling_key) == (0, "TestOp", 7)
    assert e.call.startswith("DataCopyPad(GM->UB)" if direction == "in" else "DataCopyPad(UB->GM)")


def test_block_count_limit_is_wider_on_950():
    src = np.zeros(8192, dtype=np.uint8)
    dump = np.zeros(UB_BYTES, dtype=np.uint8)
    p = _params(4096, 0)  # blockLen 0: a no-op that still checks blockCount
    run([pad_in_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dump, 1, 0),
        chip=get_soc("ascend950"))
    with pytest.raises(ParamRangeError):
        run([pad_in_kernel], [tbuf("buf", UB_BYTES)], _params(65536, 0), asc.GlobalTensor(src, 0, 0),
            asc.GlobalTensor(dump, 1, 0), chip=get_soc("ascend950"))


@global_aicore
def data_copy_kernel(c, p, src, dst):
    """DataCopy: contiguous p[0] elements in, strided (p[1] blocks of p[2] blocks, gaps p[3], p[4]) out."""
    T = asc.ub_like(c, src)
    buf = asc.tbuf_get(c, 0, T)
    asc.data_copy(c, buf, asc.gm_at(src, 0), p[0])
    asc.data_copy(c, asc.gm_at(dst, 0), buf, asc.DataCopyParams(p[1], p[2], p[3], p[4]))


def test_data_copy_contiguous_and_strided(rng):
    src = rng.integers(1, 1000, 512).astype(np.uint16)
    dst = np.zeros(512, dtype=np.uint16)
    p = np.array([256, 3, 2, 1, 2, 0, 0, 0, 0, 0], dtype=np.int64)  # 3 blocks of 64 B, UB gap 32 B, GM gap 64 B
    rep = run([data_copy_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(src, 0, 0),
              asc.GlobalTensor(dst, 1, 0))
    want = np.zeros_like(dst)
    for r in range(3):
        want[r * 64: r * 64 + 32] = src[r * 48: r * 48 + 32]
    assert np.array_equal(dst, want)
    assert rep.total.mte2_bytes == 512 and rep.total.mte3_bytes == 3 * 64


def test_data_copy_refuses_to_truncate():
    src = np.zeros(512, dtype=np.uint16)
    p = np.array([15, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.int64)  # 30 bytes: not whole 32-byte blocks
    with pytest.raises(AlignmentError, match="multiple of 32"):
        run([data_copy_kernel], [tbuf("buf", UB_BYTES)], p, asc.GlobalTensor(src, 0, 0),
            asc.GlobalTensor(src.copy(), 1, 0))


@global_aicore
def init_output_kernel(c, p, dst):
    asc.init_output(c, asc.gm_at(dst, p[0]), p[1], 5)


def test_init_output_fills_range_and_checks_bounds():
    dst = np.zeros(64, dtype=np.float32)
    run([init_output_kernel], [], np.array([3, 10], dtype=np.int64), asc.GlobalTensor(dst, 0, 0))
    assert np.array_equal(np.nonzero(dst)[0], np.arange(3, 13)) and set(dst[3:13]) == {5.0}
    with pytest.raises(OutOfBoundsError):
        run([init_output_kernel], [], np.array([60, 10], dtype=np.int64), asc.GlobalTensor(dst, 0, 0))


@pytest.mark.parametrize("dst_off,src_off,nbytes", [(0, 0, 0), (3, 5, 31), (1, 2, 64), (31, 0, 300), (0, 0, 4096),
                                                    (17, 9, 10000), (32, 32, 8192)])
def test_streaming_copy_moves_exactly_the_bytes(dst_off, src_off, nbytes):
    """The non-temporal GM writer (long UB -> GM bursts): unaligned heads, 32-byte body, tails."""
    from numba import njit

    from ascend_sim._memory import stream_bytes

    @njit
    def copy(dst, d, src, s, n):
        stream_bytes(dst, d, src, s, n)

    src = np.arange(20000, dtype=np.uint32).astype(np.uint8)
    dst = np.full(20000, 0xEE, np.uint8)
    copy(dst, dst_off, src, src_off, nbytes)
    want = np.full(20000, 0xEE, np.uint8)
    want[dst_off:dst_off + nbytes] = src[src_off:src_off + nbytes]
    assert np.array_equal(dst, want)
