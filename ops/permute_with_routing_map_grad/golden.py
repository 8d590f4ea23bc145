"""NumPy goldens of MoeTokenPermuteWithRoutingMapGrad, written from the op's formulas (facts §8.a).

source (the definition): moe/moe_token_permute_with_routing_map_grad/docs/aclnnMoeTokenPermuteWithRoutingMapGrad.md
@ 25fb6b92890d.

Notation: Gp (M, H) permuted-token gradient, gp (M,) permuted-probs gradient, S (M,) int32,
N = tokens_num, E = num_experts.

* no dropAndPad (topK = M // N): tokensGrad[t] = sum_{k < topK} Gp[S[t*topK + k]] over the slots with
  0 <= S < M, accumulated in fp32 in ascending k; a token whose slot 0 is skipped starts from +0.0
  (kernel G zero-fills), otherwise from its first term; one round-half-even cast at the end.
  probsGrad (N, E) is zero except that the routed (token, expert) pairs, listed expert-major
  (expert ascending, then token ascending), receive gp[0], gp[1], ... in that order.
* dropAndPad (capacity = M // E): tokensGrad[S[i]] += Gp[i] for every slot i. The result is the sum
  of each token's rows in ascending slot order, in fp32, rounded once (the sorted index-add
  kernel for bf16 / fp16 / deterministic fp32; the host index-add walks slots in order too).
  probsGrad[S[i], i // capacity] = gp[i] for i < capacity * E, zeros elsewhere.

Inputs outside the domain the kernels define (an index the kernel would not skip that is out of
range) raise ValueError("outside golden domain: ...").
"""
from __future__ import annotations

import numpy as np

from ops.common.half_cast import cast, to_f32


def _fp32(a) -> np.ndarray:
    return to_f32(a)


def tokens_grad_no_pad(gp_tokens, sorted_indices, tokens_num: int) -> np.ndarray:
    """(N, H) in Gp's dtype: the per-token fp32 sum over its topK slots (see the module docstring)."""
    m, h = gp_tokens.shape
    top_k = m // tokens_num if tokens_num > 0 else 0
    x = _fp32(gp_tokens)
    s = np.asarray(sorted_indices, dtype=np.int64)
    out = np.zeros((tokens_num, h), dtype=np.float32)
    if top_k == 0:
        return cast(out, gp_tokens.dtype)
    slots = s[: tokens_num * top_k].reshape(tokens_num, top_k)
    for k in range(top_k):
        col = slots[:, k]
        keep = (col >= 0) & (col < m)
        if k == 0:
            out[keep] = x[col[keep]]              # first term assigned: keeps a -0.0 row as -0.0
        else:
            out[keep] = out[keep] + x[col[keep]]
    return cast(out, gp_tokens.dtype)


def probs_grad_no_pad(gp_probs, routing_map, out_dtype=None) -> np.ndarray:
    """(N, E): gp values placed on the routed pairs in expert-major order (masked_scatter of the transpose)."""
    mask = np.asarray(routing_map).astype(bool)
    n, e = mask.shape
    out = np.zeros((n, e), dtype=out_dtype or gp_probs.dtype)
    values = np.asarray(gp_probs).reshape(-1)
    nxt = 0
    for expert in range(e):
        for token in np.flatnonzero(mask[:, expert]):
            if nxt >= values.size:
                raise ValueError("outside golden domain: the routing map has more ones than gp has values")
            out[token, expert] = values[nxt]
            nxt += 1
    return out


def tokens_grad_pad(gp_tokens, sorted_indices, tokens_num: int) -> np.ndarray:
    """(N, H) in Gp's dtype: rows of Gp summed into their token's row, fp32, slot order, one rounding."""
    m, h = gp_tokens.shape
    s = np.asarray(sorted_indices, dtype=np.int64)
    if s.size and (s.min() < 0 or s.max() >= tokens_num):
        raise ValueError(f"outside golden domain: token ids must lie in [0, {tokens_num})")
    x = _fp32(gp_tokens)
    acc = np.zeros((tokens_num, h), dtype=np.float32)
    touched = np.zeros(tokens_num, dtype=bool)
    for i in range(min(s.size, m)):
        t = s[i]
        acc[t] = acc[t] + x[i] if touched[t] else x[i] + np.float32(0.0)   # the output starts as zeros
        touched[t] = True
    return cast(acc, gp_tokens.dtype)


def probs_grad_pad(gp_probs, sorted_indices, tokens_num: int, num_experts: int) -> np.ndarray:
    """(N, E): probsGrad[S[i], i // capacity] = gp[i] for the capacity * E addressed slots."""
    values = np.asarray(gp_probs).reshape(-1)
    capacity = values.size // num_experts
    s = np.asarray(sorted_indices, dtype=np.int64)
    out = np.zeros((tokens_num, num_experts), dtype=values.dtype)
    for i in range(capacity * num_experts):
        if not 0 <= s[i] < tokens_num:
            raise ValueError(f"outside golden domain: slot {i} holds token id {s[i]}, not in [0, {tokens_num})")
        out[s[i], i // capacity] = values[i]
    return out


def golden(permuted_token_output_grad, permuted_probs_output_grad, sorted_indices, routing_map, num_experts: int,
           tokens_num: int, drop_and_pad: bool = False):
    """(tokens_grad, probs_grad or None) for the aclnn arguments."""
    g, gp = permuted_token_output_grad, permuted_probs_output_grad
    if drop_and_pad:
        tokens = tokens_grad_pad(g, sorted_indices, tokens_num)
        probs = None if gp is None else probs_grad_pad(gp, sorted_indices, tokens_num, num_experts)
    else:
        tokens = tokens_grad_no_pad(g, sorted_indices, tokens_num)
        probs = None if gp is None else probs_grad_no_pad(gp, routing_map)
    return tokens, probs


# --- the forward op, for the adjoint identity -----------------------------------------------------------------
def forward_permute(tokens, routing_map, probs, num_out_tokens: int, drop_and_pad: bool):
    """NumPy MoeTokenPermuteWithRoutingMap (facts §7.a) in float64:
    (permuted_tokens (M, H), permuted_probs (M,) or None, sorted_indices (M,) int32).

    No drop-and-pad: rows are the routed (token, expert) pairs expert-major; sorted_indices[t*topK + r] is the row
    of token t's r-th expert (ascending), -1 for slots a token does not use. Drop-and-pad: per expert the first
    `capacity` tokens of (routed ascending, then the others ascending); sorted_indices holds those token ids."""
    x = np.asarray(tokens, dtype=np.float64)
    mask = np.asarray(routing_map).astype(bool)
    n, e = mask.shape
    p = None if probs is None else np.asarray(probs, dtype=np.float64)
    if drop_and_pad:
        capacity = num_out_tokens // e
        ids = np.empty(e * capacity, dtype=np.int64)
        for expert in range(e):
            order = list(np.flatnonzero(mask[:, expert])) + list(np.flatnonzero(~mask[:, expert]))
            ids[expert * capacity:(expert + 1) * capacity] = order[:capacity]
        experts = np.repeat(np.arange(e), capacity)
        return x[ids], None if p is None else p[ids, experts], ids.astype(np.int32)
    top_k = num_out_tokens // n
    pairs = [(t, expert) for expert in range(e) for t in range(n) if mask[t, expert]]
    rows = np.array([t for t, _ in pairs], dtype=np.int64)
    slot_of = np.full(n * top_k, -1, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    row_of_pair = {pair: r for r, pair in enumerate(pairs)}
    for t in range(n):
        for expert in range(e):
            if mask[t, expert]:
                slot_of[t * top_k + used[t]] = row_of_pair[(t, expert)]
                used[t] += 1
    permuted = np.zeros((n * top_k, x.shape[1]))
    permuted[: rows.size] = x[rows]
    permuted_probs = None
    if p is not None:
        permuted_probs = np.zeros(n * top_k)
        permuted_probs[: rows.size] = [p[t, expert] for t, expert in pairs]
    return permuted, permuted_probs, slot_of.astype(np.int32)
