"""NumPy golden of MoeTokenPermute (V1, and V2 without quantisation), from the op's definition.

order = stable ascending argsort of the flat expert ids (ties in slot order), sortedIndices =
argsort(order) (the output row of every slot), permuteTokens[p] = tokens[order[p] // topK] for
the first numOutTokens rows. The keys are compared as the kernel compares them: widened to
fp32 with round-half-away-from-zero, so ids beyond 2^24 that share an fp32 value tie.

source (the definition): moe/moe_token_permute/docs/aclnnMoeTokenPermute.md, aclnnMoeTokenPermuteV2.md @ 25fb6b92890d.
"""
from __future__ import annotations

import numpy as np

from ops.common.mx_golden import mx_quantize


def fp32_keys(ids: np.ndarray) -> np.ndarray:
    """Integer ids as the sort sees them: fp32 with round half away from zero (exact below 2^24), as float64.

    Works on the two's-complement magnitude in uint64, so int64 extremes round exactly (no float64 detour).
    """
    ids = np.asarray(ids, dtype=np.int64)
    negative = ids < 0
    raw = ids.view(np.uint64)
    mag = np.where(negative, ~raw + np.uint64(1), raw)              # |id|, 2^63 for INT64_MIN
    msb = np.zeros(mag.shape, dtype=np.int64)                        # index of the leading one
    rest = mag.copy()
    for step in (32, 16, 8, 4, 2, 1):
        high = (rest >> np.uint64(step)) != 0
        msb += np.where(high, step, 0)
        rest = np.where(high, rest >> np.uint64(step), rest)
    shift = np.maximum(msb - 23, 0).astype(np.uint64)                # bits below fp32's 24-bit significand
    kept = mag >> shift
    half = np.where(shift > 0, np.uint64(1) << (shift - np.uint64(1)), np.uint64(0))
    rem = mag & ((np.uint64(1) << shift) - np.uint64(1))
    kept = kept + ((shift > 0) & (rem >= half)).astype(np.uint64)
    value = np.ldexp(kept.astype(np.float64), shift.astype(np.int64))
    return np.where(negative, -value, value)


def num_out_rows(num_out_tokens: int, total: int) -> int:
    m = num_out_tokens + total if num_out_tokens <= 0 else num_out_tokens
    return max(min(m, total), 0)


def golden(tokens, indices, num_out_tokens=0):
    """(permute_tokens, sorted_indices int32) of MoeTokenPermute."""
    tokens = np.asarray(tokens)
    flat = np.asarray(indices).reshape(-1)
    top_k = 1 if np.ndim(indices) == 1 else np.shape(indices)[1]
    order = np.argsort(fp32_keys(flat), kind="stable")
    sorted_indices = np.argsort(order, kind="stable").astype(np.int32)
    m = num_out_rows(int(num_out_tokens), flat.size)
    permute_tokens = tokens[order[:m] // top_k] if top_k else tokens[:0]
    return permute_tokens, sorted_indices


def golden_v2(tokens, indices, num_out_tokens=0, quant_mode=-1, scale_rule=None):
    """(permute_tokens, sorted_indices, expanded_scale) of MoeTokenPermuteV2 on a chip that quantises.

    quant_mode -1 gives V1's outputs and a (0,) float32 scale; 2 / 3 / 9 quantise with the MX reference.
    Quantisation is row-local, so the source rows are quantised once and the codes gathered like the rows.
    """
    permute_tokens, sorted_indices = golden(tokens, indices, num_out_tokens)
    if quant_mode == -1:
        return permute_tokens, sorted_indices, np.zeros((0,), dtype=np.float32)
    tokens = np.asarray(tokens)
    data, scales = mx_quantize(tokens.reshape(tokens.shape[0], -1), quant_mode, scale_rule)
    top_k = 1 if np.ndim(indices) == 1 else np.shape(indices)[1]
    rows = np.argsort(sorted_indices, kind="stable")[: permute_tokens.shape[0]] // max(top_k, 1)
    return data[rows], sorted_indices, scales[rows]


V3_EXPERT_END = 10240      # MoeInitRoutingV3 keeps expert ids in [0, 10240) on the 950 chain


def golden_950(tokens, indices, rows: int, quant_mode=-1, scale_rule=None):
    """What the Ascend 950 MoeInitRoutingV3 chain (V2, and V1 with int8 tokens) writes into the caller's outputs of
    `rows` rows: (permute_tokens, sorted_indices, expanded_scale, written_rows).

    Slots whose expert id lies outside [0, 10240) are dropped: their sorted_indices is -1 and no row is written for
    them. The kept slots are sorted stably by id (ids below 10240 are exact in fp32), so sorted_indices[slot] is
    the slot's rank among the kept ones and row p (p < kept) is tokens[slot // topK] of the p-th kept slot, MX
    quantised under quant_mode 2 / 3 / 9. Rows from `written_rows` = min(rows, kept) on are not written: the
    returned arrays hold zeros there and a comparison must leave them out.

    A hidden size of 0 takes MoeInitRoutingV3's EMPTY_TENSOR branch, which sets every sorted_indices to 0.
    """
    tokens = np.asarray(tokens)
    flat = np.asarray(indices).reshape(-1).astype(np.int64)
    top_k = 1 if np.ndim(indices) == 1 else np.shape(indices)[1]
    if tokens.ndim == 2 and tokens.shape[1] == 0 and quant_mode == -1:
        return (np.zeros((rows, 0), dtype=tokens.dtype), np.zeros(flat.size, dtype=np.int32),
                np.zeros((0,), dtype=np.float32), 0)
    kept = (flat >= 0) & (flat < V3_EXPERT_END)
    slots = np.flatnonzero(kept)
    order = slots[np.argsort(flat[slots], kind="stable")]
    sorted_indices = np.full(flat.size, -1, dtype=np.int32)
    sorted_indices[order] = np.arange(order.size, dtype=np.int32)
    written = min(rows, order.size)
    src = order[:written] // max(top_k, 1)
    if quant_mode == -1:
        out = np.zeros((rows,) + tokens.shape[1:], dtype=tokens.dtype)
        out[:written] = tokens[src]
        return out, sorted_indices, np.zeros((0,), dtype=np.float32), written
    data, scales = mx_quantize(tokens.reshape(tokens.shape[0], -1), quant_mode, scale_rule)
    out = np.zeros((rows,) + data.shape[1:], dtype=data.dtype)
    out[:written] = data[src]
    scale = np.zeros((rows,) + scales.shape[1:], dtype=scales.dtype)
    scale[:written] = scales[src]
    return out, sorted_indices, scale, written
