"""NumPy goldens of MoeTokenPermuteGrad, written from the op's formulas (facts §4.a, §1.5), not from the kernels.

source (the definition): moe/moe_token_permute_grad/docs/aclnnMoeTokenPermuteGrad.md @ 25fb6b92890d.

Notation: G (R, H) permuted_output_grad, S (N*K,) int32 sorted_indices, K = num_topk (-1 read as 1),
N = len(S) // K. A slot (t, k) addresses row S[t*K + k]; it is kept when that row exists (< R).

* `golden` (Ascend 910B / 910_93, kernel G): input_grad[t] = sum over the kept k of G[S[t*K + k]],
  in fp32, k ascending; the first kept term is taken as it is (so a -0.0 row stays -0.0), a token with
  no kept slot is +0.0; one round-half-even cast at the end. A negative index is not skipped by that
  kernel: such inputs are outside the golden's domain (ValueError).
* `golden_950` (Ascend 950, l0 MoeInitRoutingV2Grad, arch35): every slot contributes G[S] when
  0 <= S < R and a zero row otherwise; the fp32 sum starts at +0.0 and runs over chunks of `k_chunk`
  slots; inside a chunk the slots are taken four at a time as s = s + ((x0 + x1) + (x2 + x3)), and
  the one to three slots left at the end of a chunk as s = s + x.
* `atk_golden`: the op's ATK reference, the gradient of the forward permute with a ones upstream
  gradient: input_grad[t] = the number of t's slots whose permuted row is < R (a count, exact in
  every dtype while it stays below 256).
"""
from __future__ import annotations

import numpy as np

from ops.common.half_cast import cast, to_f32


def _slots(sorted_indices, num_topk: int):
    k = 1 if num_topk == -1 else int(num_topk)
    s = np.asarray(sorted_indices).astype(np.int64).reshape(-1)
    n = s.size // k if k > 0 else 0
    return s[: n * k].reshape(n, k), n, k


def golden(permuted_output_grad, sorted_indices, num_topk: int) -> np.ndarray:
    """(N, H) in the gradient's dtype: kernel G's result (see the module docstring)."""
    g = np.asarray(permuted_output_grad)
    rows, hidden = g.shape
    slots, n, k = _slots(sorted_indices, num_topk)
    if (slots < 0).any():
        raise ValueError("outside golden domain: a negative index is gathered from before the tensor")
    x = to_f32(g)
    acc = np.zeros((n, hidden), dtype=np.float32)
    seen = np.zeros(n, dtype=bool)
    for j in range(k):
        col = slots[:, j]
        keep = col < rows
        first = keep & ~seen
        more = keep & seen
        acc[first] = x[col[first]]
        acc[more] = acc[more] + x[col[more]]
        seen |= keep
    return cast(acc, g.dtype)


def golden_950(permuted_output_grad, sorted_indices, num_topk: int, k_chunk: int | None = None) -> np.ndarray:
    """(N, H) in the gradient's dtype: MoeInitRoutingV2Grad's result (see the module docstring).
    k_chunk None = all K slots in one chunk (the full-load and split-H templates)."""
    g = np.asarray(permuted_output_grad)
    rows, hidden = g.shape
    slots, n, k = _slots(sorted_indices, num_topk)
    chunk = k if k_chunk is None else int(k_chunk)
    x = g.astype(np.float32)
    valid = (slots >= 0) & (slots < rows)

    def term(j):
        t = x[np.where(valid[:, j], slots[:, j], 0)] if rows else np.zeros((n, hidden), np.float32)
        return np.where(valid[:, j:j + 1], t, np.float32(0.0))

    s = np.zeros((n, hidden), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for c0 in range(0, k, chunk):
            c1 = min(c0 + chunk, k)
            j = c0
            while j + 4 <= c1:
                s = s + ((term(j) + term(j + 1)) + (term(j + 2) + term(j + 3)))
                j += 4
            for r in range(j, c1):
                s = s + term(r)
    return s.astype(g.dtype)


def atk_golden(sorted_indices, num_topk: int, rows: int, hidden: int, dtype) -> np.ndarray:
    """(N, H): how many of each token's slots the forward kept (row < rows), broadcast over hidden."""
    slots, n, _ = _slots(sorted_indices, num_topk)
    counts = ((slots >= 0) & (slots < rows)).sum(axis=1)
    return np.repeat(counts[:, None], hidden, axis=1).astype(dtype)
