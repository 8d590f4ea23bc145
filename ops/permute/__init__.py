"""MoeTokenPermute (V1) and MoeTokenPermuteV2 (MX quantisation on Ascend 950).

source: moe/moe_token_permute/op_host/op_api/aclnn_moe_token_permute.cpp, aclnn_moe_token_permute_v2.cpp,
moe/moe_token_permute/op_host/moe_token_permute_def.cpp (OpDef columns) @ 25fb6b92890d.

Status codes follow the path each chip takes, in the real aclnn's order:
* A2/A3 (ascend910b, ascend910_93): V1 is the auto-generated inner aclnn: a missing tensor -> 161001, a
  dtype combination outside the OpDef -> 161002, a tiling failure -> 561002 (paddedMode true,
  indices not 1-D/2-D, dim-0 mismatch, topK > 512, 16777215 or more indices, output shapes).
  V2 first checks its five tensors for null (161001, expanded_scale_out included), then forwards to the same
  inner aclnn; quant_mode is ignored.
* ascend950 ("regbase"): V1 tests paddedMode first (true -> 161002, before the null checks), then its four
  tensors for null (161001), then the dtypes (161002; int8 tokens: CheckDtypeValidInt8Regbase, others
  CheckDtypeValidRegbase). V2 tests its five tensors for null (161001), then paddedMode (161002), then
  CheckDtypeValidV2Regbase (161002; quant_mode -1, 2 (MXFP8 E5M2), 3 (MXFP8 E4M3FN), 9 (MXFP4 E2M1) only). Neither
  checks a rank: tokens that are not 2-D or indices that are not 1-D / 2-D reach the l0 MoeInitRoutingV3 (or
  V2), whose failed tiling makes the l0 call return nullptr -> 561103, as does a failing Slice (more rows
  than slots, wrong hidden size or scale shape). V2 (and V1 with int8 tokens) routes all tokens * topK slots
  and slices the first rows of the caller's permute_tokens_out: the row count comes from that tensor and
  numOutTokens is not used.

Simulator-only checks (161002, no master counterpart): arguments of the wrong Python type, non-contiguous or
read-only outputs (ops._validate), `mx_scale_rule`, and MXFP4 with an odd hidden size (the simulator stores two
FP4 codes per uint8 byte, so an odd row does not fill whole bytes; the real FP4 tensor has no such limit).

On the 950 the op has no kernel of its own: the aclnn chains l0 operators (ops/permute/regbase.py). V2, and V1
with int8 tokens, run MoeInitRoutingV3's arch35 kernels on every slot and slice the caller's outputs from the
full result (expert ids outside [0, 10240) are dropped there: their sorted_indices are -1 and the rows they would
fill are not written); V1 with fp16 / bf16 / fp32 tokens runs MoeInitRoutingV2's arch35 kernels with numOutTokens.
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import dt_of, gm_view
from tiling import get_soc
from tiling.moe_token_permute import (
    FIELDS,
    LIB_API_WORKSPACE,
    QUANT_MXFP4_E2M1,
    QUANT_MXFP8_E4M3FN,
    QUANT_MXFP8_E5M2,
    QUANT_NONE,
    effective_num_out_tokens,
    mx_scale_cols,
)
from tiling.moe_token_permute import moe_token_permute as _tiling
from tiling.status import ParamInvalidError

from .._framework import Executor, gm_tensor, match_dtype_columns, run_executor, run_friendly, validate_check
from .._validate import as_input, as_output, check_no_alias, flag, int_attr, output_array, require
from .kernel import KERNELS, SORT_ONLY_KERNELS, GmTensors, Template
from .regbase import v2_chain, v3_chain

OP = "MoeTokenPermute"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenPermuteTilingData = namedtuple("MoeTokenPermuteTilingData", FIELDS)

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I8, _I32, _I64 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)
_E5M2, _E4M3 = np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.float8_e4m3fn)
_E8M0, _U8 = np.dtype(ml_dtypes.float8_e8m0fnu), np.dtype(np.uint8)
# OpDef columns (tokens, indices, permute_tokens, sorted_indices)
V1_DTYPE_COLUMNS = [(t, i, t, _I32) for t in (_BF16, _F16, _F32, _I8) for i in (_I64, _I32)]
QUANT_MODES = (QUANT_NONE, QUANT_MXFP8_E5M2, QUANT_MXFP8_E4M3FN, QUANT_MXFP4_E2M1)
MX_SCALE_RULES = ("floor", "round_scale")


def _check_regbase_dtypes(tokens, indices, permute_out, sorted_out, scale_out, quant_mode, v2: bool, int8: bool):
    """The ascend950 aclnn's dtype checks (all 161002), each in the real one's order: CheckDtypeValidRegbase (V1,
    fp tokens) and CheckDtypeValidInt8Regbase (V1, int8 tokens) test tokens, indices, permute_tokens_out,
    sorted_indices_out, each only when it is not empty; CheckDtypeValidV2Regbase (V2) tests indices and
    sorted_indices_out (when not empty), then tokens, permute_tokens_out and expanded_scale_out by quantMode (a
    quantMode outside -1 / 2 / 3 / 9 is refused after the tokens' dtype). None of them looks at shapes."""
    if not v2:
        allowed = (_I8,) if int8 else (_F16, _BF16, _F32)
        names = [d.name for d in allowed]
        if tokens.size and tokens.dtype not in allowed:
            raise ParamInvalidError(f"tokens dtype must be one of {names} here, got {tokens.dtype}")
        _check_index_dtypes(indices, None)
        if permute_out.size and (permute_out.dtype not in allowed or permute_out.dtype != tokens.dtype):
            raise ParamInvalidError(f"permute_tokens_out must have the tokens' dtype {tokens.dtype}, got "
                                    f"{permute_out.dtype}")
        _check_index_dtypes(None, sorted_out)
        return
    _check_index_dtypes(indices, sorted_out)
    if quant_mode == QUANT_NONE:
        allowed = (_F16, _BF16, _F32, _I8)
        if tokens.dtype not in allowed or permute_out.dtype != tokens.dtype:
            raise ParamInvalidError(f"tokens and permute_tokens_out must have one dtype of "
                                    f"{[d.name for d in allowed]}, got {tokens.dtype} and {permute_out.dtype}")
        if scale_out.dtype != _F32:
            raise ParamInvalidError(f"expanded_scale_out must be float32 without quantisation, got {scale_out.dtype}")
        return
    if tokens.dtype not in (_F16, _BF16):
        raise ParamInvalidError(f"quant_mode {quant_mode} needs float16 or bfloat16 tokens, got {tokens.dtype}")
    if quant_mode not in QUANT_MODES:
        raise ParamInvalidError(f"quantMode only supports -1, 2, 3 or 9 on Ascend 950, got {quant_mode}")
    want = {QUANT_MXFP8_E5M2: _E5M2, QUANT_MXFP8_E4M3FN: _E4M3, QUANT_MXFP4_E2M1: _U8}[quant_mode]
    if permute_out.dtype != want:
        raise ParamInvalidError(f"quant_mode {quant_mode} writes {want} permute_tokens_out"
                                + (" (two FP4 E2M1 codes per byte)" if quant_mode == QUANT_MXFP4_E2M1 else "")
                                + f", got {permute_out.dtype}")
    if scale_out.dtype != _E8M0:
        raise ParamInvalidError(f"quant_mode {quant_mode} writes float8_e8m0fnu expanded_scale_out, got "
                                f"{scale_out.dtype}")


def _check_index_dtypes(indices, sorted_out) -> None:
    """indices int32 / int64 and sorted_indices_out int32, each skipped when absent here or empty (161002)."""
    if indices is not None and indices.size and indices.dtype not in (_I32, _I64):
        raise ParamInvalidError(f"indices dtype must be int32 or int64, got {indices.dtype}")
    if sorted_out is not None and sorted_out.size and sorted_out.dtype != _I32:
        raise ParamInvalidError(f"sorted_indices_out dtype must be int32, got {sorted_out.dtype}")


def _quant_shapes(quant_mode: int, m: int, hidden: int):
    if quant_mode == QUANT_MXFP4_E2M1:
        return (m, hidden // 2), (m, -(-hidden // 64), 2)
    return (m, hidden), (m, mx_scale_cols(hidden))


def _build(tokens, indices, num_out_tokens, padded_mode, quant_mode, permute_out, sorted_out, scale_out, soc,
           v2: bool, mx_scale_rule: str):
    check_no_alias({"tokens": tokens, "indices": indices},
                   {"permute_tokens_out": permute_out, "sorted_indices_out": sorted_out,
                    "expanded_scale_out": scale_out})
    if mx_scale_rule is not None and mx_scale_rule not in MX_SCALE_RULES:
        raise ParamInvalidError(f"mx_scale_rule must be None or one of {MX_SCALE_RULES}, got {mx_scale_rule!r}")
    if soc.is_regbase:
        return _build_regbase(tokens, indices, num_out_tokens, quant_mode, permute_out, sorted_out, scale_out, soc,
                              v2, mx_scale_rule)
    # A2/A3 run V1's own kernel: quant_mode is ignored, as on the real chips
    match_dtype_columns(OP, [("tokens", tokens), ("indices", indices), ("permute_tokens_out", permute_out),
                             ("sorted_indices_out", sorted_out)], V1_DTYPE_COLUMNS)
    result = _tiling(tokens, indices, num_out_tokens, padded_mode, QUANT_NONE, soc=soc,
                     permute_tokens_out=permute_out, sorted_indices_out=sorted_out)
    gm = GmTensors(gm_tensor(tokens, 0), gm_tensor(indices, 1), gm_tensor(permute_out, 2, gm_view(tokens).dtype),
                   gm_tensor(sorted_out, 3), None)
    tmpl = Template(dt_of(tokens.dtype), 1 if result.tiling_key > 4 else 0)
    plan = None
    if result.fields["cols"] == 0:
        # no row bytes to move, but sortedIndices is still the inverse permutation: run the sorts only
        kernel = SORT_ONLY_KERNELS[result.tiling_key]
        plan = tuple(r for r in result.ub_plan if r.pipe != "MoeindexCopyPipe")
    else:
        kernel = KERNELS[result.tiling_key]
    executor = Executor(OP, result, kernel, (MoeTokenPermuteTilingData(*result.fields.values()), gm, tmpl),
                        ("tokens", "indices", "permute_tokens", "sorted_indices", "workspace"),
                        api="aclnnMoeTokenPermuteV2" if v2 else "aclnnMoeTokenPermute", ub_plan=plan,
                        tensors=dict(tokens=tokens, indices=indices, permute_tokens_out=permute_out,
                                     sorted_indices_out=sorted_out, expanded_scale_out=scale_out),
                        bind_workspace=_bind_workspace, writes=(permute_out, sorted_out))
    return result.workspace_size, executor


def _build_regbase(tokens, indices, num_out_tokens, quant_mode, permute_out, sorted_out, scale_out, soc, v2: bool,
                   mx_scale_rule: str):
    """The 950 aclnn bodies after paddedMode (see ops/permute/regbase.py for the chains)."""
    api = "aclnnMoeTokenPermuteV2" if v2 else "aclnnMoeTokenPermute"
    if not v2 and tokens.dtype != _I8:
        # CheckParamsRegbase, then MoeInitRoutingV2 with numOutTokens
        _check_regbase_dtypes(tokens, indices, permute_out, sorted_out, None, QUANT_NONE, False, int8=False)
        return v2_chain(api, OP, tokens, indices, num_out_tokens, permute_out, sorted_out, soc)
    # V1 with int8 tokens (CheckDtypeValidInt8Regbase) or V2 (CheckParamsV2Regbase): MoeInitRoutingV3
    _check_regbase_dtypes(tokens, indices, permute_out, sorted_out, scale_out, quant_mode, v2, int8=True)
    if quant_mode == QUANT_MXFP4_E2M1 and tokens.ndim == 2 and tokens.shape[1] % 2:
        # the aclnn does not check this, but a row of an odd number of FP4 codes does not fill whole bytes: the
        # kernel writes row r at byte r * (H / 2) (rounded down), so neighbouring rows overlap; torch_npu's meta
        # function refuses it, and so does the simulator
        raise ParamInvalidError(f"quant_mode 9 packs two FP4 codes per byte: hidden must be even, got "
                                f"{tokens.shape[1]}")
    if quant_mode == QUANT_MXFP4_E2M1 and mx_scale_rule == "round_scale":
        raise ParamInvalidError("mx_scale_rule 'round_scale' exists for MXFP8 only; MXFP4 (quant_mode 9) has one "
                                "scale rule")
    if mx_scale_rule is None:           # master's rule: round-scale for MXFP8 (MXFP4 ignores the option)
        mx_scale_rule = "round_scale"
    return v3_chain(api, OP, tokens, indices, permute_out, sorted_out, scale_out, quant_mode, soc, mx_scale_rule)


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int) -> tuple:
    """The kernel's user workspace (after the 16 MiB system workspace) as float32 GM."""
    td, gm, tmpl = args
    user = workspace.reshape(-1).view(np.uint8)[LIB_API_WORKSPACE: workspace_size]
    ws = gm_tensor(user[: user.size - user.size % 4].view(np.float32), 4, np.float32)
    return td, gm._replace(workspace=ws), tmpl


def get_workspace_size(tokens, indices, num_out_tokens=0, padded_mode=False, permute_tokens_out=None,
                       sorted_indices_out=None, *, soc="ascend910b"):
    """aclnnMoeTokenPermuteGetWorkspaceSize -> (workspace_size, executor)."""
    soc = get_soc(soc)
    padded_mode = flag("padded_mode", padded_mode)
    if soc.is_regbase and padded_mode:      # the regbase body tests paddedMode first, before the null checks
        raise ParamInvalidError("padded_mode = true is not supported on Ascend 950 (only false)")
    for name, t in (("tokens", tokens), ("indices", indices), ("permute_tokens_out", permute_tokens_out),
                    ("sorted_indices_out", sorted_indices_out)):
        require(name, t)
    return _build(as_input("tokens", tokens), as_input("indices", indices), int_attr("num_out_tokens", num_out_tokens),
                  padded_mode, QUANT_NONE, as_output("permute_tokens_out", permute_tokens_out),
                  as_output("sorted_indices_out", sorted_indices_out), None, soc, False, "floor")


def get_workspace_size_v2(tokens, indices, num_out_tokens=0, padded_mode=False, quant_mode=-1,
                          permute_tokens_out=None, sorted_indices_out=None, expanded_scale_out=None, *,
                          soc="ascend910b", mx_scale_rule=None):
    """aclnnMoeTokenPermuteV2GetWorkspaceSize -> (workspace_size, executor).

    `mx_scale_rule` (simulator option, MXFP8): None (the default) or "round_scale" is the rule of the
    MoeInitRoutingV3 MXFP8 kernel at master 25fb6b92890d (code from the bf16 bits of the block amax:
    ceil(log2(amax / fp8 max)), at least 1); "floor" is the OCP MX v1.0 rule (shared exponent =
    floor(log2 amax) - emax), which master does not do. MXFP4 has master's one rule (the floor on the bf16
    exponent field): None or "floor".
    """
    soc = get_soc(soc)
    for name, t in (("tokens", tokens), ("indices", indices), ("permute_tokens_out", permute_tokens_out),
                    ("sorted_indices_out", sorted_indices_out), ("expanded_scale_out", expanded_scale_out)):
        require(name, t)
    quant_mode = int_attr("quant_mode", quant_mode)
    num_out_tokens = int_attr("num_out_tokens", num_out_tokens)
    padded_mode = flag("padded_mode", padded_mode)
    if soc.is_regbase and padded_mode:      # after the null checks, which V2 makes on every chip
        raise ParamInvalidError("padded_mode = true is not supported on Ascend 950 (only false)")
    return _build(as_input("tokens", tokens), as_input("indices", indices), num_out_tokens, padded_mode, quant_mode,
                  as_output("permute_tokens_out", permute_tokens_out),
                  as_output("sorted_indices_out", sorted_indices_out),
                  as_output("expanded_scale_out", expanded_scale_out), soc, True, mx_scale_rule)


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenPermute: launch the kernel; outputs are filled in place (the sorts keep their ping-pong
    lists in the workspace)."""
    run_executor("aclnnMoeTokenPermute", workspace, workspace_size, executor, stream, check)


def run_v2(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenPermuteV2: as `run`, for an executor of get_workspace_size_v2."""
    run_executor("aclnnMoeTokenPermuteV2", workspace, workspace_size, executor, stream, check)


def allocate_outputs(tokens, indices, num_out_tokens=0, quant_mode=-1, *, soc="ascend910b"):
    """Zeroed (permute_tokens_out, sorted_indices_out, expanded_scale_out) of the shapes and dtypes the
    op writes for these inputs (see moe_token_permute); 161001 / 161002 before allocating for missing or
    invalid arguments."""
    soc = get_soc(soc)
    require("tokens", tokens)
    require("indices", indices)
    t, idx = as_input("tokens", tokens), as_input("indices", indices)
    total = int(np.prod(idx.shape)) if idx.ndim in (1, 2) else 0
    m = effective_num_out_tokens(int_attr("num_out_tokens", num_out_tokens), total)
    quant = int_attr("quant_mode", quant_mode) if soc.is_regbase else QUANT_NONE
    rows = (m, "num_out_tokens")
    slots = [(total, "indices (tokens * topK)")]
    if quant in (QUANT_MXFP8_E5M2, QUANT_MXFP8_E4M3FN, QUANT_MXFP4_E2M1) and t.ndim == 2:
        data_shape, s_shape = _quant_shapes(quant, m, t.shape[1])
        out_dtype = {QUANT_MXFP8_E5M2: _E5M2, QUANT_MXFP8_E4M3FN: _E4M3, QUANT_MXFP4_E2M1: _U8}[quant]
        return (output_array("permute_tokens_out", [rows] + [(d, "tokens") for d in data_shape[1:]], out_dtype),
                output_array("sorted_indices_out", slots, np.int32),
                output_array("expanded_scale_out", [rows] + [(d, "tokens") for d in s_shape[1:]], _E8M0))
    return (output_array("permute_tokens_out", [rows] + [(d, "tokens") for d in t.shape[1:]], t.dtype),
            output_array("sorted_indices_out", slots, np.int32), np.zeros((0,), dtype=np.float32))


def moe_token_permute(tokens, indices, num_out_tokens=0, padded_mode=False, quant_mode=-1, *, soc="ascend910b",
                      mx_scale_rule=None, check=None):
    """Friendly call (allocates the outputs, runs both phases of aclnnMoeTokenPermuteV2).

    Returns (permute_tokens, sorted_indices int32 (N*topK,), expanded_scale). Without quantisation (or on
    A2/A3, where quant_mode is ignored) permute_tokens has the tokens' dtype and shape (M, ...) and
    expanded_scale is a (0,) float32 array; with quant_mode 2 / 3 on ascend950 permute_tokens is
    (M, H) float8_e5m2 / float8_e4m3fn and expanded_scale (M, AlignUp(ceil(H/32), 2)) float8_e8m0fnu;
    with quant_mode 9 permute_tokens is (M, H/2) uint8 (first element in the low nibble) and
    expanded_scale (M, ceil(H/64), 2) float8_e8m0fnu. M = numOutTokens after clamping.
    `check` ("race" / "strict" / "off" / None) runs the kernels in checked mode, as on the aclnn call.
    """
    validate_check(check)
    soc = get_soc(soc)
    outs = allocate_outputs(tokens, indices, num_out_tokens, quant_mode, soc=soc)
    size, executor = get_workspace_size_v2(tokens, indices, num_out_tokens, padded_mode, quant_mode, *outs,
                                           soc=soc, mx_scale_rule=mx_scale_rule)
    run_friendly(run_v2, size, executor, check)
    return outs
