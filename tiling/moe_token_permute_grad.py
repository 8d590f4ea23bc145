"""Tiling of MoeTokenPermuteGrad.

source: moe/moe_token_permute_grad/op_host/moe_token_permute_grad_tiling.cpp, moe_token_permute_grad_tiling.h
@ 25fb6b92890d.

The op's tiling is the shared gather tiling T-G (tiling.unpermute_gather) fed as follows:

* permuted rows = numOutTokens = dim 0 of input 0 (permuted_output_grad), hidden = its dim 1;
* totalLength = dim 0 of input 1 (sorted_indices);
* without input 2: topK = the num_topk attr (-1 is read as 1), tokens = totalLength / topK;
* with an input 2 (the routine is a copy of MoeTokenUnpermute's and reads input 2 as probs although
  the OpDef declares no third input; only the host UTs pass one): topK = probs dim 1, tokens = probs
  dim 0, each routed slot also budgets its prob (and an fp32 copy of non-fp32 probs).

tilingKey = 0 bf16 / 2 fp16 / 4 fp32 gradients (any other dtype adds nothing), + 1 with probs, + 8 / 16 /
24 when the probs dtype (bf16 / fp16 / fp32) differs from the gradient's. Only keys 0, 2, 4 have a kernel.
Block dim = min(tokens, cores); workspace = GetLibApiWorkSpaceSize() (16 MiB). The real tiling has no
failure path (its parameter check is empty); degenerate figures come out as the C arithmetic gives them.
"""
from __future__ import annotations

from typing import NoReturn

import ml_dtypes
import numpy as np

from .common import TensorDesc, TilingResult, as_dtype, length_by_type, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError
from .unpermute_gather import GATHER_FIELDS, INDEX_BYTES, gather_tiling, gather_ub_plan

OP = "MoeTokenPermuteGrad"

FIELDS = GATHER_FIELDS
"""MoeTokenPermuteGradTilingData in declaration order (the 12 fields of the unpermute gather)."""

PIPE = "pipe"                 # KernelMoeTokenUnpermute's TPipe
TILINGKEY_PROBS = 1
TILINGKEY_FLOAT16 = 2
TILINGKEY_FLOAT = 4
TILINGKEY_MIX = {np.dtype(ml_dtypes.bfloat16): 8, np.dtype(np.float16): 16, np.dtype(np.float32): 24}
KERNEL_KEYS = (0, 2, 4)       # TILING_KEY_IS branches of moe_token_permute_grad.cpp (PROBS always false)


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def tiling_key(grad_dtype, probs_dtype=None) -> int:
    """SetTilingKey: dtype bits of the gradient, the probs bit and the mix bits."""
    g = as_dtype(grad_dtype)
    key = TILINGKEY_FLOAT16 if g == np.float16 else TILINGKEY_FLOAT if g == np.float32 else 0
    if probs_dtype is not None:
        key += TILINGKEY_PROBS
        p = as_dtype(probs_dtype)
        if p != g:
            key += TILINGKEY_MIX.get(p, 0)
    return key


def moe_token_permute_grad(permuted_output_grad, sorted_indices, num_topk, padded_mode=False, *, probs=None,
                           soc="ascend910b") -> TilingResult:
    """Host tiling of MoeTokenPermuteGrad for one chip profile.

    Arguments in the aclnn's order (tensors: anything with .shape and .dtype, e.g. tiling.TensorDesc):
        permuted_output_grad: (R, H) bf16 / fp16 / fp32; R = numOutTokens of the forward permute.
        sorted_indices: (N * topK,) int32; only its dim 0 (and its dtype's byte size) is read.
        num_topk: the int64 attr; -1 is read as 1. Not read when probs is given.
        padded_mode: the bool attr (not read by the tiling).
        probs: keyword only: the optional input 2 the host UTs pass, (N, topK); it overrides tokens and topK
            and sets the probs / mix key bits (no kernel is registered for those keys).

    On ascend950 the real aclnn calls MoeInitRoutingV2Grad instead; the simulator runs kernel G there too, so
    this returns T-G sized for that profile (the simulator's figures, not the real 950 tiling's).

    Raises TilingError only where the simulator cannot read the shapes the real tiling reads: a gradient that
    is not 2-D (dims 0 and 1 are read), sorted_indices or probs of rank 0 (or probs not 2-D).
    """
    soc = get_soc(soc)
    g = TensorDesc.of(permuted_output_grad)
    s = TensorDesc.of(sorted_indices)
    p = TensorDesc.of(probs)
    if g is None or s is None:
        _fail("permuted_output_grad and sorted_indices are required")
    if g.ndim != 2:
        _fail(f"permuted_output_grad must be 2-D (rows, hidden), got shape {g.shape}")
    if s.ndim < 1:
        _fail(f"sorted_indices must have a dim 0 (the slot count), got shape {s.shape}")
    if p is not None and p.ndim != 2:
        _fail(f"probs must be 2-D (tokens, topK), got shape {p.shape}")
    rows, hidden = g.dim(0), g.dim(1)
    total = s.dim(0)
    if p is not None:
        tokens, top_k = p.dim(0), p.dim(1)
    else:
        top_k = 1 if int(num_topk) == -1 else int(num_topk)
        tokens = tdiv(total, top_k)      # safeDiv: 0 for topK 0
    prob_bytes = None if p is None else length_by_type(p.dtype)
    tg = gather_tiling(ub_bytes=soc.ub_size_for_tiling, core_num=soc.aiv_num, token_bytes=length_by_type(g.dtype),
                       num_tokens=tokens, top_k=top_k, hidden=hidden, num_out_tokens=rows,
                       index_bytes=length_by_type(s.dtype), prob_bytes=prob_bytes)
    fields = struct_fields(FIELDS)
    fields.update(tg.fields)
    dt = as_dtype(g.dtype)
    plan = gather_ub_plan(fields, token_bytes=dt.itemsize, tokens_fp32=dt.itemsize == 4, pipe=PIPE,
                          prob_bytes=None if p is None else as_dtype(p.dtype).itemsize, index_bytes=INDEX_BYTES)
    return TilingResult(tiling_key=tiling_key(g.dtype, None if p is None else p.dtype), block_dim=tg.used_core_num,
                        workspace_size=soc.lib_api_workspace, fields=fields, ub_plan=plan, soc=soc)

