"""MoeTokenPermuteWithRoutingMap — aclnnMoeTokenPermuteWithRoutingMap (hand-written composite aclnn).

source: moe/moe_token_permute_with_routing_map/op_host/op_api/aclnn_moe_token_permute_with_routing_map.cpp and
op_api/moe_token_permute_with_routing_map.cpp (the l0 wrapper) @ 25fb6b92890d.

Steps, in the real aclnn's order:
1. l0op::Transpose of routingMap (N, E) -> (E, N), and of probs (host steps; Contiguous is implicit: inputs
   are taken C-contiguous).
2. l0op::MoeTokenPermuteWithRoutingMap: the simulated kernel (kernel.py) writes sortedIndices, permuteProbs
   and, without dropAndPad or on ascend950, permuteTokens straight into the caller's outputs.
3. l0op::ViewCopy of sortedIndices, then (with probs) of permuteProbs: listed, though they move nothing here.
4. dropAndPad on ascend910b / 910_93: l0op::GatherV2 of the tokens by the caller's sortedIndices (host step).
5. l0op::ViewCopy of permuteTokens (moves nothing here either).
The pad kernel
   (key 9) is MoeSortMultiLastDimCore<uint8_t> + SyncAll + MoePermuteProb (kernel.pad_kernel). On ascend950
   the real keys 9 / 19 run no MoePermuteProb and need no GatherV2: after the sort (and a SyncAll) they
   gather the probs with the arch35 SIMT Gatherv2SimtTwoDim, then (after another SyncAll) the tokens, with
   Gatherv2SimdTwoDim (key 9) or Gatherv2SimtTwoDim (key 19), straight into permuteTokens
   (kernel.pad_kernel_arch35, gather_arch35.py).

Checks (facts §7.c): 161001 for a missing tokens / routing_map / permute_tokens_out / sorted_indices_out, or
probs without permute_probs_out; 161002 for dtypes (tokens = permute_tokens_out in {fp16, fp32, bf16};
routing map int8 / bool; sorted indices int32; probs = tokens dtype, or fp32 with bf16 tokens; permute_probs_out
= probs dtype), routing map / probs / tokens not 2-D, probs shape != routing map shape, numOutTokens outside
[0, N * E], N or E >= 16777215, permute_tokens_out (and permute_probs_out) dim 0 != AlignDown(numOutTokens,
N or, with dropAndPad, E). Tiling failures (topK > 512, 16777215 or more slots, token counts that
differ) are a failed l0 launch: 561002 (TilingError), as the doc lists for topK > 512. The tiling sees the
l0 operator's own outputs; a caller's output whose shape differs from that l0 result (hidden size, a
2-D probs output, a sorted_indices_out length) makes the l0op::ViewCopy into it fail: 561103
(InnerNullptrError). An empty routing map is a no-op with workspace 0.

Degenerate shapes: with no slot to produce (numOutTokens below N without dropAndPad, or below E with it; an
all-False map with num_out_tokens None) the tiling still runs on the l0's (0, H) outputs and nothing is
launched (ops._framework.launches: every array the kernel writes is empty); with hidden size 0 the kernel runs
without its index copy, so sortedIndices and permuteProbs come out as usual. Simulator note: when
permute_probs_out is given without probs it is ignored (the real aclnn would dereference the null probs).
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import DT_FLOAT16, dt_of, gm_view
from tiling import get_soc
from tiling.moe_token_permute_with_routing_map import (
    FIELDS,
    LIB_API_WORKSPACE,
    PAD_KEY,
    SORT_LIMIT_LENGTH,
    l0_num_out_tokens,
)
from tiling.moe_token_permute_with_routing_map import moe_token_permute_with_routing_map as _tiling
from tiling.status import InnerNullptrError, ParamInvalidError, ParamNullptrError

from .._framework import (
    Composite,
    Executor,
    HostStep,
    IndexLink,
    KernelStep,
    gm_tensor,
    run_executor,
    run_friendly,
    validate_check,
)
from .._host import gather_rows, gather_work, transpose_step, view_copy_step
from .._validate import as_input, as_output, check_no_alias, flag, int_attr, output_array, require, routing_map_dtype
from .kernel import SCATTER_ASSIST, GmTensors, Template, kernel_for, pad_kernel, pad_kernel_arch35

OP = "MoeTokenPermuteWithRoutingMap"
API = "aclnnMoeTokenPermuteWithRoutingMap"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenPermuteWithRoutingMapTilingData = namedtuple("MoeTokenPermuteWithRoutingMapTilingData", FIELDS)

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I32 = np.dtype(np.int32)
FLOAT_DTYPES = (_F16, _F32, _BF16)
GM_NAMES = ("tokens", "routing_map_t", "probs_t", "permute_tokens", "permute_probs", "sorted_indices", "workspace",
            "workspace", "scatter_assist")


def _dtype_checks(tokens, routing_map, probs, permute_out, probs_out, sorted_out) -> None:
    def one_of(name, t, allowed):
        if t.dtype not in allowed:
            raise ParamInvalidError(f"{name} dtype must be one of {[d.name for d in allowed]}, got {t.dtype}")
    one_of("tokens", tokens, FLOAT_DTYPES)
    one_of("permute_tokens_out", permute_out, FLOAT_DTYPES)
    routing_map_dtype("routing_map", routing_map)
    if permute_out.dtype != tokens.dtype:
        raise ParamInvalidError(f"permute_tokens_out dtype {permute_out.dtype} must equal tokens dtype {tokens.dtype}")
    one_of("sorted_indices_out", sorted_out, (_I32,))
    if probs is not None:
        one_of("probs", probs, FLOAT_DTYPES)
        if not (probs.dtype == _F32 and tokens.dtype == _BF16) and probs.dtype != tokens.dtype:
            raise ParamInvalidError(f"probs dtype {probs.dtype} must equal tokens dtype {tokens.dtype} (or be float32 "
                                    "with bfloat16 tokens)")
        one_of("permute_probs_out", probs_out, FLOAT_DTYPES)
        if probs_out.dtype != probs.dtype:
            raise ParamInvalidError(f"permute_probs_out dtype {probs_out.dtype} must equal probs dtype {probs.dtype}")


def _input_shape_checks(tokens, routing_map, probs, num_out_tokens: int) -> None:
    """The aclnn's shape rules on the inputs and numOutTokens (161002): what a friendly call checks before it
    sizes any output from them."""
    if routing_map.ndim != 2:
        raise ParamInvalidError(f"routing_map must be 2-D (tokens, experts), got shape {routing_map.shape}")
    if probs is not None:
        if probs.ndim != 2:
            raise ParamInvalidError(f"probs must be 2-D (tokens, experts), got shape {probs.shape}")
        if probs.shape != routing_map.shape:
            raise ParamInvalidError(f"probs shape {probs.shape} must equal routing_map shape {routing_map.shape}")
    n, e = routing_map.shape
    if tokens.ndim != 2:
        raise ParamInvalidError(f"tokens must be 2-D (tokens, hidden), got shape {tokens.shape}")
    if num_out_tokens < 0 or num_out_tokens > n * e:
        raise ParamInvalidError(f"num_out_tokens must be in [0, tokens * experts = {n * e}], got {num_out_tokens}")
    if n >= SORT_LIMIT_LENGTH or e >= SORT_LIMIT_LENGTH:
        raise ParamInvalidError(f"tokens ({n}) and experts ({e}) must each be below {SORT_LIMIT_LENGTH}")


def _shape_checks(tokens, routing_map, probs, num_out_tokens, drop_and_pad, permute_out, probs_out) -> None:
    _input_shape_checks(tokens, routing_map, probs, num_out_tokens)
    n, e = routing_map.shape
    align = (e if drop_and_pad else n) or 1
    rows = l0_num_out_tokens(num_out_tokens, n, e, drop_and_pad)
    if permute_out.ndim < 1 or permute_out.shape[0] != rows:
        raise ParamInvalidError(f"permute_tokens_out dim 0 must be {rows} (num_out_tokens rounded down to a multiple "
                                f"of {'experts' if drop_and_pad else 'tokens'} = {align}), "
                                f"got shape {permute_out.shape}")
    if probs_out is not None and (probs_out.ndim < 1 or probs_out.shape[0] != rows):
        raise ParamInvalidError(f"permute_probs_out dim 0 must be {rows}, got shape {probs_out.shape}")


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int) -> tuple:
    """The user workspace (after the 16 MiB system part) as float32 and int32 GM over the same bytes."""
    td, gm, tmpl = args
    user = workspace.reshape(-1).view(np.uint8)[LIB_API_WORKSPACE: workspace_size]
    user = user[: user.size - user.size % 4]
    return td, gm._replace(ws_f32=GlobalTensor(user.view(np.float32), 6, 0),
                           ws_i32=GlobalTensor(user.view(np.int32), 7, 0)), tmpl


def get_workspace_size(tokens, routing_map, probs=None, num_out_tokens=0, drop_and_pad=False, permute_tokens_out=None,
                       permute_probs_out=None, sorted_indices_out=None, *, soc="ascend910b"):
    """aclnnMoeTokenPermuteWithRoutingMapGetWorkspaceSize -> (workspace_size, executor).

    tokens (N, H) fp16 / bf16 / fp32; routing_map (N, E) bool / int8; probs (N, E) or None; num_out_tokens
    (int64, required); outputs: permute_tokens_out (rows, H), permute_probs_out (rows,) (required with probs),
    sorted_indices_out (rows,) int32, rows = AlignDown(num_out_tokens, N) (E with drop_and_pad)."""
    soc = get_soc(soc)
    for name, t in (("tokens", tokens), ("routing_map", routing_map), ("permute_tokens_out", permute_tokens_out),
                    ("sorted_indices_out", sorted_indices_out)):
        require(name, t)
    if probs is not None and permute_probs_out is None:
        raise ParamNullptrError("permute_probs_out is required when probs is given")
    num_out_tokens = int_attr("num_out_tokens", num_out_tokens)
    drop_and_pad = flag("drop_and_pad", drop_and_pad)
    x, rm, p = as_input("tokens", tokens), as_input("routing_map", routing_map), as_input("probs", probs)
    out_t = as_output("permute_tokens_out", permute_tokens_out)
    out_p = as_output("permute_probs_out", permute_probs_out) if p is not None else None
    out_s = as_output("sorted_indices_out", sorted_indices_out)
    _dtype_checks(x, rm, p, out_t, out_p, out_s)
    _shape_checks(x, rm, p, num_out_tokens, drop_and_pad, out_t, out_p)
    tensors = dict(tokens=x, routing_map=rm, probs=p, permute_tokens_out=out_t, permute_probs_out=out_p,
                   sorted_indices_out=out_s)
    check_no_alias({"tokens": x, "routing_map": rm, "probs": p},
                   {"permute_tokens_out": out_t, "permute_probs_out": out_p, "sorted_indices_out": out_s})
    if rm.size == 0:
        return 0, Composite(OP, None, [], api=API, tensors=tensors)
    n, e = rm.shape
    # the l0 operator allocates its own outputs (rows = AlignDown(numOutTokens, N or E)) and the tiling sees
    # those; the aclnn then ViewCopies them into the caller's (permuteTokens in pad mode comes from GatherV2)
    result = _tiling(x, rm, p, num_out_tokens, drop_and_pad, soc=soc)
    rows = result.fields["top_k"] * n if not drop_and_pad else result.fields["capacity"] * e
    _view_copy_check("sorted_indices_out", out_s, (rows,))
    if p is not None:
        _view_copy_check("permute_probs_out", out_p, (rows,))
    _view_copy_check("permute_tokens_out", out_t, (rows, x.shape[1]))
    # the simulated kernel writes the caller's arrays (the ViewCopy steps then move nothing and are not listed);
    # in pad mode off ascend950 it writes no tokens (GatherV2 does)
    gathers_in_kernel = not drop_and_pad or soc.is_regbase
    kernel_tokens_out = out_t if gathers_in_kernel else np.zeros((0, 0), dtype=x.dtype)
    rm_t = np.empty((e, n), dtype=np.uint8)
    p_t = np.empty((e, n), dtype=p.dtype) if p is not None else None
    steps = [transpose_step(rm.view(np.uint8), rm_t)]
    if p is not None:
        steps.append(transpose_step(p, p_t))
    td = MoeTokenPermuteWithRoutingMapTilingData(*result.fields.values())
    assist = SCATTER_ASSIST
    gm = GmTensors(gm_tensor(x, 0), GlobalTensor(rm_t.reshape(-1), 1, 0), gm_tensor(p_t, 2),
                   gm_tensor(kernel_tokens_out, 3, gm_view(x).dtype), gm_tensor(out_p, 4), gm_tensor(out_s, 5),
                   None, None, GlobalTensor(assist, 8, 0))
    tmpl = Template(dt_of(x.dtype), dt_of(p.dtype) if p is not None else DT_FLOAT16, int(p is not None))
    plan = None
    if drop_and_pad and soc.is_regbase:
        kernel = pad_kernel_arch35(p is not None, result.tiling_key == PAD_KEY)
    elif drop_and_pad:
        kernel = pad_kernel(p is not None)
    else:
        # hidden size 0: no row bytes to move, sortedIndices and permuteProbs still come out (as in MoeTokenPermute)
        copy_rows = td.cols > 0
        kernel = kernel_for(result.tiling_key, tuple(r.name for r in result.ub_plan if r.pipe == "sortPipe"),
                            copy_rows)
        if not copy_rows:
            plan = tuple(r for r in result.ub_plan if r.pipe != "MoeindexCopyPipe")
    executor = Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors,
                        bind_workspace=_bind_workspace, ub_advice="a smaller hidden size or fewer tokens per core",
                        index_links=(IndexLink("sorted_indices_out", "permute_tokens", td.cols, out_t.shape[0]),),
                        ub_plan=plan, writes=(kernel_tokens_out, out_p, out_s))
    steps.append(KernelStep(f"l0op::{OP}", executor))
    # the l0 results go to the caller's outputs by ViewCopy, sortedIndices first (the GatherV2 of the pad mode off
    # ascend950 reads the caller's sorted_indices_out); they move nothing here (the kernel wrote the caller's arrays)
    steps.append(view_copy_step(out_s, out_s))
    if p is not None:
        steps.append(view_copy_step(out_p, out_p))
    if not gathers_in_kernel:
        steps.append(HostStep("l0op::GatherV2", lambda: gather_rows(x, out_s, out_t), gather_work(x, out_s, out_t)))
    steps.append(view_copy_step(out_t, out_t))
    return result.workspace_size, Composite(OP, result, steps, api=API, tensors=tensors,
                                            workspace_size=result.workspace_size)


def _view_copy_check(name: str, t: np.ndarray, shape: tuple) -> None:
    """l0op::ViewCopy of the l0 result into the caller's output needs the same shape; else it returns nullptr,
    which the aclnn reports as 561103."""
    if t.shape != tuple(shape):
        raise InnerNullptrError(f"{API}: l0op::ViewCopy into {name} fails: the l0 result has shape {tuple(shape)}, "
                                f"{name} has shape {t.shape}")


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenPermuteWithRoutingMap: run the steps; outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False):
    """Zeroed (permute_tokens_out, permute_probs_out or None, sorted_indices_out) for these inputs, sized as the
    l0 operator sizes its own: rows = AlignDown(numOutTokens, N, or E with drop_and_pad); num_out_tokens None =
    every routed slot (N * topK, topK = the most ones in a row) or, with drop_and_pad, N * E. A row count no
    output can have (num_out_tokens -1, 2**62) is refused (161002) before anything is allocated."""
    require("tokens", tokens)
    require("routing_map", routing_map)
    x, rm, p = as_input("tokens", tokens), as_input("routing_map", routing_map), as_input("probs", probs)
    drop_and_pad = flag("drop_and_pad", drop_and_pad)
    m = resolve_num_out_tokens(rm, num_out_tokens, drop_and_pad)
    _input_shape_checks(x, rm, p, m)
    n, e = rm.shape
    rows = (l0_num_out_tokens(m, n, e, drop_and_pad), "num_out_tokens")
    probs_out = output_array("permute_probs_out", [rows], p.dtype) if p is not None else None
    return (output_array("permute_tokens_out", [rows] + [(d, "tokens") for d in x.shape[1:]], x.dtype), probs_out,
            output_array("sorted_indices_out", [rows], np.int32))


def resolve_num_out_tokens(routing_map, num_out_tokens, drop_and_pad) -> int:
    """num_out_tokens as an int64 attribute; None = every routed slot (see allocate_outputs)."""
    if num_out_tokens is not None:
        return int_attr("num_out_tokens", num_out_tokens)
    rm = as_input("routing_map", routing_map)
    if rm.ndim != 2 or rm.size == 0:
        return 0
    if drop_and_pad:
        return rm.shape[0] * rm.shape[1]
    return rm.shape[0] * int((rm != 0).sum(axis=1).max())


def moe_token_permute_with_routing_map(tokens, routing_map, probs=None, num_out_tokens=None, drop_and_pad=False, *,
                                       soc="ascend910b", check=None):
    """Friendly call: (permute_tokens, permute_probs or None, sorted_indices). num_out_tokens None means every
    routed slot (N * topK, topK = the most experts any token has). `check`: checked mode of the run, as on the
    aclnn call."""
    validate_check(check)
    soc = get_soc(soc)
    require("routing_map", routing_map)
    m = resolve_num_out_tokens(routing_map, num_out_tokens, drop_and_pad)
    permute_out, probs_out, sorted_out = allocate_outputs(tokens, routing_map, probs, m, drop_and_pad)
    size, executor = get_workspace_size(tokens, routing_map, probs, m, drop_and_pad, permute_out, probs_out,
                                        sorted_out, soc=soc)
    run_friendly(run, size, executor, check)
    return permute_out, probs_out, sorted_out
