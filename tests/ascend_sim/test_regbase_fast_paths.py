"""The fast paths of the register instructions the MX gathers spend their time in, against goldens that do not
share their code: the fp32 -> FP8 Cast (normal lanes round by integer addition) against ml_dtypes' round half to
even after saturating, the bf16 Mul (fp32 product) against the exact product rounded by ml_dtypes, over every
bf16 pattern and random fp32 values."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import regbase as rb
from ascend_sim._jit import global_aicore
from ascend_sim.dtypes import DT_FLOAT8_E4M3FN, DT_FLOAT8_E5M2

from .harness import CHIP950, run, tbuf

CHUNK_WORDS = 4096          # 32-bit lanes per UB chunk (16 KiB)


@global_aicore
def fast_path_kernel(c, p, src, other, dst):
    """p[0] chunks of CHUNK_WORDS 32-bit words; p[1] 0: Cast fp32 -> FP8 (dtype p[2]) of src, the code in byte 4i of
    word i of dst; 1: bf16 Mul of src's and other's uint16 patterns into dst."""
    x = asc.tbuf_get(c, 0, asc.ub_u32(c))
    w = asc.tbuf_get(c, 1, asc.ub_u32(c))
    y = asc.tbuf_get(c, 2, asc.ub_u32(c))
    for k in range(p[0]):
        asc.data_copy(c, x, asc.gm_at(src, k * CHUNK_WORDS), CHUNK_WORDS)
        asc.data_copy(c, w, asc.gm_at(other, k * CHUNK_WORDS), CHUNK_WORDS)
        asc.pipe_barrier(c, asc.PIPE_ALL)
        if rb.vec_scope_begin(c):
            full16 = rb.mreg(c, 0)
            full32 = rb.mreg(c, 1)
            rb.create_mask(c, full16, 2, rb.PAT_ALL)
            rb.create_mask(c, full32, 4, rb.PAT_ALL)
            if p[1] == 0:
                xf = asc.view_as(c, x, asc.ub_f32(c))
                y8 = asc.view_as(c, y, asc.ub_u8(c))
                for j in range(CHUNK_WORDS // 64):
                    rb.reg_load(c, rb.vreg_f32(c, 0), xf, j * 64, rb.LOAD_NORM)
                    rb.vcast_f32_to_fp8(c, rb.vreg_u8(c, 1), rb.vreg_f32(c, 0), p[2], asc.CAST_RINT, rb.SAT, full32)
                    rb.reg_store(c, y8, rb.vreg_u8(c, 1), j * 256, full32)
            else:
                x16 = asc.view_as(c, x, asc.ub_u16(c))
                w16 = asc.view_as(c, w, asc.ub_u16(c))
                y16 = asc.view_as(c, y, asc.ub_u16(c))
                for j in range(CHUNK_WORDS // 64):
                    rb.reg_load(c, rb.vreg_u16(c, 0), x16, j * 128, rb.LOAD_NORM)
                    rb.reg_load(c, rb.vreg_u16(c, 1), w16, j * 128, rb.LOAD_NORM)
                    rb.vmul_bf16(c, rb.vreg_u16(c, 2), rb.vreg_u16(c, 0), rb.vreg_u16(c, 1), full16)
                    rb.reg_store(c, y16, rb.vreg_u16(c, 2), j * 128, full16)
            rb.vec_scope_end(c)
        asc.pipe_barrier(c, asc.PIPE_ALL)
        asc.data_copy(c, asc.gm_at(dst, k * CHUNK_WORDS), y, CHUNK_WORDS)
        asc.pipe_barrier(c, asc.PIPE_ALL)


def _launch(op, words, other=None, dt=0):
    words = np.ascontiguousarray(words, dtype=np.uint32)
    assert words.size % CHUNK_WORDS == 0
    other = np.zeros_like(words) if other is None else np.ascontiguousarray(other, dtype=np.uint32)
    dst = np.zeros_like(words)
    buffers = [tbuf("x", CHUNK_WORDS * 4), tbuf("w", CHUNK_WORDS * 4), tbuf("y", CHUNK_WORDS * 4)]
    run([fast_path_kernel], buffers, np.array([words.size // CHUNK_WORDS, op, dt], dtype=np.int64),
        asc.GlobalTensor(words, 0, 0), asc.GlobalTensor(other, 1, 0), asc.GlobalTensor(dst, 2, 0), chip=CHIP950)
    return dst


def _fp8_golden(bits, fmt):
    """SAT cast: NaN -> +0, magnitudes (Inf included) clipped to the largest finite before rounding half to even."""
    x = bits.view(np.float32)
    big = float(ml_dtypes.finfo(fmt).max)
    with np.errstate(invalid="ignore"):
        clipped = np.clip(x, -big, big)
    codes = clipped.astype(fmt).view(np.uint8).copy()
    codes[np.isnan(x)] = 0
    return codes


def _inputs_fp32(seed):
    rng = np.random.default_rng(seed)
    every_bf16 = np.arange(65536, dtype=np.uint32) << 16                    # every bf16 value, as fp32
    low_bits = every_bf16 | rng.integers(0, 1 << 16, 65536, dtype=np.uint32)    # the same with fp32 tails
    half_way = every_bf16 | (1 << 15)                                       # ties of the bf16 grid
    special = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x80000000, 0x43E00000, 0x43E80000,
                        0x47600000, 0x47700000], dtype=np.uint32)
    out = np.concatenate([every_bf16, low_bits, half_way, special])
    pad = (-out.size) % CHUNK_WORDS
    return np.concatenate([out, np.zeros(pad, np.uint32)])


@pytest.mark.parametrize("dt,fmt", [(DT_FLOAT8_E4M3FN, ml_dtypes.float8_e4m3fn),
                                    (DT_FLOAT8_E5M2, ml_dtypes.float8_e5m2)],
                         ids=["e4m3fn", "e5m2"])
def test_cast_f32_to_fp8_every_bf16_pattern_and_tails(dt, fmt):
    words = _inputs_fp32(7)
    got = _launch(0, words, dt=dt).view(np.uint8)[::4]
    want = _fp8_golden(words, fmt)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} lanes differ, first fp32 0x{words[bad[0]]:08X}: 0x{got[bad[0]]:02X} != " \
                          f"0x{want[bad[0]]:02X}"


def test_bf16_mul_against_the_exact_product():
    rng = np.random.default_rng(11)
    n = 16 * CHUNK_WORDS * 2            # uint16 lanes
    a = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    # the MX use: a power of two (inverse scale) times anything, besides arbitrary pairs
    b = np.where(np.arange(n) % 2 == 0, rng.integers(0, 1 << 16, n),
                 (rng.integers(1, 255, n) << 7) | (rng.integers(0, 2, n) << 15)).astype(np.uint16)
    got = _launch(1, a.view(np.uint32), b.view(np.uint32)).view(np.uint16)
    fa = a.astype(np.uint32) << 16
    fb = b.astype(np.uint32) << 16
    with np.errstate(invalid="ignore", over="ignore"):      # Inf * 0 and products past bf16's range are cases
        exact = fa.view(np.float32).astype(np.float64) * fb.view(np.float32).astype(np.float64)
        want = exact.astype(ml_dtypes.bfloat16).view(np.uint16).copy()      # one rounding of the exact product
    want[np.isnan(exact)] = 0x7FC0
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} lanes differ, first 0x{a[bad[0]]:04X} * 0x{b[bad[0]]:04X}: " \
                          f"0x{got[bad[0]]:04X} != 0x{want[bad[0]]:04X}"
