"""CompareScalar, GatherMask and the uint8 -> half / float -> int32 Casts against NumPy, and their faults."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, OutOfBoundsError, ParamRangeError
from ascend_sim._jit import global_aicore
from tests.bits import assert_bits_equal
from tiling import get_soc

from .harness import run, tbuf

SRC_BYTES = 2048


def _bits_little_endian(flags: np.ndarray) -> np.ndarray:
    """The bytes of a little-endian bit mask, written out independently of the kernel's loop."""
    return np.packbits(flags.astype(np.uint8), bitorder="little")


@global_aicore
def compare_kernel(c, p, src, dst):
    """p = (dtype code, mode, count, scalar * 4, as int): load src, CompareScalar, dump the bit mask."""
    buf = asc.tbuf_get(c, 0, asc.ub_u8(c))
    out = asc.tbuf_get(c, 1, asc.ub_u8(c))
    asc.data_copy(c, buf, asc.gm_at(src, 0), buf.size)
    asc.duplicate(c, asc.view_as(c, out, asc.ub_i32(c)), np.int32(0), out.size // 4)
    scalar = p[3] / 4.0
    if p[0] == asc.DT_FLOAT:
        asc.compare_scalar(c, out, asc.view_as(c, buf, asc.ub_f32(c)), p[0], scalar, p[1], p[2])
    elif p[0] == asc.DT_INT32:
        asc.compare_scalar(c, out, asc.view_as(c, buf, asc.ub_i32(c)), p[0], scalar, p[1], p[2])
    else:
        asc.compare_scalar(c, out, asc.view_as(c, buf, asc.ub_u16(c)), p[0], scalar, p[1], p[2])
    asc.data_copy(c, asc.gm_at(dst, 0), out, out.size)


_MODES = {"LT": (asc.CMP_LT, np.less), "GT": (asc.CMP_GT, np.greater), "EQ": (asc.CMP_EQ, np.equal),
          "LE": (asc.CMP_LE, np.less_equal), "GE": (asc.CMP_GE, np.greater_equal),
          "NE": (asc.CMP_NE, np.not_equal)}


def _compare(dtype_code, mode, count, scalar, src_bytes, chip=None):
    out = np.zeros(256, dtype=np.uint8)
    kwargs = {"chip": chip} if chip is not None else {}
    report = run([compare_kernel], [tbuf("buf", SRC_BYTES), tbuf("out", 256)],
                 np.array([dtype_code, mode, count, int(scalar * 4)]), asc.GlobalTensor(src_bytes, 0, 0),
                 asc.GlobalTensor(out, 1, 0), **kwargs)
    return out, report


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_compare_scalar_sets_one_bit_per_element(dtype, mode, rng):
    np_dtype = np.dtype(dtype)
    count = 256 if dtype == "float16" else 128      # whole 256-byte repeats: 2 (fp16) and 2 (fp32)
    values = rng.integers(-3, 4, SRC_BYTES // np_dtype.itemsize).astype(np_dtype) / np_dtype.type(2)
    values[5] = np.nan
    code = asc.DT_FLOAT16 if dtype == "float16" else asc.DT_FLOAT
    out, report = _compare(code, _MODES[mode][0], count, 0.5, values.view(np.uint8).copy())
    want = _bits_little_endian(_MODES[mode][1](values[:count], np_dtype.type(0.5)))
    assert np.array_equal(out[: count // 8], want)
    assert not out[count // 8:].any()
    assert report.cores[0].vec_elem_ops >= count


def test_compare_int32_eq_and_routing_bytes_of_two_are_unequal_to_one():
    # the masked select compares the half-cast map with 1.0: a map byte of 2 (or 255 from int8 -1) is no match
    map_bytes = np.array([0, 1, 2, 1, 255, 1, 0, 3] * 16, dtype=np.uint8)
    halves = map_bytes.astype(np.float16)
    src = np.zeros(SRC_BYTES // 2, dtype=np.float16)
    src[:128] = halves
    out, _ = _compare(asc.DT_FLOAT16, asc.CMP_EQ, 128, 1.0, src.view(np.uint8).copy())
    assert np.array_equal(out[:16], _bits_little_endian(map_bytes == 1))
    ints = np.arange(SRC_BYTES // 4, dtype=np.int32) % 5
    out, _ = _compare(asc.DT_INT32, asc.CMP_EQ, 64, 3.0, ints.view(np.uint8).copy())
    assert np.array_equal(out[:8], _bits_little_endian(ints[:64] == 3))


@pytest.mark.parametrize("case,dtype,mode,count,error", [
    ("count_not_whole_repeats", asc.DT_FLOAT16, asc.CMP_EQ, 200, AlignmentError),
    ("int32_lt_on_a2", asc.DT_INT32, asc.CMP_LT, 64, ElementTypeError),
    ("bf16_on_a2", asc.DT_BF16, asc.CMP_EQ, 128, ElementTypeError),
    ("count_beyond_src", asc.DT_FLOAT, asc.CMP_EQ, 1024, OutOfBoundsError),
    ("negative_count", asc.DT_FLOAT, asc.CMP_EQ, -64, ParamRangeError),
], ids=lambda v: v if isinstance(v, str) else "")
def test_compare_scalar_faults(case, dtype, mode, count, error):
    with pytest.raises(error, match="CompareScalar"):
        _compare(dtype, mode, count, 1.0, np.zeros(SRC_BYTES, dtype=np.uint8))


def test_compare_bf16_and_int32_modes_exist_on_950():
    ints = np.arange(SRC_BYTES // 4, dtype=np.int32) - 100
    out, _ = _compare(asc.DT_INT32, asc.CMP_LT, 64, -70.0, ints.view(np.uint8).copy(), chip=get_soc("950"))
    assert np.array_equal(out[:8], _bits_little_endian(ints[:64] < -70))


@global_aicore
def gather_kernel(c, p, src, pattern, dst, kept):
    """p = (element bytes, reduceMode, mask, repeatTimes, src0BlockStride, src0RepeatStride, src1RepeatStride)."""
    buf = asc.tbuf_get(c, 0, asc.ub_u8(c))
    pat = asc.tbuf_get(c, 1, asc.ub_u8(c))
    out = asc.tbuf_get(c, 2, asc.ub_u8(c))
    asc.data_copy(c, buf, asc.gm_at(src, 0), buf.size)
    asc.data_copy(c, pat, asc.gm_at(pattern, 0), pat.size)
    asc.duplicate(c, asc.view_as(c, out, asc.ub_i32(c)), np.int32(-1), out.size // 4)
    params = asc.GatherMaskParams(p[4], p[3], p[5], p[6])
    if p[0] == 2:
        n = asc.gather_mask(c, asc.view_as(c, out, asc.ub_u16(c)), asc.view_as(c, buf, asc.ub_u16(c)),
                            asc.view_as(c, pat, asc.ub_u16(c)), p[1] != 0, p[2], params)
    elif p[0] == 4:
        n = asc.gather_mask(c, asc.view_as(c, out, asc.ub_i32(c)), asc.view_as(c, buf, asc.ub_i32(c)),
                            asc.view_as(c, pat, asc.ub_u32(c)), p[1] != 0, p[2], params)
    else:     # a uint16 pattern for 4-byte data: the element-type fault
        n = asc.gather_mask(c, asc.view_as(c, out, asc.ub_i32(c)), asc.view_as(c, buf, asc.ub_i32(c)),
                            asc.view_as(c, pat, asc.ub_u16(c)), p[1] != 0, p[2], params)
    asc.set_value(c, kept, 0, n)
    asc.data_copy(c, asc.gm_at(dst, 0), out, out.size)


def _gather(elem_bytes, reduce_mode, mask, repeat, src, pattern_bits, blk=1, rep=8, pat_rep=0, out_bytes=2048):
    dst = np.zeros(out_bytes, dtype=np.uint8)
    kept = asc.GlobalTensor(np.zeros(1, dtype=np.int64), 3, 0)
    pattern = np.zeros(512, dtype=np.uint8)
    packed = np.packbits(pattern_bits.astype(np.uint8), bitorder="little")
    pattern[: packed.size] = packed
    run([gather_kernel], [tbuf("buf", src.nbytes), tbuf("pat", 512), tbuf("out", out_bytes)],
        np.array([elem_bytes, reduce_mode, mask, repeat, blk, rep, pat_rep]),
        asc.GlobalTensor(src.view(np.uint8), 0, 0), asc.GlobalTensor(pattern, 1, 0), asc.GlobalTensor(dst, 2, 0), kept)
    return dst, int(kept.data[0])


@pytest.mark.parametrize("dtype,count", [("uint16", 1000), ("int32", 37), ("int32", 500), ("uint16", 1)])
def test_gather_mask_counter_mode_packs_selected_elements(dtype, count, rng):
    src = rng.integers(0, 30000, 2048 // np.dtype(dtype).itemsize).astype(dtype)
    bits = rng.random(count) < 0.4
    dst, kept = _gather(np.dtype(dtype).itemsize, 1, count, 1, src, bits)
    want = src[:count][bits]
    assert kept == want.size
    got = dst.view(dtype)
    assert np.array_equal(got[:kept], want)
    assert np.all(got.view(np.uint8)[kept * np.dtype(dtype).itemsize:] == 0xFF)   # nothing past rsvdCnt


def test_gather_mask_normal_mode_repeats_with_strides(rng):
    src = np.arange(512, dtype=np.int32)
    bits = np.zeros(256 * 2, dtype=bool)
    bits[0:64:3] = True                 # repeat 0 reads pattern block 0
    bits[256:320:5] = True              # repeat 1 reads pattern block 1 (src1RepeatStride 1)
    dst, kept = _gather(4, 0, 0, 2, src, bits, blk=1, rep=16, pat_rep=1)
    want = np.concatenate([src[0:64][bits[0:64]], src[128:192][bits[256:320]]])
    assert kept == want.size and np.array_equal(dst.view(np.int32)[:kept], want)


@pytest.mark.parametrize("case,elem,mode,mask,repeat,error", [
    ("pattern_type_mismatch", 3, 1, 64, 1, ElementTypeError),
    ("counter_mask_zero", 4, 1, 0, 1, ParamRangeError),
    ("repeat_over_255", 2, 1, 8, 256, ParamRangeError),
    ("src_too_short", 4, 1, 600, 1, OutOfBoundsError),
], ids=lambda v: v if isinstance(v, str) else "")
def test_gather_mask_faults(case, elem, mode, mask, repeat, error):
    with pytest.raises(error, match="GatherMask"):
        _gather(elem, mode, mask, repeat, np.arange(512, dtype=np.int32), np.ones(512, dtype=bool))


def test_gather_mask_result_larger_than_dst_is_out_of_bounds():
    with pytest.raises(OutOfBoundsError, match="GatherMask"):
        _gather(4, 1, 300, 1, np.arange(512, dtype=np.int32), np.ones(300, dtype=bool), out_bytes=1024)


@global_aicore
def cast_kernel(c, n, mode, src, dst_half, dst_int):
    """uint8 -> half (CAST_NONE) of src, and the half values widened to fp32 * 1.25 -> int32 under `mode`."""
    u8 = asc.tbuf_get(c, 0, asc.ub_u8(c))
    h = asc.tbuf_get(c, 1, asc.ub_u16(c))
    f = asc.tbuf_get(c, 2, asc.ub_f32(c))
    i = asc.tbuf_get(c, 3, asc.ub_i32(c))
    asc.data_copy(c, u8, asc.gm_at(src, 0), u8.size)
    asc.cast_u8_to_half(c, h, u8, asc.CAST_NONE, n)
    asc.cast(c, f, asc.DT_FLOAT, h, asc.DT_FLOAT16, asc.CAST_NONE, n)
    asc.muls(c, f, f, -1.25, n)
    asc.cast_f32_to_i32(c, i, f, mode, n)
    asc.data_copy(c, asc.gm_at(dst_half, 0), h, h.size)
    asc.data_copy(c, asc.gm_at(dst_int, 0), i, i.size)


@pytest.mark.parametrize("mode,rounding", [
    ("CAST_ROUND", lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5)),
    ("CAST_RINT", np.rint), ("CAST_FLOOR", np.floor), ("CAST_CEIL", np.ceil), ("CAST_TRUNC", np.trunc)])
def test_casts_u8_to_half_and_f32_to_i32(mode, rounding):
    src = np.arange(256, dtype=np.uint8)
    dst_half = np.zeros(256, dtype=np.uint16)
    dst_int = np.zeros(256, dtype=np.int32)
    run([cast_kernel], [tbuf("u8", 256), tbuf("h", 512), tbuf("f", 1024), tbuf("i", 1024)], 256,
        getattr(asc, mode), asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst_half, 1, 0),
        asc.GlobalTensor(dst_int, 2, 0))
    assert_bits_equal(dst_half.view(np.float16), src.astype(np.float16))
    assert np.array_equal(dst_int, rounding(src.astype(np.float64) * -1.25).astype(np.int32))


def test_cast_f32_to_i32_rejects_cast_none():
    with pytest.raises(ParamRangeError, match="Cast"):
        run([cast_kernel], [tbuf("u8", 256), tbuf("h", 512), tbuf("f", 1024), tbuf("i", 1024)], 256,
            asc.CAST_NONE, asc.GlobalTensor(np.zeros(256, np.uint8), 0, 0),
            asc.GlobalTensor(np.zeros(256, np.uint16), 1, 0), asc.GlobalTensor(np.zeros(256, np.int32), 2, 0))
