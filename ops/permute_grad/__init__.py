"""MoeTokenPermuteGrad: gradient of MoeTokenPermute (aclnnMoeTokenPermuteGrad).

source: moe/moe_token_permute_grad/op_host/op_api/aclnn_moe_token_permute_grad.cpp,
moe/moe_token_permute_grad/op_host/moe_token_permute_grad_def.cpp, and the l0 wrapper
moe/moe_init_routing_v2_grad/op_host/op_api/moe_init_routing_v2_grad.cpp (950) @ 25fb6b92890d.

input_grad[t] = sum_{k < K} permuted_output_grad[sorted_indices[t*K + k]] over the slots whose row exists
(< R = rows of the gradient: rows the forward dropped through numOutTokens), fp32 sum, round-half-even cast.

Ascend 910B / 910_93: the auto-generated inner aclnn, in this order:
* permuted_output_grad, sorted_indices, out or num_topk missing -> 161001 (ParamNullptrError);
* dtypes outside the OpDef columns (gradient bf16 / fp16 / fp32, sorted_indices int32, out = gradient)
  -> 161002 (ParamInvalidError);
* then the tiling (T-G, tiling.moe_token_permute_grad), which never fails in the real op. The simulator adds
  the checks that keep the kernel inside the caller's tensors, all 561002 (TilingError, the status the inner
  aclnn gives for a shape its tiling / launch cannot serve, and the one MoeTokenUnpermute documents for
  "shape mismatch between inputs / between attr and inputs"): the gradient 2-D and sorted_indices 1-D;
  num_topk >= 1 or -1; out of shape (len(sorted_indices) // K, H). The last one matters because the real
  InferShape sizes out by R // num_topk while the kernel writes len(sorted_indices) // K rows: the two differ
  whenever the forward dropped rows, and the real op would then write past an InferShape-sized output.
  A tiling that gives a zero-length hidden piece or token chunk (a UB too small for the shapes) would leave
  rows unwritten: refused with 561002 too.
* one launch of kernel G (keys 0 / 2 / 4) writing out directly. Negative indices are not skipped there: they
  end in an OutOfBoundsError naming the index. Slots past N*K (len not a multiple of K) are ignored.

Ascend 950 (IsRegbase): paddedMode true -> 161002; null -> 161001; dtypes (gradient and out in
{fp16, bf16, fp32} and equal, sorted_indices int32; empty tensors are not checked) -> 161002; a rank-0
gradient -> 161002. Then l0 MoeInitRoutingV2Grad(grad, sorted_indices, topK = num_topk, dropPadMode 0,
activeNum = R) into a new tensor of out's shape, and ViewCopy into out. That l0 op launches nothing when out
is empty; otherwise its tiling fails (-> l0 nullptr -> 561103, InnerNullptrError) for: num_topk <= 0 (-1 is
not read as 1 here), a gradient that is not 2-D or 3-D, R == 0, out not 2-D, out dim 1 != H, an empty
sorted_indices, len(sorted_indices) not a multiple of num_topk, out dim 0 != len(sorted_indices) // num_topk.
The simulator also refuses a 3-D gradient (561103; the real 950 kernel would read it as (R, dim1) rows) and
a sorted_indices that is not 1-D (561103; the real tiling reads only its dim 0).

The friendly call sizes out by len(sorted_indices) // K, so it applies the chip's num_topk rule first: 0 and
values below -1 on 910B / 910_93 (561002), values below 1 on 950 (561103), before anything is allocated.

The 950 kernel is the simulated l0 operator ops.l0.moe_init_routing_v2_grad (its own tiling, the arch35
split-H / full-load / regbase templates): slots with index < 0 or >= R count as zero rows, the fp32 sum starts at
+0.0 and adds slots in groups of four, pairwise, per chunk of kUbFactor slots (the regbase template; the whole topK
for the split-H and full-load templates).
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import dt_of
from tiling import TensorDesc, get_soc
from tiling.moe_init_routing_v2_grad import KEY_REGBASE
from tiling.moe_init_routing_v2_grad import moe_init_routing_v2_grad as _l0_tiling
from tiling.moe_token_permute_grad import FIELDS
from tiling.moe_token_permute_grad import moe_token_permute_grad as _tiling
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
from .._validate import as_input, as_output, check_no_alias, flag, int_attr, output_array, require
from ..common.unpermute_gather import gather_template
from ..l0 import moe_init_routing_v2_grad as _l0
from .kernel import KERNELS, L0_950, GmTensors

OP = "MoeTokenPermuteGrad"
API = "aclnnMoeTokenPermuteGrad"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenPermuteGradTilingData = namedtuple("MoeTokenPermuteGradTilingData", FIELDS)

_BF16, _F16, _F32, _I32 = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32),
                           np.dtype(np.int32))
FLOAT_DTYPES = (_F16, _BF16, _F32)
# OpDef columns (permuted_output_grad, sorted_indices, input_grad)
DTYPE_COLUMNS = [(g, _I32, g) for g in (_BF16, _F16, _F32)]
GM_NAMES = ("permuted_output_grad", "sorted_indices", "input_grad")


def arch35_k_chunk(hidden: int, top_k: int, tokens: int, grad_dtype, soc) -> int:
    """Slots one SequenceReduceSum pass covers on Ascend 950, as l0 MoeInitRoutingV2Grad's tiling decides for the
    shapes aclnnMoeTokenPermuteGrad hands it: kUbFactor of the regbase template, topK for the others."""
    dt = np.dtype(grad_dtype)
    r = _l0_tiling(TensorDesc((max(tokens * top_k, 1), hidden), dt), TensorDesc((tokens * top_k,), np.int32), top_k,
                   0, max(tokens * top_k, 1), grad_x_out=TensorDesc((tokens, hidden), dt), soc=soc)
    return r.fields["k_ub_factor"] if r.tiling_key // 100000 * 100000 == KEY_REGBASE else top_k


def _ub_advice(result) -> str:
    f = result.fields
    return (f"Kernel G is sized by the tiling: hidden pieces of {f['hidden_splited_length']} elements, "
            f"{f['tokens_splited_length']} tokens' indices per chunk. A larger ub_size in a custom profile "
            "(tiling.get_soc(..., ub_size=...)) gives longer pieces.")


def _check_910(g, s, out, k: int) -> None:
    """The simulator's shape checks on the inner-aclnn path (561002; see the module docstring)."""
    if g.ndim != 2:
        raise TilingError(f"{OP}: permuted_output_grad must be 2-D (rows, hidden), got shape {g.shape}")
    if s.ndim != 1:
        raise TilingError(f"{OP}: sorted_indices must be 1-D (tokens * num_topk,), got shape {s.shape}")
    _check_num_topk(k, regbase=False)
    top_k = 1 if k == -1 else k
    n = s.shape[0] // top_k
    want = (n, g.shape[1])
    if out.shape != want:
        infer = g.shape[0] // top_k
        note = (f" (InferShape's rows // num_topk = {infer} differs when the forward dropped rows: size out by "
                "len(sorted_indices) // num_topk)") if out.ndim == 2 and out.shape[0] == infer != n else ""
        raise TilingError(f"{OP}: out must have shape (len(sorted_indices) // num_topk, hidden) = {want}, got "
                          f"{out.shape}; the kernel writes {n} rows{note}")


def _check_num_topk(k: int, regbase: bool) -> None:
    """num_topk as each chip's path reads it. 910B / 910_93: T-G reads -1 as 1; 0 and values below -1 are no
    topK (the real tiling has no check and only gets through K = 0 by its safe division, giving 0 tokens; its
    InferShape divides the gradient's rows by K unguarded): 561002, as for any shape the inner aclnn's tiling
    cannot serve. 950: MoeInitRoutingV2Grad's tiling refuses top_k <= 0 (-1 included): l0 nullptr, 561103."""
    if regbase:
        if k <= 0:
            raise InnerNullptrError(f"l0op::{L0_950}: top_k must be greater than 0, got num_topk {k} (-1 is read as "
                                    "1 only on Ascend 910B / 910_93)")
    elif k == 0 or k < -1:
        raise TilingError(f"{OP}: num_topk must be a positive topK (or -1, read as 1), got {k}")


def _check_950(g, s, out, k: int) -> None:
    """MoeInitRoutingV2Grad's tiling checks (l0 failure -> 561103), for a non-empty out."""
    def fail(msg):
        raise InnerNullptrError(f"l0op::{L0_950}: {msg}")
    _check_num_topk(k, regbase=True)
    if g.ndim != 2:
        fail(f"grad_expanded_x (permuted_output_grad) must be 2-D here, got shape {g.shape}")
    if g.shape[0] == 0:
        fail("permuted_output_grad has 0 rows: activeNum 0 selects the dropless mode, which needs positive dims")
    if out.ndim != 2 or out.shape[1] != g.shape[1]:
        fail(f"grad_x (out) must be 2-D with hidden {g.shape[1]}, got shape {out.shape}")
    if s.ndim != 1 or s.shape[0] == 0:
        fail(f"expanded_row_idx (sorted_indices) must be a non-empty 1-D tensor, got shape {s.shape}")
    if s.shape[0] % k:
        fail(f"expanded_row_idx (sorted_indices) dim 0 ({s.shape[0]}) must be divisible by top_k (num_topk {k})")
    if out.shape[0] != s.shape[0] // k:
        fail(f"grad_x dim 0 must equal len(sorted_indices) // num_topk = {s.shape[0] // k}, got {out.shape[0]}")


def _check_950_dtypes(g, s, out) -> None:
    """CheckDtypeValid of the regbase path (161002); empty tensors are not checked."""
    if g.size and g.dtype not in FLOAT_DTYPES:
        raise ParamInvalidError(f"permuted_output_grad dtype must be float16, bfloat16 or float32, got {g.dtype}")
    if s.size and s.dtype != _I32:
        raise ParamInvalidError(f"sorted_indices dtype must be int32, got {s.dtype}")
    if out.size:
        if out.dtype not in FLOAT_DTYPES:
            raise ParamInvalidError(f"out dtype must be float16, bfloat16 or float32, got {out.dtype}")
        if out.dtype != g.dtype:
            raise ParamInvalidError(f"out dtype ({out.dtype}) must equal permuted_output_grad dtype ({g.dtype})")


def _check_pieces(result, n: int, h: int) -> None:
    f = result.fields
    if (h > 0 and f["hidden_splited_length"] <= 0) or (n > 0 and f["tokens_splited_length"] <= 0):
        raise TilingError(f"{OP}: the tiling leaves no room for the data (hidden piece {f['hidden_splited_length']} "
                          f"elements, token chunk {f['tokens_splited_length']} tokens): the kernel would not write "
                          "the output. " + _ub_advice(result))


def _executor(result, g, s, out_array, tensors) -> Executor:
    td = MoeTokenPermuteGradTilingData(*result.fields.values())
    gm = GmTensors(gm_tensor(g, 0), gm_tensor(s, 1, np.int32), gm_tensor(out_array, 2))
    kernel = KERNELS[g.dtype == _F32]
    tmpl = gather_template(dt_of(g.dtype), None, skip_negative=False, used_core_num=result.block_dim)
    links = (IndexLink("sorted_indices", "permuted_output_grad", g.shape[1], g.shape[0]),)
    return Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors, index_links=links,
                    ub_advice=_ub_advice(result), writes=(out_array,))


def get_workspace_size(permuted_output_grad, sorted_indices, num_topk, padded_mode=False, out=None, *,
                       soc="ascend910b"):
    """aclnnMoeTokenPermuteGradGetWorkspaceSize -> (workspace_size, executor). Arguments in the aclnn's order;
    out (N, H) is filled in place by the second phase."""
    soc = get_soc(soc)
    padded_mode = flag("padded_mode", padded_mode)
    if soc.is_regbase and padded_mode:      # the regbase branch tests paddedMode first
        raise ParamInvalidError("padded_mode = true is not supported (only false)")
    require("permuted_output_grad", permuted_output_grad)
    require("sorted_indices", sorted_indices)
    require("out", out)
    require("num_topk", num_topk)
    k = int_attr("num_topk", num_topk)
    grad_rank = np.ndim(permuted_output_grad)        # before as_input, which makes a 0-d array 1-d
    g = as_input("permuted_output_grad", permuted_output_grad)
    s = as_input("sorted_indices", sorted_indices)
    o = as_output("out", out)
    tensors = dict(permuted_output_grad=g, sorted_indices=s, out=o)
    check_no_alias({"permuted_output_grad": g, "sorted_indices": s}, {"out": o})

    if not soc.is_regbase:
        match_dtype_columns(OP, [("permuted_output_grad", g), ("sorted_indices", s), ("out", o)], DTYPE_COLUMNS)
        _check_910(g, s, o, k)
        result = _tiling(g, s, k, padded_mode, soc=soc)
        if o.size:
            _check_pieces(result, o.shape[0], o.shape[1])
        return result.workspace_size, _executor(result, g, s, o, tensors)

    _check_950_dtypes(g, s, o)
    if grad_rank == 0:
        raise ParamInvalidError("permuted_output_grad must have at least one dimension (rows, hidden)")
    if o.size == 0:      # l0 MoeInitRoutingV2Grad launches nothing for an empty output
        return 0, Composite(OP, None, [], api=API, tensors=tensors)
    _check_950(g, s, o, k)
    grad_x = np.empty(o.shape, dtype=o.dtype)       # the l0 op's own output, copied into out by ViewCopy
    try:
        workspace, executor = _l0.get_workspace_size(g, s, top_k=k, drop_pad_mode=0, active_num=g.shape[0],
                                                     grad_x_out=grad_x, soc=soc)
    except TilingError as e:
        raise InnerNullptrError(f"l0op::{L0_950} returns nullptr: {e.message}") from None
    steps = [KernelStep(f"l0op::{L0_950}", executor), view_copy_step(grad_x, o)]
    return workspace, Composite(OP, executor.tiling, steps, api=API, tensors=tensors, workspace_size=workspace)


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenPermuteGrad: launch; out is filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(permuted_output_grad, sorted_indices, num_topk, *, soc="ascend910b") -> np.ndarray:
    """Zeroed out of shape (len(sorted_indices) // K, H) in the gradient's dtype (K = num_topk, -1 read as 1 on
    910B / 910_93): the rows the kernel writes (not InferShape's R // num_topk, see the module docstring). A
    num_topk the op refuses is refused here, with the op's status, before anything is allocated."""
    soc = get_soc(soc)
    require("permuted_output_grad", permuted_output_grad)
    require("sorted_indices", sorted_indices)
    require("num_topk", num_topk)
    g = as_input("permuted_output_grad", permuted_output_grad)
    s = as_input("sorted_indices", sorted_indices)
    k = int_attr("num_topk", num_topk)
    _check_num_topk(k, soc.is_regbase)
    k = 1 if k == -1 else k
    total = s.shape[0] if s.ndim >= 1 else 0
    h = g.shape[1] if g.ndim >= 2 else 0
    return output_array("out", [(total // k, "sorted_indices and num_topk"), (h, "permuted_output_grad")], g.dtype)


def moe_token_permute_grad(permuted_output_grad, sorted_indices, num_topk, padded_mode=False, *,
                           soc="ascend910b", check=None) -> np.ndarray:
    """Friendly call: allocates input_grad (len(sorted_indices) // K, H) in the gradient's dtype, runs both
    phases and returns it (K = num_topk; -1 is read as 1 on 910B / 910_93 and refused on 950; 0 is refused
    on both). `check`: checked mode of the run, as on the aclnn call."""
    validate_check(check)
    out = allocate_outputs(permuted_output_grad, sorted_indices, num_topk, soc=soc)
    size, executor = get_workspace_size(permuted_output_grad, sorted_indices, num_topk, padded_mode, out, soc=soc)
    run_friendly(run, size, executor, check)
    return out
