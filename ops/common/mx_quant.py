"""MX quantisation of token rows as vector functions (the VFs of MoeInitRoutingV3's arch35
gather-quant kernels, moe_v3_gather_mxfp8_quant.h / moe_v3_gather_mxfp4_quant.h).

A row of `cols` fp16 / bf16 elements (uint16 bit patterns in UB) becomes, per 32-element block,
one E8M0 scale code and 32 FP8 (E5M2, E4M3FN) or FP4 (E2M1) element codes:

1. compute_max_exp (vfComputeMaxExp / vfComputeAmax): per block the largest element as a bf16
   bit pattern without sign: fp16 is truncated to bf16 first, its Inf/NaN count as 0x7F80.
   The floor rule keeps only the exponent field (mask 0x7F80), the round-scale rule the
   magnitude (0x7FFF). Lanes past `cols` are zero (masked lanes of a partial block).
2. compute_scale (vfComputeScale / vfComputeRoundScale): the scale code and its inverse as
   bf16 bits 2^(127 - code); NaN/Inf blocks get 0xFF and a NaN inverse; the padding slot of an
   odd block count gets code 0 and inverse 0.
3. compute_data (vfComputeData): element * inverse (exact, a power of two), then Cast with
   CAST_RINT and SAT; FP4 codes are packed two per byte, the even element in the low nibble.

Quant modes: 2 MXFP8 E5M2, 3 MXFP8 E4M3FN, 9 MXFP4 E2M1.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim._jit import aicore

MX_BLOCK = 32
QUANT_MXFP8_E5M2 = 2
QUANT_MXFP8_E4M3FN = 3
QUANT_MXFP4_E2M1 = 9
NAN_INV_SCALE = 0x7F81       # bf16 NaN: the multiplier of a NaN/Inf block
BF16_INF = 0x7F80


@aicore
def blocks_of(cols):
    return (cols + MX_BLOCK - 1) // MX_BLOCK


@aicore
def scale_cols_of(cols):
    """E8M0 slots per row: one per block, padded to an even count."""
    b = blocks_of(cols)
    return b + b % 2


@aicore
def out_bytes_of(cols, quant_mode):
    """Bytes of one quantised row."""
    return cols // 2 if quant_mode == QUANT_MXFP4_E2M1 else cols


@aicore
def _emax(quant_mode):
    """Exponent of the element format's largest normal (E5M2 15, E4M3FN 8, E2M1 2)."""
    if quant_mode == QUANT_MXFP8_E5M2:
        return 15
    if quant_mode == QUANT_MXFP8_E4M3FN:
        return 8
    return 2


@aicore
def _element_dt(quant_mode):
    if quant_mode == QUANT_MXFP8_E5M2:
        return asc.DT_FLOAT8_E5M2
    if quant_mode == QUANT_MXFP8_E4M3FN:
        return asc.DT_FLOAT8_E4M3FN
    return asc.DT_FLOAT4_E2M1


@aicore
def _as_bf16_magnitude(h, is_fp16, mask):
    """An element as the bf16 pattern the max runs on: sign cleared, masked; fp16 truncated (CAST_TRUNC)."""
    if not is_fp16:
        return np.int64(h) & mask
    if (np.int64(h) & 0x7C00) == 0x7C00:
        return np.int64(BF16_INF)
    return np.int64(asc.f16_bits_to_f32_bits(h) >> np.uint32(16)) & mask


@aicore
def compute_max_exp(c, max_exp_local, x_local, cols, is_fp16, round_scale):
    """Per block of x_local[:cols] (uint16) the largest masked bf16 magnitude -> max_exp_local (uint16)."""
    blocks = blocks_of(cols)
    if (not asc.vf_call(c, cols) or not asc.vf_operand(c, x_local, cols, False)
            or not asc.vf_operand(c, max_exp_local, blocks, True)):
        return
    mask = 0x7FFF if round_scale else 0x7F80
    for b in range(blocks):
        top = 0
        for i in range(b * MX_BLOCK, min(cols, b * MX_BLOCK + MX_BLOCK)):
            v = _as_bf16_magnitude(x_local[i], is_fp16, mask)
            if v > top:
                top = v
        max_exp_local[b] = top


@aicore
def _floor_code(a, emax):
    """OCP floor rule: floor(log2 amax) - emax + 127 from the exponent field, clamped at 0."""
    e = a >> 7
    if e == 0xFF:
        return 0xFF
    return max(e, emax) - emax


@aicore
def _round_scale_code(a, emax):
    """Master-branch MXFP8 rule: ceil(log2(amax / max normal)) + 127 on the bf16 amax, at least 1."""
    if a >= BF16_INF:
        return 0xFF
    if a == 0:
        return 0
    e = a >> 7
    if e <= emax:
        return 1
    return e - emax + (1 if (a & 0x7F) > 0x60 else 0)


@aicore
def compute_scale(c, scale_local, inv_scale_local, max_exp_local, cols, quant_mode, round_scale):
    """Scale codes (uint8) and inverse scales (uint16 bf16 bits) of every slot of a row."""
    blocks = blocks_of(cols)
    slots = scale_cols_of(cols)
    if (not asc.vf_call(c, slots) or not asc.vf_operand(c, max_exp_local, blocks, False)
            or not asc.vf_operand(c, scale_local, slots, True) or not asc.vf_operand(c, inv_scale_local, slots, True)):
        return
    emax = _emax(quant_mode)
    for b in range(slots):
        if b >= blocks:
            scale_local[b] = 0
            inv_scale_local[b] = 0
            continue
        a = np.int64(max_exp_local[b])
        code = _round_scale_code(a, emax) if round_scale else _floor_code(a, emax)
        scale_local[b] = code
        if code == 0xFF:
            inv_scale_local[b] = NAN_INV_SCALE
        elif round_scale and a == 0:
            inv_scale_local[b] = 0
        else:
            inv_scale_local[b] = (0xFE - code) << 7


@aicore
def compute_data(c, y_local, x_local, inv_scale_local, cols, quant_mode, is_fp16):
    """Element codes of x_local[:cols]: x * inverse scale of its block, Cast CAST_RINT + SAT (uint8 out)."""
    fp4 = quant_mode == QUANT_MXFP4_E2M1
    blocks = blocks_of(cols)
    if (not asc.vf_call(c, 2 * cols) or not asc.vf_operand(c, x_local, cols, False)
            or not asc.vf_operand(c, inv_scale_local, blocks, False)
            or not asc.vf_operand(c, y_local, out_bytes_of(cols, quant_mode), True)):
        return
    dt = _element_dt(quant_mode)
    for b in range(blocks):
        inv = np.int64(inv_scale_local[b])
        end = min(cols, b * MX_BLOCK + MX_BLOCK)
        if inv == NAN_INV_SCALE:
            keep = np.uint32(0)                    # NaN * element, SAT cast -> +0 whatever the element
        elif inv == 0:
            keep = np.uint32(0x80000000)           # all-zero block (round-scale rule): x * 0 keeps only the sign
        else:
            keep = np.uint32(0xFFFFFFFF)
        # inverse 2^(127 - code) is bf16 exponent field 254 - code
        pow2 = (inv >> 7) - 127 if keep == np.uint32(0xFFFFFFFF) else 0
        for i in range(b * MX_BLOCK, end):
            h = x_local[i]
            x_bits = asc.f16_bits_to_f32_bits(h) if is_fp16 else asc.bf16_bits_to_f32_bits(h)
            code = asc.f32_bits_to_mini_float_bits(x_bits & keep, dt, pow2)
            if not fp4:
                y_local[i] = code
            elif i % 2 == 0:
                y_local[i // 2] = code
            else:
                y_local[i // 2] = y_local[i // 2] | (code << np.uint8(4))
