"""MoeTokenUnpermute: the unpermute (combine) of a MoE layer (aclnnMoeTokenUnpermute).

source: moe/moe_token_unpermute/op_host/op_api/aclnn_moe_token_unpermute.cpp, op_host/moe_token_unpermute_def.cpp and
moe/moe_finalize_routing_v2/op_host/op_api/moe_finalize_routing_v2.cpp (the 950 l0) @ 25fb6b92890d.

    out[t] = sum_{k < K} probs[t, k] * permuted_tokens[sorted_indices[t*K + k]]     (K = 1 without probs)

Ascend 910B / 910_93: the auto-generated inner aclnn (op_api/aclnn_moe_token_unpermute.cpp forwards to
aclnnInnerMoeTokenUnpermute). Checks in the real order:
1. permuted_tokens, sorted_indices or unpermuted_tokens (out) missing -> 161001.
2. dtypes outside the OpDef's nine columns (tokens bf16 / fp16 / fp32 with probs of any of the three,
   sorted_indices int32, out = the tokens' dtype) -> 161002.
3. tiling (tiling.moe_token_unpermute, 561002): permuted_tokens not 2-D; probs not 2-D;
   len(sorted_indices) != probs.dim0 * probs.dim1; topK > 512.
4. the simulator's own checks, 561002 as the documentation lists shape mismatches: out must be (N, H)
   (N = probs.dim0, or len(sorted_indices) without probs), which the kernel writes row by row; probs of
   shape (N, 0) with N > 0 (kernel G reads each token's first slot before it tests topK, past a
   zero-length index buffer on the real chip).
An empty out launches nothing (ops._framework.launches).
padded_mode and restore_shape go to a tiling and a kernel that never read them: True / a list are accepted
and change nothing (the documentation says only False / None are supported).
Steps: one simulated launch of kernel G (ops.common.unpermute_gather, via kernel.py) on min(N, cores)
cores, into the caller's out. Negative sorted indices are read before permuted_tokens by the real kernel:
the simulator stops with OutOfBoundsError naming the index.

Ascend 950 (IsRegbase): the hand-written path of the same aclnn. Checks in its order: padded_mode True ->
161002; permuted_tokens, sorted_indices or out missing -> 161001; dtypes (tokens, probs and out bf16 / fp16 /
fp32, out equal to the tokens, sorted_indices int32; each checked only when non-empty) -> 161002. Then the l0
MoeFinalizeRoutingV2 (expandedX = permuted_tokens, expandedRowIdx = sorted_indices, scales = probs, dropPadMode 2
"read index by row"): empty out -> no launch; otherwise its tiling checks (tiling.moe_finalize_routing_v2:
expanded_x 2-D with H > 0; probs 2-D with K > 0; sorted_indices 1-D with L = N*K, N > 0; probs (N, K); out (N, H))
-> 561103, as the l0 returns nullptr. There is no topK limit. Steps: l0op::MoeFinalizeRoutingV2 [simulated
kernel: the arch35 templates of ops.l0.moe_finalize_routing_v2] then l0op::ViewCopy [host; moves nothing, the l0
wrote out]. Its rules: slots equal to -1 or >= R are skipped, zero probs are multiplied (not skipped), the fp32 sum
starts from +0.0. Two quirks of the real templates carry over (see that module): without probs (k 1) on the K-H
full-load template a skipped slot adds stale UB, and the row-K-H full-load template copies N*K rows of
permuted_tokens (R < N*K there is an OutOfBoundsError).
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import dt_of
from tiling import get_soc
from tiling.moe_token_unpermute import DROP_PAD_MODE_ROW, FIELDS, L0_950
from tiling.moe_token_unpermute import moe_token_unpermute as _tiling
from tiling.status import InnerNullptrError, ParamInvalidError, TilingError

from .._framework import (
    Composite,
    Executor,
    IndexLink,
    KernelStep,
    gm_tensor,
    match_dtype_columns,
    run_executor,
    run_friendly,
    validate_check,
)
from .._host import view_copy_step
from .._validate import as_input, as_output, check_no_alias, flag, int_list, output_array, require
from ..common.unpermute_gather import gather_template
from ..l0 import moe_finalize_routing_v2 as _l0_finalize
from .kernel import GmTensors, kernel_for

OP = "MoeTokenUnpermute"
API = "aclnnMoeTokenUnpermute"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenUnpermuteTilingData = namedtuple("MoeTokenUnpermuteTilingData", FIELDS)
TilingData = MoeTokenUnpermuteTilingData

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I32 = np.dtype(np.int32)
FLOAT_DTYPES = (_F16, _BF16, _F32)
# OpDef columns (permuted_tokens, sorted_indices, probs, unpermuted_tokens) for ascend910b / ascend910_93
DTYPE_COLUMNS = [(t, _I32, p, t) for t in (_BF16, _F16, _F32) for p in (_BF16, _F16, _F32)]
GM_NAMES = ("permuted_tokens", "sorted_indices", "probs", "unpermuted_tokens")


def _tokens_of(s, pr) -> int:
    """N as the InferShape gives it: probs.dim0, else len(sorted_indices)."""
    if pr is not None:
        return pr.shape[0] if pr.ndim >= 1 else 0
    return s.shape[0] if s.ndim >= 1 else 0


def _check_out_shape(out, p, s, pr, error) -> None:
    """The kernel writes N rows of H elements into out: any other shape would put rows elsewhere or past it."""
    want = (_tokens_of(s, pr), p.shape[1])
    if out.shape != want:
        raise error(f"{OP}: unpermuted_tokens must have shape (tokens, hidden) = {want} (tokens = "
                    f"{'probs dim 0' if pr is not None else 'len(sorted_indices)'}), got {out.shape}")


def _check_regbase_dtypes(p, s, pr, out) -> None:
    """CheckDtypeValid of the 950 path (161002); an empty tensor's dtype is not checked, as in the source."""
    def bad(name, t, want):
        raise ParamInvalidError(f"{name} dtype must be {want}, got {t.dtype}")
    if p.size and p.dtype not in FLOAT_DTYPES:
        bad("permuted_tokens", p, "float16, bfloat16 or float32")
    if s.size and s.dtype != _I32:
        bad("sorted_indices", s, "int32")
    if pr is not None and pr.size and pr.dtype not in FLOAT_DTYPES:
        bad("probs", pr, "float16, bfloat16 or float32")
    if out.size:
        if out.dtype not in FLOAT_DTYPES:
            bad("unpermuted_tokens", out, "float16, bfloat16 or float32")
        if out.dtype != p.dtype:
            bad("unpermuted_tokens", out, f"the permuted_tokens dtype ({p.dtype})")


def _ub_advice(result) -> str:
    f = result.fields
    return (f"Kernel G holds hidden pieces of {f['hidden_splited_length']} elements ({f['buffer_num']} input "
            f"buffers) and {f['tokens_splited_length']} tokens' indices / probs per chunk; a larger ub_size in a "
            "custom profile (tiling.get_soc(..., ub_size=...)) gives longer pieces and chunks.")


def _executor(result, p, s, pr, out, tensors, api: str) -> Executor:
    """The launch of kernel G for this op (no kernel when nothing is to be written)."""
    tmpl = gather_template(dt_of(p.dtype), None if pr is None else dt_of(pr.dtype), skip_negative=False,
                           used_core_num=result.block_dim)
    gm = GmTensors(gm_tensor(p, 0), gm_tensor(s, 1, np.int32), None if pr is None else gm_tensor(pr, 2),
                   gm_tensor(out, 3))
    kernel = kernel_for(p.dtype == _F32, pr is not None, pr is not None and pr.dtype == _F32)
    links = (IndexLink("sorted_indices", "permuted_tokens", p.shape[1], p.shape[0]),)
    return Executor(OP, result, kernel, (TilingData(*result.fields.values()), gm, tmpl), GM_NAMES, api=api,
                    tensors=tensors, ub_advice=_ub_advice(result), index_links=links, writes=(out,))


def get_workspace_size(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None,
                       unpermuted_tokens=None, *, soc="ascend910b"):
    """aclnnMoeTokenUnpermuteGetWorkspaceSize -> (workspace_size, executor).

    permuted_tokens (R, H) bf16 / fp16 / fp32; sorted_indices (N*K,) int32, the permuted row of every
    (token, slot) (rows >= R are skipped); probs (N, K) bf16 / fp16 / fp32 or None (K = 1, N = L);
    unpermuted_tokens (N, H) in the tokens' dtype, filled in place. See the module docstring for checks.
    """
    soc = get_soc(soc)
    padded_mode = flag("padded_mode", padded_mode)
    restore_shape = int_list("restore_shape", restore_shape)
    if soc.is_regbase and padded_mode:
        raise ParamInvalidError("padded_mode must be False on Ascend 950 (MoeFinalizeRoutingV2 supports only the "
                                "non-padded layout)")
    require("permuted_tokens", permuted_tokens)
    require("sorted_indices", sorted_indices)
    require("unpermuted_tokens", unpermuted_tokens)
    p, s = as_input("permuted_tokens", permuted_tokens), as_input("sorted_indices", sorted_indices)
    pr = as_input("probs", probs)
    out = as_output("unpermuted_tokens", unpermuted_tokens)
    tensors = dict(permuted_tokens=p, sorted_indices=s, probs=pr, unpermuted_tokens=out)
    check_no_alias({k: tensors[k] for k in GM_NAMES[:3]}, {"unpermuted_tokens": out})
    if soc.is_regbase:
        return _regbase(p, s, pr, out, soc, tensors)

    match_dtype_columns(OP, list(tensors.items()), DTYPE_COLUMNS)
    result = _tiling(p, s, pr, padded_mode, restore_shape, soc=soc)
    _check_out_shape(out, p, s, pr, TilingError)
    if pr is not None and pr.ndim == 2 and pr.shape[1] == 0 and out.size:
        # kernel G reads each token's first slot before it looks at topK: with topK 0 that index and prob lie
        # past their zero-length UB buffers (the real kernel would read whatever is there)
        raise TilingError(f"{OP}: probs has 0 columns (topK 0) for {out.shape[0]} tokens: kernel G reads every "
                          "token's first slot unconditionally, which topK 0 leaves outside its index buffer")
    executor = _executor(result, p, s, pr, out, tensors, api=API)
    return result.workspace_size, executor


def _regbase(p, s, pr, out, soc, tensors):
    """The Ascend 950 path: explicit dtype checks, then l0op::MoeFinalizeRoutingV2 and ViewCopy."""
    _check_regbase_dtypes(p, s, pr, out)
    steps = []
    result = None
    if out.size:        # the l0 allocates y like out and launches nothing for an empty y
        try:
            # master's call: x1, x2, bias, expert_idx, x, alpha1, alpha2, v null, the three ranges null, k 1
            _, executor = _l0_finalize.get_workspace_size(p, s, None, None, None, pr, None, None, None, None, None,
                                                          drop_pad_mode=DROP_PAD_MODE_ROW, zero_expert_range=None,
                                                          copy_expert_range=None, constant_expert_range=None, k=1,
                                                          y_out=out, soc=soc)
        except TilingError as e:
            raise InnerNullptrError(f"l0op::{L0_950} returns nullptr: {e.message}") from None
        result = executor.tiling
        steps.append(KernelStep(f"l0op::{L0_950}", executor))
    steps.append(view_copy_step(out, out))
    workspace = result.workspace_size if result is not None else 0
    return workspace, Composite(OP, result, steps, api=API, tensors=tensors, workspace_size=workspace)


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenUnpermute: launch the kernel (950: run the steps); out is filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(permuted_tokens, sorted_indices, probs=None) -> np.ndarray:
    """Zeroed unpermuted_tokens of the InferShape shape: (probs.dim0 or len(sorted_indices), H), tokens' dtype."""
    require("permuted_tokens", permuted_tokens)
    require("sorted_indices", sorted_indices)
    p, s = as_input("permuted_tokens", permuted_tokens), as_input("sorted_indices", sorted_indices)
    pr = as_input("probs", probs)
    h = p.shape[1] if p.ndim >= 2 else 0
    return output_array("unpermuted_tokens", [(_tokens_of(s, pr), "probs" if pr is not None else "sorted_indices"),
                                              (h, "permuted_tokens")], p.dtype)


def moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None, *,
                        soc="ascend910b", check=None) -> np.ndarray:
    """Friendly call: allocates unpermuted_tokens, runs both phases and returns it.

    Returns (N, H) in the dtype of permuted_tokens, N = probs.dim0 (or len(sorted_indices) without probs).
    restore_shape does not change the shape (the real InferShape ignores it). `check`: checked mode of the run,
    as on the aclnn call."""
    validate_check(check)
    soc = get_soc(soc)
    out = allocate_outputs(permuted_tokens, sorted_indices, probs)
    size, executor = get_workspace_size(permuted_tokens, sorted_indices, probs, padded_mode, restore_shape, out,
                                        soc=soc)
    run_friendly(run, size, executor, check)
    return out
