"""How unevenly a case's tokens go to experts: the routing-skew knob of `run`, `profile`, `sweep` and the demo.

`--routing uniform` (the default) keeps every operator's own router draw, unchanged. `--routing zipf:S` makes
expert popularity follow a Zipf law with exponent S >= 0: the expert of popularity rank r (1 = the hottest)
is picked with weight r ** -S, the ranks being a random permutation of the expert ids (drawn from the case's
seed, so hot experts are not always the low ids). Each token then draws its topK *distinct* experts without
replacement in proportion to those weights, by the Gumbel-top-k trick: score[t, e] = log w[e] + Gumbel noise,
and the token's experts are its topK largest scores. The scores double as the router's logits (their softmax
is the token's probs), so every operator's input contract holds as with uniform routing: topK distinct
experts per token, routing maps with topK ones per row, drop-and-pad columns of exactly `capacity` slots.

S = 0 is uniform in distribution (not the same draw as `uniform`); S around 1 is a typical skewed router;
S of 2 and more sends most tokens to a handful of experts.

With drop-and-pad a skewed router fills hot experts past their capacity (the forward drops the extra tokens,
keeping the best-scored) and leaves cold ones short (the forward pads their column with the expert's other
tokens, ascending): `padded_columns` builds that layout once for every drop-and-pad operator.
"""
from __future__ import annotations

import numpy as np

UNIFORM = "uniform"


def parse_routing(text: str) -> float | None:
    """'uniform' -> None; 'zipf:S' (or 'zipf=S') -> S as a float >= 0. ValueError with a one-line reason."""
    t = str(text).strip().lower()
    if t == UNIFORM:
        return None
    kind, sep, value = t.replace("=", ":").partition(":")
    if kind != "zipf" or not sep:
        raise ValueError(f"expected 'uniform' or 'zipf:S' (S >= 0, e.g. zipf:1.2), got {text!r}")
    try:
        s = float(value)
    except ValueError:
        raise ValueError(f"zipf:S needs a number S >= 0, got {value!r}") from None
    if not np.isfinite(s) or s < 0:
        raise ValueError(f"zipf:S needs a finite S >= 0, got {value!r}")
    return s


def routing_name(zipf: float | None) -> str:
    """The flag's text for an exponent: 'uniform' or 'zipf:S' (S in its shortest form)."""
    return UNIFORM if zipf is None else f"zipf:{zipf:g}"


def expert_weights(rng: np.random.Generator, experts: int, zipf: float) -> np.ndarray:
    """(experts,) float64 weights summing to 1: expert e has weight rank(e) ** -zipf, rank a random permutation
    of 1..experts drawn from `rng`."""
    ranks = rng.permutation(experts) + 1
    w = ranks.astype(np.float64) ** -float(zipf)
    return w / w.sum()


def skewed_scores(rng: np.random.Generator, tokens: int, experts: int, zipf: float) -> np.ndarray:
    """(tokens, experts) float32 router logits whose per-token descending order samples experts without
    replacement in proportion to the Zipf weights (Gumbel-top-k): any token's topK largest entries are topK
    distinct experts, hot experts among them far more often for a large exponent."""
    log_w = np.log(expert_weights(rng, experts, zipf))
    u = rng.random((tokens, experts))
    np.clip(u, np.finfo(np.float64).tiny, None, out=u)    # log(0) would give an infinite score
    gumbel = -np.log(-np.log(u))
    return (log_w[None, :] + gumbel).astype(np.float32)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise float32 softmax of (tokens, experts) logits: the router's probs."""
    out = scores.astype(np.float32, copy=True)
    out -= out.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out


def top_experts(scores: np.ndarray, topk: int) -> np.ndarray:
    """(tokens, topk) int64: each token's topk best experts, best first (ties to the lower id)."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :topk]


def padded_columns(scores: np.ndarray, topk: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop-and-pad layout of a router: each token routes to its topk best experts, each expert keeps at most
    `capacity` of its tokens (the best scored; the rest are dropped), and its column is filled up to `capacity`
    with its other tokens, ascending (what the forward's stable descending sort of a map column does).

    Returns (kept (tokens, experts) bool: the routed pairs that survived the drop, columns (experts, capacity)
    int64: each expert's tokens, kept ones ascending first, then the padding tokens ascending). Every column
    holds `capacity` distinct tokens (capacity <= tokens)."""
    tokens, experts = scores.shape
    routed = np.zeros((tokens, experts), dtype=bool)
    routed[np.arange(tokens)[:, None], top_experts(scores, topk)] = True
    columns = np.empty((experts, capacity), dtype=np.int64)
    for e in range(experts):
        mine = np.flatnonzero(routed[:, e])
        if mine.size > capacity:                    # the expert keeps its best-scored tokens
            best = np.sort(mine[np.argsort(-scores[mine, e], kind="stable")[:capacity]])
            routed[np.setdiff1d(mine, best), e] = False
        column = np.concatenate([np.flatnonzero(routed[:, e]), np.flatnonzero(~routed[:, e])])
        columns[e] = column[:capacity]
    return routed, columns
