"""The arch35 register model (regbase.py): masks, loads / stores, arithmetic, casts, compare / select, reductions
and the faults, each against hand-worked lanes."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, Kernel, OutOfBoundsError, ParamRangeError, PipeRaceError
from ascend_sim import launch as sim_launch
from ascend_sim._jit import global_aicore
from tests.bits import assert_bits_equal
from tiling import get_soc

from .harness import CHIP950, run, run_vf, tbuf

F32 = 4


@global_aicore
def vf_kernel(c, p, src, dst):
    """p[0] picks the scenario, p[1..3] its arguments; x = src (256 fp32) in UB, y = the result, dumped to dst."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, 0.0, y.size)
    yi = asc.view_as(c, y, asc.ub_i32(c))
    if asc.vec_scope_begin(c):
        r0 = asc.vreg_f32(c, 0)
        r1 = asc.vreg_f32(c, 1)
        ri = asc.vreg_i32(c, 2)
        m = asc.mreg(c, 0)
        full = asc.mreg(c, 1)
        asc.create_mask(c, full, F32, asc.PAT_ALL)
        op = p[0]
        if op == 0:      # CreateMask pattern p[1], Adds 1 with merge mode p[2] over a register of 7s
            asc.create_mask(c, m, F32, p[1])
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.vduplicate(c, r1, np.float32(7.0), full)
            asc.vadds(c, r1, r0, np.float32(1.0), m, p[2])
            asc.reg_store(c, y, r1, 0, full)
        elif op == 1:    # UpdateMask tail loop over p[1] elements: y = 2 x, post-update addressing
            rem = p[1]
            off = 0
            while rem > 0:
                rem = asc.update_mask(c, m, F32, rem)
                asc.reg_load(c, r0, x, off, asc.LOAD_NORM)
                asc.vmuls(c, r1, r0, np.float32(2.0), m)
                off = asc.reg_store(c, y, r1, off, m)
        elif op == 2:    # broadcast load of x[p[1]]
            asc.reg_load(c, r0, x, p[1], asc.LOAD_BRC)
            asc.reg_store(c, y, r0, 0, full)
        elif op == 3:    # Cast fp32 -> int32 with round mode p[1]
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.vcast_f32_to_i32(c, ri, r0, p[1], full)
            asc.reg_store(c, yi, ri, 0, full)
        elif op == 4:    # |x| by Compare + Select, then ReduceSum / ReduceMax / ReduceMin of the first p[1] lanes
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.vmuls(c, r1, r0, np.float32(-1.0), full)
            asc.vcompare_scalar(c, m, r0, np.float32(0.0), asc.R_CMP_LT, full)
            asc.vselect(c, r1, r1, r0, m)
            asc.reg_store(c, y, r1, 0, full)
            asc.update_mask(c, m, F32, p[1])
            asc.vreduce_sum(c, r0, r1, m)
            asc.reg_store(c, y, r0, 64, full)
            asc.vreduce_max(c, r0, r1, m)
            asc.reg_store(c, y, r0, 128, full)
            asc.vreduce_min(c, r0, r1, m)
            asc.reg_store(c, y, r0, 192, full)
        elif op == 5:    # unaligned load of p[2] elements at x[p[1]], unaligned store at y[p[3]]
            asc.reg_load_unalign(c, r0, x, p[1], p[2])
            asc.reg_store_unalign(c, y, r0, p[3], p[2])
        elif op == 6:    # Arange, Sub / Div / Max / Min / Abs of Arange against x
            asc.varange(c, r0, np.float32(p[1]))
            asc.reg_load(c, r1, x, 0, asc.LOAD_NORM)
            if p[2] == 0:
                asc.vsub(c, r1, r0, r1, full)
            elif p[2] == 1:
                asc.vdiv(c, r1, r1, r0, full)
            elif p[2] == 2:
                asc.vmax(c, r1, r0, r1, full)
            elif p[2] == 3:
                asc.vmin(c, r1, r0, r1, full)
            elif p[2] == 4:
                asc.vabs(c, r1, r1, full)
            else:
                asc.vmul(c, r1, r0, r1, full)
                asc.vadd(c, r1, r1, r0, full)
            asc.reg_store(c, y, r1, 0, full)
        elif op == 7:    # a NORM load at element offset p[1] (faults: misaligned, past the tensor)
            asc.reg_load(c, r0, x, p[1], asc.LOAD_NORM)
        elif op == 8:    # a NORM store at element offset p[1] with every lane
            asc.reg_store(c, y, r0, p[1], full)
        elif op == 9:    # a load into a register of another element width
            asc.reg_load(c, asc.vreg_u16(c, 3), x, 0, asc.LOAD_NORM)
        elif op == 10:   # Cast with an unsupported round mode p[1]
            asc.vcast_i32_to_f32(c, r0, ri, p[1], full)
        elif op == 11:   # GatherMask of the lanes where x > p[1]; the kept count goes to y[255]
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.vcompare_scalar(c, m, r0, np.float32(p[1]), asc.R_CMP_GT, full)
            n = asc.vgather_mask(c, r1, r0, m)
            asc.reg_store(c, y, r1, 0, full)
            y[255] = n
        elif op == 12:   # Interleave (p[1] == 0) or DeInterleave of x[0:64], x[64:128] into y[0:128]
            r2 = asc.vreg_f32(c, 4)
            r3 = asc.vreg_f32(c, 5)
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.reg_load(c, r1, x, 64, asc.LOAD_NORM)
            if p[1] == 0:
                asc.vinterleave(c, r2, r3, r0, r1)
            else:
                asc.vdeinterleave(c, r2, r3, r0, r1)
            asc.reg_store(c, y, r2, 0, full)
            asc.reg_store(c, y, r3, 64, full)
        elif op == 15:   # Cast fp32 -> fp16, round mode p[1], RegLayout p[2]
            h = asc.vreg_u16(c, 6)
            asc.reg_load(c, r0, x, 0, asc.LOAD_NORM)
            asc.vcast_f32_to_f16(c, h, r0, p[1], p[2], full)
            asc.reg_store(c, asc.view_as(c, y, asc.ub_u16(c)), h, 0, full)
        elif op == 16:   # Cast uint16 -> uint32 with RegLayout p[1]
            h = asc.vreg_u16(c, 6)
            w = asc.vreg_u32(c, 7)
            asc.reg_load(c, h, asc.view_as(c, x, asc.ub_u16(c)), 0, asc.LOAD_NORM)
            asc.vcast_u16_to_u32(c, w, h, p[1], full)
            asc.reg_store(c, asc.view_as(c, y, asc.ub_u32(c)), w, 0, full)
        elif op == 17:   # StoreDist PACK4_B32 of the int32 lanes of x (first p[1] lanes) at byte p[2] of y
            asc.reg_load(c, ri, asc.view_as(c, x, asc.ub_i32(c)), 0, asc.LOAD_NORM)
            asc.update_mask(c, m, F32, p[1])
            asc.reg_store_pack4(c, asc.view_as(c, y, asc.ub_u8(c)), ri, p[2], m)
        elif op == 18:   # MaskAnd of VL p[1] and H, then Duplicate 1.0 under it
            m2 = asc.mreg(c, 2)
            asc.create_mask(c, m, F32, p[1])
            asc.create_mask(c, m2, F32, asc.PAT_H)
            asc.vmask_and(c, m, m, m2, full)
            asc.vduplicate(c, r0, np.float32(1.0), m)
            asc.reg_store(c, y, r0, 0, full)
        elif op == 19:   # Cast int32 -> uint8 (RegLayout ZERO) with SatMode p[1], stored as bytes
            b8 = asc.vreg_u8(c, 8)
            asc.reg_load(c, ri, asc.view_as(c, x, asc.ub_i32(c)), 0, asc.LOAD_NORM)
            asc.vcast_i32_to_u8(c, b8, ri, p[1], full)
            asc.reg_store(c, asc.view_as(c, y, asc.ub_u8(c)), b8, 0, asc.mreg(c, 1))
        asc.vec_scope_end(c)
    if p[0] == 14:       # a register instruction outside any __VEC_SCOPE__
        asc.create_mask(c, asc.mreg(c, 0), F32, asc.PAT_ALL)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


def launch(p, src, chip=CHIP950):
    return run_vf(vf_kernel, p, src.astype(np.float32), np.zeros(256, np.float32), chip=chip)


SRC = np.arange(256, dtype=np.float32) - 100.5


@pytest.mark.parametrize("mode", [asc.ZEROING, asc.MERGING], ids=["zeroing", "merging"])
@pytest.mark.parametrize("pattern,active", [(asc.PAT_ALL, 64), (asc.PAT_ALLF, 0), (1, 1), (3, 3), (8, 8), (32, 32),
                                            (64, 64), (128, 64), (asc.PAT_H, 32), (asc.PAT_Q, 16),
                                            (asc.PAT_M3, 63), (asc.PAT_M4, 64)],
                         ids=["ALL", "ALLF", "VL1", "VL3", "VL8", "VL32", "VL64", "VL128", "H", "Q", "M3", "M4"])
def test_create_mask_patterns_and_merge_modes(pattern, active, mode):
    got = launch([0, pattern, mode], SRC)
    want = np.zeros(256, dtype=np.float32)
    want[:64] = 0.0 if mode == asc.ZEROING else 7.0
    want[:active] = SRC[:active] + 1
    assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130, 256], ids=lambda n: f"n{n}")
def test_update_mask_tail_loop_with_post_update(n):
    got = launch([1, n], SRC)
    want = np.zeros(256, dtype=np.float32)
    want[:n] = SRC[:n] * 2
    assert np.array_equal(got, want)


@pytest.mark.parametrize("k", [0, 5, 255], ids=lambda k: f"at{k}")
def test_broadcast_load(k):
    got = launch([2, k], SRC)
    assert np.array_equal(got[:64], np.full(64, SRC[k], dtype=np.float32)) and not got[64:].any()


CAST_IN = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.7, -2.7, -0.0, np.nan, np.inf, -np.inf, 3e9, -3e9,
                    2147483520.0, 1e-30], dtype=np.float32)
CAST_WANT = {
    asc.CAST_RINT: [0, 2, 2, 0, -2, -2, 3, -3, 0, 0, 2147483647, -2147483648, 2147483647, -2147483648, 2147483520, 0],
    asc.CAST_ROUND: [1, 2, 3, -1, -2, -3, 3, -3, 0, 0, 2147483647, -2147483648, 2147483647, -2147483648, 2147483520, 0],
    asc.CAST_FLOOR: [0, 1, 2, -1, -2, -3, 2, -3, 0, 0, 2147483647, -2147483648, 2147483647, -2147483648, 2147483520, 0],
    asc.CAST_CEIL: [1, 2, 3, 0, -1, -2, 3, -2, 0, 0, 2147483647, -2147483648, 2147483647, -2147483648, 2147483520, 1],
    asc.CAST_TRUNC: [0, 1, 2, 0, -1, -2, 2, -2, 0, 0, 2147483647, -2147483648, 2147483647, -2147483648, 2147483520, 0],
}


@pytest.mark.parametrize("rnd", list(CAST_WANT), ids=["RINT", "ROUND", "FLOOR", "CEIL", "TRUNC"])
def test_cast_f32_to_i32_rounding_saturation_nan(rnd):
    src = np.zeros(256, dtype=np.float32)
    src[:16] = CAST_IN
    got = launch([3, rnd], src).view(np.int32)
    want = np.zeros(256, dtype=np.int32)
    want[:16] = CAST_WANT[rnd]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [64, 5, 0], ids=lambda n: f"active{n}")
def test_compare_select_and_reductions(n):
    src = np.zeros(256, dtype=np.float32)
    src[:64] = np.array([(-1) ** i * (i + 0.25) for i in range(64)], dtype=np.float32)
    got = launch([4, n], src)
    absx = np.abs(src[:64])
    assert np.array_equal(got[:64], absx)
    lanes = np.where(np.arange(64) < n, absx, 0).astype(np.float32)
    while lanes.size > 1:
        lanes = lanes[0::2] + lanes[1::2]
    assert got[64] == lanes[0] and not got[65:128].any()
    assert got[128] == (absx[:n].max() if n else 0) and got[192] == (absx[:n].min() if n else 0)


@pytest.mark.parametrize("start,count,at", [(3, 10, 5), (0, 64, 1), (250, 6, 0), (7, 0, 9)],
                         ids=["mid", "full-shifted", "tail", "empty"])
def test_unaligned_load_and_store(start, count, at):
    got = launch([5, start, count, at], SRC)
    want = np.zeros(256, dtype=np.float32)
    want[at: at + count] = SRC[start: start + count]
    assert np.array_equal(got, want)


ARITH = {0: lambda a, x: a - x, 1: lambda a, x: x / a, 2: np.maximum, 3: np.minimum,
         4: lambda a, x: np.abs(x), 5: lambda a, x: a * x + a}


@pytest.mark.parametrize("kind", list(ARITH), ids=["sub", "div", "max", "min", "abs", "mul_add"])
def test_arange_and_binary_ops(kind):
    src = SRC.copy()
    src[3] = -0.0
    got = launch([6, 0, kind], src)
    a = np.arange(64, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = ARITH[kind](a, src[:64]).astype(np.float32)
    assert_bits_equal(got[:64], want)


@pytest.mark.parametrize("p,error,fields", [
    ([7, 3], AlignmentError, ("12", "32")),
    ([7, 200], OutOfBoundsError, ("1056",)),
    ([8, 240], OutOfBoundsError, ("1216",)),
    ([9], ElementTypeError, ()),
    ([10, asc.CAST_FLOOR], ParamRangeError, ("round mode",)),
], ids=["misaligned-load", "load-past-tensor", "store-past-tensor", "wrong-register-width", "cast-round-mode"])
def test_faults(p, error, fields):
    with pytest.raises(error) as exc:
        launch(p, SRC)
    for f in fields:
        assert f in str(exc.value)
    assert "MicroAPI" in str(exc.value)


def test_wrong_chip_is_refused():
    with pytest.raises(ElementTypeError) as exc:
        launch([0, asc.PAT_ALL, 0], SRC, chip=get_soc("ascend910b"))
    assert "2201" in str(exc.value) and "__VEC_SCOPE__" in str(exc.value)


@pytest.mark.parametrize("threshold", [-1000, 0, 50, 1000], ids=lambda t: f"gt{t}")
def test_gather_mask_compresses_active_lanes(threshold):
    src = ((np.arange(256) * 37) % 200 - 100).astype(np.float32)
    got = launch([11, threshold], src)
    kept = src[:64][src[:64] > threshold]
    want = np.zeros(64, dtype=np.float32)
    want[: kept.size] = kept
    assert np.array_equal(got[:64], want) and got[255] == kept.size


def test_interleave_and_deinterleave():
    a, b = SRC[:64], SRC[64:128]
    inter = launch([12, 0], SRC)[:128]
    assert np.array_equal(inter, np.stack([a, b], axis=1).reshape(-1))
    de = launch([12, 1], SRC)[:128]
    pair = SRC[:128]
    assert np.array_equal(de[:64], pair[0::2]) and np.array_equal(de[64:], pair[1::2])


def test_instruction_outside_a_scope_is_refused():
    with pytest.raises(ElementTypeError) as exc:
        launch([14], SRC)
    assert "CreateMask" in str(exc.value) and "mode -1" in str(exc.value)


def test_a_vf_is_one_vector_instruction_and_each_register_instruction_a_call():
    dst = np.zeros(256, dtype=np.float32)
    args = (asc.GlobalTensor(SRC, 0, 0), asc.GlobalTensor(dst, 1, 0))
    buffers = [tbuf("x", 1024), tbuf("y", 1024)]
    small = run([vf_kernel], buffers, np.array([2, 0], dtype=np.int64), *args, chip=CHIP950).total
    big = run([vf_kernel], buffers, np.array([1, 256], dtype=np.int64), *args, chip=CHIP950).total
    # Duplicate + the VF; op 2 issues 3 register instructions inside it, op 1 (four tail rounds) 1 + 4 * 4
    assert small.vec_instr == 2 and big.vec_instr == 2
    assert big.calls - small.calls == (1 + 16) - 3


F16_IN = np.array([1.0, 1 + 2 ** -11, -(1 + 2 ** -11), -0.0, np.nan, 65520.0], dtype=np.float32)
F16_WANT = {
    asc.CAST_RINT: [0x3C00, 0x3C00, 0xBC00, 0x8000, 0x7E00, 0x7C00],
    asc.CAST_ROUND: [0x3C00, 0x3C01, 0xBC01, 0x8000, 0x7E00, 0x7C00],
    asc.CAST_FLOOR: [0x3C00, 0x3C00, 0xBC01, 0x8000, 0x7E00, 0x7BFF],
    asc.CAST_CEIL: [0x3C00, 0x3C01, 0xBC00, 0x8000, 0x7E00, 0x7C00],
    asc.CAST_TRUNC: [0x3C00, 0x3C00, 0xBC00, 0x8000, 0x7E00, 0x7BFF],
    asc.CAST_ODD: [0x3C00, 0x3C01, 0xBC01, 0x8000, 0x7E00, 0x7BFF],
}


@pytest.mark.parametrize("layout", [asc.LAYOUT_ZERO, asc.LAYOUT_ONE], ids=["ZERO", "ONE"])
@pytest.mark.parametrize("rnd", list(F16_WANT), ids=["RINT", "ROUND", "FLOOR", "CEIL", "TRUNC", "ODD"])
def test_cast_f32_to_f16_round_modes_and_layout(rnd, layout):
    src = np.zeros(256, dtype=np.float32)
    src[: F16_IN.size] = F16_IN
    got = launch([15, rnd, layout], src).view(np.uint16)[:128]
    want = np.zeros(128, dtype=np.uint16)
    want[layout: 2 * F16_IN.size: 2] = F16_WANT[rnd]
    assert [hex(v) for v in got] == [hex(v) for v in want]


@pytest.mark.parametrize("layout", [asc.LAYOUT_ZERO, asc.LAYOUT_ONE], ids=["ZERO-even", "ONE-odd"])
def test_cast_u16_to_u32_takes_even_or_odd_elements(layout):
    halves = (np.arange(512, dtype=np.uint32) * 977 % 65536).astype(np.uint16)
    got = launch([16, layout], halves.view(np.float32)).view(np.uint32)[:64]
    assert np.array_equal(got, halves[layout:128:2].astype(np.uint32))


@pytest.mark.parametrize("n,at", [(64, 0), (10, 32), (0, 64)], ids=["all-at0", "10-at32", "none"])
def test_store_pack4_writes_low_bytes(n, at):
    ints = (np.arange(256, dtype=np.int64) * 0x01010101 + 0x300).astype(np.uint32)
    got = launch([17, n, at], ints.view(np.float32)).view(np.uint8)
    want = np.zeros(1024, dtype=np.uint8)
    want[at: at + n] = ints[:n] & 0xFF
    assert np.array_equal(got, want)


def test_store_pack4_misaligned():
    with pytest.raises(AlignmentError):
        launch([17, 4, 1], SRC)


@pytest.mark.parametrize("vl,active", [(8, 8), (64, 32), (asc.PAT_ALLF, 0)], ids=["VL8", "VL64", "ALLF"])
def test_mask_and(vl, active):
    got = launch([18, vl], SRC)
    want = np.zeros(256, dtype=np.float32)
    want[:active] = 1.0
    assert np.array_equal(got, want)


def test_checked_mode_sees_register_loads_as_vector_reads():
    """No flag between the GM->UB copy (MTE2) and the VF's register load (PIPE_V): a RAW race on x's bytes."""
    dst = np.zeros(256, dtype=np.float32)
    buffers = (tbuf("x", 1024), tbuf("y", 1024))
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (vf_kernel,), tuple(b.name for b in buffers))
    with pytest.raises(PipeRaceError) as exc:
        sim_launch(kernel, block_dim=1, plan=buffers, chip=CHIP950, check="race",
                   args=(np.array([2, 0], dtype=np.int64), asc.GlobalTensor(SRC, 0, 0), asc.GlobalTensor(dst, 1, 0)))
    assert "__VEC_SCOPE__" in str(exc.value) and "DataCopy(GM->UB)" in str(exc.value)


@pytest.mark.parametrize("sat", [asc.NO_SAT, asc.SAT], ids=["NO_SAT", "SAT"])
def test_cast_i32_to_u8_layout_zero(sat):
    ints = np.zeros(256, dtype=np.int32)
    ints[:6] = [0, 7, 255, 256, -1, 1000]
    got = launch([19, sat], ints.view(np.float32)).view(np.uint8)[:256]
    want = np.zeros(256, dtype=np.uint8)
    want[0:24:4] = [0, 7, 255, 0, 255, 232] if sat == asc.NO_SAT else [0, 7, 255, 255, 0, 255]
    assert np.array_equal(got, want)
