"""MoeTokenUnpermuteGrad: gradient of MoeTokenUnpermute (aclnnMoeTokenUnpermuteGrad).

source: moe/moe_token_unpermute_grad/op_host/op_api/aclnn_moe_token_unpermute_grad.cpp,
op_host/moe_token_unpermute_grad_def.cpp and moe/moe_finalize_routing_v2_grad/op_host/op_api/
moe_finalize_routing_v2_grad.cpp (the 950 l0) @ 25fb6b92890d.

    permuted_tokens_grad[S[j]] = G[j // K] * probs[j // K, j % K]    (G[j] without probs, K = 1)
    probs_grad[t, k]           = sum_h permuted_tokens[S[t*K + k], h] * G[t, h]

Ascend 910B / 910_93: the auto-generated inner aclnn, in this order:
1. a missing unpermuted_tokens_grad, sorted_indices, permuted_tokens_grad_out or probs_grad_out (all
   REQUIRED in the OpDef; permuted_tokens and probs are optional) -> 161001;
2. dtypes outside the 9 OpDef columns (tokens, gradient and output one of bf16 / fp16 / fp32, sorted
   indices int32, probs and probs_grad_out one of bf16 / fp16 / fp32 and equal) -> 161002;
3. the tiling (tiling.moe_token_unpermute_grad): a zero tokens / topK / hidden / len(sorted_indices), or
   topK > 512 -> 561002;
4. simulator checks, 561002 (the documentation's shape relations, which the real op does not test; the
   kernel would address memory outside a tensor otherwise): unpermuted_tokens_grad 2-D (N, H); sorted
   indices 1-D of N * K; probs (N, K); with probs, permuted_tokens (len(S), H) and probs_grad_out the
   probs shape; permuted_tokens_grad_out (len(S), H); and an in-core split the real tiling could not
   make (it logs the failure, succeeds with zero fields, and its kernel would divide by them).
Steps: one launch of the kernel of tilingKey 0 (no probs: row copies) or 1 (probs), see kernel.py.
Rows of permuted_tokens_grad_out no index names are left as they were; probs_grad_out is not touched
without probs. Indices >= len(sorted_indices) are skipped (the probs gradient of such a slot sums a zero
row); a negative index makes the kernel address GM before the tensor: OutOfBoundsError. With probs but
without permuted_tokens (optional in the OpDef) the kernel reads an empty tensor: OutOfBoundsError.

Ascend 950 (IsRegbase), in this order: padded_mode true -> 161002; a missing permuted_tokens,
unpermuted_tokens_grad, sorted_indices, permuted_tokens_grad_out or probs_grad_out -> 161001; dtypes
(checked only for non-empty tensors: gradient, permuted tokens and output one of bf16 / fp16 / fp32 and
equal, sorted indices int32, probs and probs_grad_out any of the three) -> 161002; a 0-d sorted_indices
-> 161002. Both outputs empty: success, nothing runs. Then l0op::MoeFinalizeRoutingV2Grad(gradY = G,
expandedRowIdx = S, expandedX = permuted_tokens, scales = probs, dropPadMode 0, activeNum = len(S)); its
tiling checks fail as 561103: G 2-D, S 1-D; with probs: permuted_tokens (len(S), H), probs 2-D with N
rows and len(S) elements, probs_grad_out 2-D with N rows, len(S) elements and the probs dtype; without
probs: N == len(S); the output (len(S), H). Mixed token / probs dtypes are allowed there.
Steps: l0op::MoeFinalizeRoutingV2Grad [simulated kernel: the arch35 templates of
ops.l0.moe_finalize_routing_v2_grad, 10001 without probs, 20011 with probs] into two fresh tensors the l0
allocates like the outputs, then l0op::ViewCopy of each into permuted_tokens_grad_out / probs_grad_out [host].
Its rules: a slot with S[j] < 0 or S[j] >= len(S) writes no row and gets a probs gradient of exactly +0; each
probs gradient is the fp32 sum of the whole row in the order of the arch35 CalcGradScaleVF (tail onto the
power-of-two head, inactive lanes +0; the in-register ReduceSum's lane order is the one assumption). There is
no topK limit. The l0 zeroes nothing with dropPadMode 0, so rows no index names (and, without probs, a non-empty
probs_grad_out) hold undefined data on the chip: the simulator's fresh tensors are zeroed, so they come back 0.
With probs, the hidden sizes the l0 tiling cuts (on the stock profile fp32 rows longer than 10544 elements, bf16 /
fp16 longer than 21040) run its split-H kernel (key 20012), whose sums go block by block (ops/l0/
moe_finalize_routing_v2_grad/split_h.py).
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of, gm_view
from tiling import get_soc
from tiling.moe_token_unpermute_grad import FIELDS, in_core_split_done
from tiling.moe_token_unpermute_grad import moe_token_unpermute_grad as _tiling
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
from ..l0 import moe_finalize_routing_v2_grad as _l0_grad
from .kernel import KERNELS, GmTensors, Template

OP = "MoeTokenUnpermuteGrad"
API = "aclnnMoeTokenUnpermuteGrad"
L0_OP = "l0op::MoeFinalizeRoutingV2Grad"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenUnpermuteGradTilingData = namedtuple("MoeTokenUnpermuteGradTilingData", FIELDS)
TilingData = MoeTokenUnpermuteGradTilingData

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I32 = np.dtype(np.int32)
FLOAT_DTYPES = (_BF16, _F16, _F32)
NAMES = ("permuted_tokens", "unpermuted_tokens_grad", "sorted_indices", "probs", "permuted_tokens_grad",
         "probs_grad")
# OpDef columns in NAMES order: tokens type t for permuted / gradient / output, probs type p for probs / probs_grad
DTYPE_COLUMNS = [(t, t, _I32, p, t, p) for t in FLOAT_DTYPES for p in FLOAT_DTYPES]


def _shape_error(message: str):
    raise TilingError(f"{OP}: {message}")


def _check_shapes(p, g, s, pr, out, probs_grad) -> None:
    """The documentation's shape relations the kernel relies on (561002)."""
    if g.ndim != 2:
        _shape_error(f"unpermuted_tokens_grad must be 2-D (tokens_num, hidden_size), got shape {g.shape}")
    n, h = g.shape
    k = 1 if pr is None else pr.shape[1] if pr.ndim == 2 else 0
    if s.ndim != 1 or s.shape[0] != n * k:
        _shape_error(f"sorted_indices must be 1-D of tokens_num * topK = {n} * {k} = {n * k} elements, got shape "
                     f"{s.shape}")
    m = s.shape[0]
    if pr is not None:
        if pr.shape != (n, k):
            _shape_error(f"probs must have shape (tokens_num, topK) = {(n, k)}, got {pr.shape}")
        if p is not None and p.shape != (m, h):
            _shape_error(f"permuted_tokens must have shape (len(sorted_indices), hidden_size) = {(m, h)}, got "
                         f"{p.shape}")
        if probs_grad.shape != pr.shape:
            _shape_error(f"probs_grad_out must have the probs shape {pr.shape}, got {probs_grad.shape}")
    if out.shape != (m, h):
        _shape_error(f"permuted_tokens_grad_out must have shape (len(sorted_indices), hidden_size) = {(m, h)}, "
                     f"got {out.shape}")


def _ro_bytes(a, index: int) -> GlobalTensor:
    """An input as read-only GM bytes (an absent one is empty): one numba type for every dtype."""
    data = gm_view(a).view(np.uint8) if a is not None else np.zeros(0, dtype=np.uint8)
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return GlobalTensor(data, index, 0)


def _executor(result, tensors: dict) -> Executor:
    p, g, s, pr, out, probs_grad = (tensors[n] for n in NAMES)
    token_t = dt_of(g.dtype)
    gm = GmTensors(_ro_bytes(p, 0), _ro_bytes(g, 1), gm_tensor(s, 2, np.int32), _ro_bytes(pr, 3),
                   GlobalTensor(gm_view(out).view(np.uint8), 4, 0),
                   GlobalTensor(gm_view(probs_grad).view(np.uint8), 5, 0))
    tmpl = Template(token_t, token_t if pr is None else dt_of(pr.dtype))
    td = TilingData(*result.fields.values())
    m, h = out.shape[0], g.shape[1]
    links = (IndexLink("sorted_indices", "permuted_tokens_grad", h, m),
             IndexLink("sorted_indices", "permuted_tokens", h, m))
    return Executor(OP, result, KERNELS[result.tiling_key], (td, gm, tmpl), NAMES, api=API, tensors=tensors,
                    ub_advice=_ub_advice(result), index_links=links)


def _ub_advice(result) -> str:
    """What shrinks this op's UB plan (appended to a UBOverflowError)."""
    f = result.fields
    return (f"The plan is sized by the tiling: hidden pieces of {f['hidden_size_align']} elements, "
            f"{f['input_reserve_num']} permuted rows and {f['indices_reserve_num']} indices per batch. To fit: a "
            "smaller topK or hidden size, or a larger ub_size in a custom profile (tiling.get_soc(..., ub_size=...)).")


def _inner(tensors: dict, padded_mode: bool, restore_shape, soc, indices_ndim: int):
    """The 910B / 910_93 inner aclnn."""
    p, g, s, pr, out, probs_grad = (tensors[n] for n in NAMES)
    match_dtype_columns(OP, [(n, tensors[n]) for n in NAMES], DTYPE_COLUMNS)
    result = _tiling(p, g, s, pr, padded_mode, restore_shape, soc=soc)
    if indices_ndim == 0:
        _shape_error("sorted_indices must be 1-D, got a 0-d array")
    _check_shapes(p, g, s, pr, out, probs_grad)
    if not in_core_split_done(result.fields):
        _shape_error("the in-core split failed (the real tiling logs 'split in core operation illegal' and goes on "
                     f"with zero fields, and its kernel would divide by them): UB of {result.fields['total_ub_size']} "
                     "bytes is too small for these dtypes and this hidden size")
    return result.workspace_size, _executor(result, tensors)


def _check_regbase_dtypes(tensors: dict) -> None:
    """The 950 aclnn's CheckDtypeValid (161002); empty tensors are not checked, as in the real op."""
    p, g, s, pr, out, probs_grad = (tensors[n] for n in NAMES)

    def check(name, t, allowed):
        if t is not None and t.size and t.dtype not in allowed:
            raise ParamInvalidError(f"{name} dtype must be one of {[d.name for d in allowed]}, got {t.dtype}")

    def same_as_grad(name, t):
        check(name, t, FLOAT_DTYPES)
        if t is not None and t.size and t.dtype != g.dtype:
            raise ParamInvalidError(f"{name} dtype ({t.dtype}) must equal the unpermuted_tokens_grad dtype ({g.dtype})")

    # CheckDtypeValid's order: gradient, indices, permuted tokens, probs, permuted-tokens gradient, probs gradient
    check("unpermuted_tokens_grad", g, FLOAT_DTYPES)
    check("sorted_indices", s, (_I32,))
    same_as_grad("permuted_tokens", p)
    check("probs", pr, FLOAT_DTYPES)
    same_as_grad("permuted_tokens_grad_out", out)
    check("probs_grad_out", probs_grad, FLOAT_DTYPES)


def _regbase(tensors: dict, padded_mode: bool, restore_shape, soc, indices_ndim: int):
    """The Ascend 950 aclnn: explicit checks, then l0op::MoeFinalizeRoutingV2Grad into fresh tensors and ViewCopy.
    indices_ndim: the caller's sorted_indices rank (as_input makes a 0-d array 1-d)."""
    p, g, s, pr, out, probs_grad = (tensors[n] for n in NAMES)
    _check_regbase_dtypes(tensors)
    if indices_ndim == 0:
        raise ParamInvalidError("sorted_indices must have at least one dimension (activeNum is its dim 0)")
    # the l0 allocates its results like the outputs (undefined bytes on the chip, zeroed here)
    grad_expanded_x, grad_scales = np.zeros_like(out), np.zeros_like(probs_grad)
    steps, result = [], None
    if out.size or probs_grad.size:             # the l0 launches nothing (and tiles nothing) for two empty results
        try:
            _, executor = _l0_grad.get_workspace_size(
                g, s, p, pr, drop_pad_mode=0, active_num=s.shape[0], expert_num=0, expert_capacity=0,
                grad_expanded_x_out=grad_expanded_x, grad_scales_out=grad_scales, soc=soc)
        except TilingError as e:
            raise InnerNullptrError(f"{L0_OP} returns nullptr: {e.message}") from None
        result = executor.tiling
        steps.append(KernelStep(L0_OP, executor))
    steps += [view_copy_step(grad_expanded_x, out), view_copy_step(grad_scales, probs_grad)]
    workspace = result.workspace_size if result is not None else 0
    return workspace, Composite(OP, result, steps, api=API, tensors=tensors, workspace_size=workspace)


def get_workspace_size(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs=None, padded_mode=False,
                       restore_shape=None, permuted_tokens_grad_out=None, probs_grad_out=None, *, soc="ascend910b"):
    """aclnnMoeTokenUnpermuteGradGetWorkspaceSize -> (workspace_size, executor). Checks in the module docstring."""
    soc = get_soc(soc)
    padded_mode = flag("padded_mode", padded_mode)
    restore_shape = int_list("restore_shape", restore_shape)
    if soc.is_regbase:
        if padded_mode:
            raise ParamInvalidError("padded_mode = true is not supported (only false)")
        required = (("permuted_tokens", permuted_tokens), ("unpermuted_tokens_grad", unpermuted_tokens_grad),
                    ("sorted_indices", sorted_indices), ("permuted_tokens_grad_out", permuted_tokens_grad_out),
                    ("probs_grad_out", probs_grad_out))
    else:
        required = (("unpermuted_tokens_grad", unpermuted_tokens_grad), ("sorted_indices", sorted_indices),
                    ("permuted_tokens_grad_out", permuted_tokens_grad_out), ("probs_grad_out", probs_grad_out))
    for name, t in required:
        require(name, t)
    ins = [as_input(n, t) for n, t in zip(NAMES[:4], (permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs),
                                          strict=True)]
    outs = [as_output("permuted_tokens_grad_out", permuted_tokens_grad_out),
            as_output("probs_grad_out", probs_grad_out)]
    tensors = dict(zip(NAMES, ins + outs, strict=True))
    check_no_alias(dict(zip(NAMES[:4], ins, strict=True)), dict(zip(NAMES[4:], outs, strict=True)))
    return (_regbase if soc.is_regbase else _inner)(tensors, padded_mode, restore_shape, soc,
                                                    np.ndim(sorted_indices))


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenUnpermuteGrad: launch; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs=None):
    """Zeroed (permuted_tokens_grad_out (len(S), H) in the gradient dtype, probs_grad_out): the probs shape and
    dtype, or an empty (0,) array of the gradient dtype without probs (the output is required but unused)."""
    require("unpermuted_tokens_grad", unpermuted_tokens_grad)
    require("sorted_indices", sorted_indices)
    as_input("permuted_tokens", permuted_tokens)
    g, s = as_input("unpermuted_tokens_grad", unpermuted_tokens_grad), as_input("sorted_indices", sorted_indices)
    pr = as_input("probs", probs)
    m = s.shape[0] if s.ndim >= 1 else 0
    h = g.shape[1] if g.ndim == 2 else 0
    out = output_array("permuted_tokens_grad_out", [(m, "sorted_indices"), (h, "unpermuted_tokens_grad")], g.dtype)
    probs_grad = output_array("probs_grad_out", [(d, "probs") for d in (pr.shape if pr is not None else (0,))],
                              pr.dtype if pr is not None else g.dtype)
    return out, probs_grad


def moe_token_unpermute_grad(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs=None, padded_mode=False,
                             restore_shape=None, *, soc="ascend910b", check=None):
    """Friendly call: allocates zeroed outputs, runs both phases.

    Returns (permuted_tokens_grad (len(sorted_indices), H) in the gradient dtype, probs_grad (N, K) in the probs
    dtype, or None without probs). Rows of permuted_tokens_grad no index names are 0 (the kernel does not write
    them; the outputs start zeroed). `check`: checked mode of the run, as on the aclnn call."""
    validate_check(check)
    soc = get_soc(soc)
    out, probs_grad = allocate_outputs(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs)
    size, executor = get_workspace_size(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs, padded_mode,
                                        restore_shape, out, probs_grad, soc=soc)
    run_friendly(run, size, executor, check)
    return out, (probs_grad if probs is not None else None)
