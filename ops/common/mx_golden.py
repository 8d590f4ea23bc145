"""Independent NumPy + ml_dtypes reference ("golden") of the MX (OCP Microscaling) quantisation done by
MoeTokenPermuteV2 / MoeInitRoutingV3 on Ascend 950 (quantMode 2 = MXFP8 E5M2, 3 = MXFP8 E4M3FN,
9 = MXFP4 E2M1).

source (the formulas): moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_gather_mxfp8_quant.h
(vfComputeAmax, vfComputeRoundScale, vfComputeData) and arch35/moe_v3_gather_mxfp4_quant.h
(vfMxfp4ComputeMaxExp, vfMxfp4ComputeScale) @ 25fb6b92890d. The default rule of each mode is the one those
kernels compute: "round_scale" for MXFP8, "floor" for MXFP4. The "floor" rule for MXFP8 is the OCP MX v1.0
rule, which master does not do (kept as an option).

This module is the *independent* side of bit-exact comparisons with the simulated kernel, so it imports
nothing but NumPy and ml_dtypes (no `ascend_sim`, no other project module).

Semantics, per block of 32 consecutive elements along the last axis H (a short last block behaves as if
it were padded with zeros):

* Every element is reduced to a 15-bit bf16 magnitude pattern ``T``: for bf16 input the bits with the
  sign cleared; for fp16 input the value truncated toward zero to bf16 (the exponent survives exactly,
  fp16 subnormals become bf16 normals), sign cleared, and any fp16 Inf/NaN is replaced by 0x7F80.
* Scale code (E8M0 byte), with ``emax`` = 15 (E5M2), 8 (E4M3FN), 2 (E2M1):

  - ``"floor"`` (OCP rule; the only rule for MXFP4): ``E = max(T >> 7)`` over the block;
    ``E == 255`` (Inf/NaN present) -> 0xFF, otherwise ``max(E, emax) - emax``.
  - ``"round_scale"`` (MXFP8 only; the MoeInitRoutingV3 kernel at master): ``A = max(T)``;
    ``A >= 0x7F80`` -> 0xFF; ``A == 0`` -> 0; otherwise ``E = A >> 7``, ``m7 = A & 0x7F``,
    ``code = E - emax + (m7 > 0x60)``, and ``code = 1`` whenever ``E <= emax``.

* Elements of a finite block: ``y = x * 2**(127 - code)`` (exact: the kernel multiplies by that power of two in
  bf16 for bf16 tokens and in fp32 for fp16 tokens, and either product is exact wherever an element code can
  be non-zero), clipped to +-max normal (448, 57344, 6), then one round-to-nearest-even cast onto the element
  grid (subnormals included, sign of zero kept): the kernel's RINT cast with saturation.
* Elements of an Inf/NaN block (code 0xFF) are all written as code 0x00.
* The padded scale slot (present when ceil(H/32) is odd) is 0x00.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["BLOCK_SIZE", "mx_quantize", "scale_columns"]

BLOCK_SIZE = 32

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16 = np.dtype(np.float16)
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)

# quant_mode -> (name, element emax, max normal, output element dtype or None for packed FP4)
_FORMATS = {
    2: ("e5m2", 15, 57344.0, np.dtype(ml_dtypes.float8_e5m2)),
    3: ("e4m3fn", 8, 448.0, np.dtype(ml_dtypes.float8_e4m3fn)),
    9: ("e2m1", 2, 6.0, None),
}
_SCALE_RULES = ("floor", "round_scale")

_NAN_CODE = 0xFF
_BF16_INF_MAG = 0x7F80       # bf16 +Inf pattern: exponent field all ones, mantissa 0
_ROUND_UP_MANTISSA = 0x60    # 7-bit bf16 mantissa of 1.75 (the FP8 max-normal mantissa)
_AMAX_CLAMP = 0x38D2         # bf16 pattern of the smallest amax with amax_clamp


def scale_columns(h: int) -> int:
    """Number of E8M0 scale bytes per row: AlignUp(ceil(H/32), 2)."""
    blocks = -(-int(h) // BLOCK_SIZE)
    return blocks + (blocks & 1)


def _bf16_magnitude_bits(x: np.ndarray) -> np.ndarray:
    """Per-element 15-bit bf16 magnitude pattern (uint16) as used for the block maximum."""
    if x.dtype == _BF16:
        return x.view(np.uint16) & np.uint16(0x7FFF)
    # fp16: widen exactly to fp32, then drop the low 16 bits = truncation toward zero to bf16.
    wide = x.astype(np.float32).view(np.uint32)
    mag = ((wide >> np.uint32(16)) & np.uint32(0x7FFF)).astype(np.uint16)
    special = (x.view(np.uint16) & np.uint16(0x7C00)) == np.uint16(0x7C00)   # fp16 Inf or NaN
    mag[special] = _BF16_INF_MAG
    return mag


def _block_codes(blocks: np.ndarray, emax: int, scale_rule: str, amax_floor: int = 0) -> np.ndarray:
    """blocks: (M, nb, 32) uint16 magnitude patterns -> (M, nb) int32 E8M0 codes; amax_floor: the smallest amax
    pattern the round-scale rule works with (0: none)."""
    if scale_rule == "floor":
        exp = (blocks >> 7).max(axis=2).astype(np.int32)            # biased exponent of the block amax
        return np.where(exp == 0xFF, _NAN_CODE, np.maximum(exp, emax) - emax)
    amax = np.maximum(blocks.max(axis=2).astype(np.int32), amax_floor)
    exp = amax >> 7
    bump = ((amax & 0x7F) > _ROUND_UP_MANTISSA).astype(np.int32)
    code = np.where(exp <= emax, 1, exp - emax + bump)
    code = np.where(amax == 0, 0, code)
    return np.where(amax >= _BF16_INF_MAG, _NAN_CODE, code)


def mx_quantize(x: np.ndarray, quant_mode: int, scale_rule: str | None = None,
                amax_clamp: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """MX-quantise the rows of ``x`` in blocks of 32 along the last axis.

    x: (M, H) ml_dtypes.bfloat16 or np.float16.  quant_mode: 2 = MXFP8 E5M2, 3 = MXFP8 E4M3FN,
    9 = MXFP4 E2M1.  scale_rule: "floor" (all modes) or "round_scale" (modes 2 and 3 only); None (the
    default) is the master kernels' rule of the mode: "round_scale" for 2 / 3, "floor" for 9.

    Returns (data, scales):
      mode 2/3: data (M, H) float8_e5m2 / float8_e4m3fn; scales (M, S) float8_e8m0fnu,
                S = AlignUp(ceil(H/32), 2);
      mode 9:   data (M, H//2) uint8, element 2i in the low nibble and 2i+1 in the high nibble
                (H must be even); scales (M, ceil(H/64), 2) float8_e8m0fnu (same bytes as (M, S)).
    Raises ValueError for an unknown mode or rule, "round_scale" with mode 9, odd H with mode 9 or a
    non-2-D x, and TypeError for an input dtype other than bf16 / fp16.

    amax_clamp (round_scale only; MoeInitRoutingV3 quant modes 16 / 17): a block amax below the bf16 pattern
    0x38D2 (about 1.0e-4, zero blocks included) is taken as 0x38D2.
    """
    if isinstance(quant_mode, bool) or not isinstance(quant_mode, (int, np.integer)) \
            or int(quant_mode) not in _FORMATS:
        raise ValueError(f"quant_mode must be one of {sorted(_FORMATS)}, got {quant_mode!r}")
    quant_mode = int(quant_mode)
    if scale_rule is None:
        scale_rule = "floor" if quant_mode == 9 else "round_scale"
    if scale_rule not in _SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {_SCALE_RULES}, got {scale_rule!r}")
    _name, emax, max_normal, elem_dtype = _FORMATS[quant_mode]
    if elem_dtype is None and scale_rule != "floor":
        raise ValueError("MXFP4 (quant_mode 9) only supports scale_rule='floor'")

    x = np.asarray(x)
    if x.dtype not in (_BF16, _F16):
        raise TypeError(f"x must be bfloat16 or float16, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (M, H), got shape {x.shape}")
    x = np.ascontiguousarray(x)
    m, h = x.shape
    if elem_dtype is None and h % 2:
        raise ValueError(f"MXFP4 needs an even H, got H={h}")

    n_blocks = -(-h // BLOCK_SIZE)
    n_slots = scale_columns(h)

    # ---- scales -------------------------------------------------------------------------------
    mag = np.zeros((m, n_blocks * BLOCK_SIZE), dtype=np.uint16)   # zero padding of the tail block
    mag[:, :h] = _bf16_magnitude_bits(x)
    if amax_clamp and scale_rule != "round_scale":
        raise ValueError("amax_clamp applies to scale_rule='round_scale' only")
    codes = _block_codes(mag.reshape(m, n_blocks, BLOCK_SIZE), emax, scale_rule, _AMAX_CLAMP if amax_clamp else 0)
    scale_bytes = np.zeros((m, n_slots), dtype=np.uint8)          # padded slot stays 0x00
    scale_bytes[:, :n_blocks] = codes

    # ---- elements -----------------------------------------------------------------------------
    elem_code = np.repeat(codes, BLOCK_SIZE, axis=1)[:, :h]
    nan_block = elem_code == _NAN_CODE
    with np.errstate(invalid="ignore"):                           # bf16 NaN widening flags 'invalid'
        vals = x.astype(np.float64)                               # exact widening
    vals[nan_block] = 0.0                                         # no information survives there
    # Multiplication by a power of two: exact in float64.  Clip first (ml_dtypes overflow gives NaN/Inf,
    # not saturation); clipping then RNE equals RNE then saturation.
    scaled = np.clip(np.ldexp(vals, 127 - elem_code), -max_normal, max_normal)
    # float64 -> float32 is exact here for every |value| >= 2**-126 (inputs carry at most 11 significant
    # bits); anything smaller lies far below half of the smallest element subnormal and ends at +-0 in
    # either precision, sign preserved.  So the ml_dtypes cast below is the only rounding (RNE).
    scaled = scaled.astype(np.float32)

    if elem_dtype is not None:
        elem_bytes = scaled.astype(elem_dtype).view(np.uint8).copy()
        elem_bytes[nan_block] = 0
        data = elem_bytes.view(elem_dtype)
        scales = scale_bytes.view(_E8M0)
        return data, scales

    nibbles = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & np.uint8(0x0F)
    nibbles[nan_block] = 0
    packed = (nibbles[:, 0::2] | (nibbles[:, 1::2] << np.uint8(4))).astype(np.uint8)
    scales = scale_bytes.view(_E8M0).reshape(m, n_slots // 2, 2)
    return packed, scales
