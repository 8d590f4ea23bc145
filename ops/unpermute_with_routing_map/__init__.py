"""MoeTokenUnpermuteWithRoutingMap: the routing-map unpermute (combine) of a MoE layer.

source: moe/moe_token_unpermute_with_routing_map/op_host/op_api/aclnn_moe_token_unpermute_with_routing_map.cpp,
op_api/moe_token_unpermute_with_routing_map.cpp (the l0), op_host/moe_token_unpermute_with_routing_map_def.cpp,
moe/3rd/moe_inplace_index_add_with_sorted/op_host/op_api/moe_inplace_index_add_with_sorted.cpp and
moe/3rd/moe_inplace_index_add/op_host/op_api/moe_inplace_index_add.cpp @ 25fb6b92890d.

The aclnn is hand-written and composite (op_api/aclnn_moe_token_unpermute_with_routing_map.cpp): it
checks its arguments (missing permuted_tokens / sorted_indices, or neither probs nor restore_shape -> 161001;
dtypes and ranks -> 161002), then chains l0 operators. Any l0 operator that cannot be built returns nullptr,
which the aclnn reports as 561103: the l0 MoeTokenUnpermuteWithRoutingMap without a token count
(restore_shape not of length 2 and no probs), its tiling failing (topK > 512, probs not 2-D: the
documentation lists 561103 for these), a Reshape / ViewCopy between shapes that do not match, or
MoeInplaceIndexAddWithSorted rejecting its operands.

Steps of one run (`executor.report` lists them), in the real aclnn's order:

* empty sorted_indices, or not padded with empty permuted_tokens: ZerosLike + ViewCopy of the four outputs.
* not padded: the simulated kernel (key 1 with probs: masked select of the token-major probs by the routing
  map -> permuteProbs, SyncAll, kernel G weighted by them; key 0: kernel G alone), then ViewCopy of
  unpermuted_tokens and (with probs) permute_probs. out_index / permute_token_id are not written.
* padded: with probs the simulated kernel (key 1000, permuteProbs[i] = probs[S[i], i / capacity]) and
  Mul(permuted_tokens, permuteProbs[:, None]); ZerosLike(unpermuted_tokens) (+ Cast to FP32 for BF16 tokens
  with FP32 probs); Sort of S viewed as FP32 bits (ascending, stable) -> permute_token_id (values) and
  out_index (positions); MoeInplaceIndexAddWithSorted (a simulated kernel) when the chip is 910B / 910_93 /
  950, the token count is below 2139095040 and the accumulator is BF16 / FP16 or the deterministic switch
  is on (910B / 910_93 only); otherwise l0op::MoeInplaceIndexAddAiCore: on 950 MoeInplaceIndexAdd's arch35
  SIMT / SIMD / SIMD-sort / SIMT-sort kernel, or with the deterministic switch its deterministic template's
  kernel (ops.l0.moe_inplace_index_add; the deterministic id split, 32 columns or fewer, adds nothing), on
  910B / 910_93 InplaceIndexAdd of another CANN library (a host step, fp32 adds in slot order); then ViewCopy of
  permute_probs, out_index, permute_token_id, the Cast back to BF16, and ViewCopy of unpermuted_tokens.

Host steps (NumPy): ZerosLike, Cast, Mul, Sort, InplaceIndexAdd (AiCore, where not simulated), ViewCopy. Where an l0
result has the caller's shape and the caller's output is C-contiguous (always, see ops._validate.as_output), the
simulator lets the l0 operator write the caller's array and the ViewCopy step moves nothing.
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim import OutOfBoundsError, ParamRangeError
from ascend_sim.dtypes import dt_of, gm_view
from tiling import get_soc
from tiling.moe_token_unpermute_with_routing_map import FIELDS, KEY_PAD
from tiling.moe_token_unpermute_with_routing_map import moe_token_unpermute_with_routing_map as _tiling
from tiling.status import InnerNullptrError, ParamInvalidError, ParamNullptrError, TilingError

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
from .._host import (
    cast_work,
    index_add_rows_step,
    mul_rows,
    mul_work,
    round_to_half,
    sort_ids_as_fp32_step,
    view_copy_step,
    zeros_like_step,
)
from .._validate import as_input, as_output, check_no_alias, flag, int_list, output_array, require, routing_map_dtype
from ..common.inplace_index_add_with_sorted import index_add_with_sorted_executor
from ..l0.moe_inplace_index_add import aicore_step
from .kernel import GmTensors, Template, kernel_for

OP = "MoeTokenUnpermuteWithRoutingMap"
API = "aclnnMoeTokenUnpermuteWithRoutingMap"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenUnpermuteWithRoutingMapTilingData = namedtuple("MoeTokenUnpermuteWithRoutingMapTilingData", FIELDS)
TilingData = MoeTokenUnpermuteWithRoutingMapTilingData

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I32 = np.dtype(np.int32)
TOKEN_DTYPES = (_F16, _F32, _BF16)
MAX_SORT_ROWS = 2139095040      # the FP32 bit pattern of +inf: ids from here on cannot be sorted as floats
GM_NAMES = ("permuted_tokens", "sorted_indices", "routing_map", "probs", "unpermuted_tokens", "permute_probs",
            "workspace")
_OUTPUT_NAMES = ("unpermuted_tokens", "out_index", "permute_token_id", "permute_probs")


def _l0_fail(message: str):
    raise InnerNullptrError(f"{OP}: {message}")


# --- aclnn checks (CheckParams) -------------------------------------------------------------------------------
def _check_dtypes(p, s, rm, pr, out, out_index, token_id, out_probs) -> None:
    """CheckDtypeValid (161002). The real aclnn only warns for a routing map outside int8 / uint8 / bool (and
    accepts uint8 silently), then launches the l0 op, whose OpDef has bool / int8 only and whose wrapper
    discards the launcher's status: what comes back is not defined by the source. The simulator refuses
    every dtype but bool / int8 here instead (a wider map would be read as a byte mask of the wrong length)."""
    def bad(name, t, want):
        raise ParamInvalidError(f"{name} dtype must be {want}, got {t.dtype}")
    if p.dtype not in TOKEN_DTYPES:
        bad("permuted_tokens", p, "float16, float32 or bfloat16")
    if s.dtype != _I32:
        bad("sorted_indices", s, "int32")
    routing_map_dtype("routing_map", rm)
    if pr is not None:
        if pr.dtype not in TOKEN_DTYPES:
            bad("probs", pr, "float16, float32 or bfloat16")
        if pr.dtype != p.dtype and not (pr.dtype == _F32 and p.dtype == _BF16):
            raise ParamInvalidError(f"probs dtype ({pr.dtype}) must equal the permuted_tokens dtype ({p.dtype}), or "
                                    "be float32 with bfloat16 permuted_tokens")
        if out_probs is not None and out_probs.dtype != pr.dtype:
            bad("permute_probs", out_probs, f"the probs dtype ({pr.dtype})")
    if out is not None and out.dtype != p.dtype:
        bad("unpermuted_tokens", out, f"the permuted_tokens dtype ({p.dtype})")
    for name, t in (("out_index", out_index), ("permute_token_id", token_id)):
        if t is not None and t.dtype != s.dtype:
            bad(name, t, f"the sorted_indices dtype ({s.dtype})")


def _check_shapes(p, s, out) -> None:
    """CheckShapeValid: 161002 (a routing map that is not 2-D or differs from probs only warns)."""
    for name, t, ndim in (("permuted_tokens", p, 2), ("sorted_indices", s, 1), ("unpermuted_tokens", out, 2)):
        if t.ndim != ndim:
            raise ParamInvalidError(f"{name} must be {ndim}-D, got shape {t.shape}")


def _view_copy_target(name: str, t, shape) -> np.ndarray:
    """l0op::ViewCopy into the caller's output: it must exist and have the l0 result's shape (else 561103)."""
    if t is None:
        _l0_fail(f"l0op::ViewCopy into {name} fails: {name} is None")
    if t.shape != tuple(shape):
        _l0_fail(f"l0op::ViewCopy into {name} fails: the result has shape {tuple(shape)}, {name} has {t.shape}")
    return t


# --- host steps -----------------------------------------------------------------------------------------------
def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int, lib_bytes: int) -> tuple:
    """The masked select's counts live in the user workspace, after the system workspace."""
    td, gm, tmpl = args
    user = workspace.reshape(-1).view(np.uint8)[lib_bytes: workspace_size]
    return td, gm._replace(workspace=gm_tensor(user[: user.size - user.size % 4].view(np.int32), 6, np.int32)), tmpl


# --- phase one ------------------------------------------------------------------------------------------------
def get_workspace_size(permuted_tokens, sorted_indices, routing_map=None, probs=None, padded_mode=False,
                       restore_shape=None, unpermuted_tokens=None, out_index=None, permute_token_id=None,
                       permute_probs=None, *, soc="ascend910b", deterministic=False):
    """aclnnMoeTokenUnpermuteWithRoutingMapGetWorkspaceSize -> (workspace_size, executor).

    permuted_tokens (R, H) fp16/bf16/fp32; sorted_indices (L,) int32 (not padded: token-major slot -> permuted row,
    -1 or >= R skipped; padded: the token id of each permuted row); routing_map (N, E) bool / int8;
    probs (N, E) of the token dtype (or fp32 with bf16 tokens); restore_shape (N, H).
    Outputs (filled in place): unpermuted_tokens (N, H) token dtype; out_index, permute_token_id (L,) int32;
    permute_probs (L,) probs dtype. deterministic: the context's ACL_OPT_DETERMINISTIC switch (padded mode,
    fp32 accumulators on 910B / 910_93).
    """
    soc = get_soc(soc)
    padded_mode = flag("padded_mode", padded_mode)
    deterministic = flag("deterministic", deterministic)
    restore_shape = int_list("restore_shape", restore_shape)
    require("permuted_tokens", permuted_tokens)
    require("sorted_indices", sorted_indices)
    if probs is None and restore_shape is None:
        raise ParamNullptrError("probs and restore_shape must not both be None (one of them gives the token count)")
    p, s = as_input("permuted_tokens", permuted_tokens), as_input("sorted_indices", sorted_indices)
    rm, pr = as_input("routing_map", routing_map), as_input("probs", probs)
    outs = dict(zip(_OUTPUT_NAMES, (as_output(n, t) for n, t in zip(
        _OUTPUT_NAMES, (unpermuted_tokens, out_index, permute_token_id, permute_probs), strict=True)), strict=True))
    out, oi, tid, opp = outs.values()
    ins = dict(permuted_tokens=p, sorted_indices=s, routing_map=rm, probs=pr)
    check_no_alias(ins, outs)
    _check_dtypes(p, s, rm, pr, out, oi, tid, opp)
    # CheckDtypeValid skips a missing unpermuted_tokens; CheckShapeValid then dereferences it (undefined on the
    # chip): 161001 here, after the dtype checks as in the real order
    require("unpermuted_tokens", out)
    _check_shapes(p, s, out)
    tensors = {**ins, **outs}
    mixed = pr is not None and pr.dtype == _F32 and p.dtype == _BF16

    if s.size == 0 or (not padded_mode and p.size == 0):
        steps = []
        for name, t in outs.items():
            target = _view_copy_target(name, t, t.shape if t is not None else ())
            steps += [zeros_like_step(target), view_copy_step(target, target)]
        return 0, Composite(OP, None, steps, api=API, tensors=tensors, workspace_size=0)

    l0 = None
    if pr is not None or not padded_mode:
        l0 = _l0_executor(p, s, rm, pr, padded_mode, restore_shape, out, soc, tensors)
    if not padded_mode:
        steps = [KernelStep(f"l0op::{OP}", l0.executor), view_copy_step(l0.unpermuted, out)]
        if opp is not None:
            # without probs the l0 hands back a (0,) permuteProbs: copying it into a non-empty output fails
            target = _view_copy_target("permute_probs", opp, s.shape if pr is not None else (0,))
            steps.append(view_copy_step(l0.permute_probs, target) if pr is not None else view_copy_step(target, target))
        return l0.workspace, Composite(OP, l0.executor.tiling, steps, api=API, tensors=tensors,
                                       workspace_size=l0.workspace)
    return _padded(p, s, pr, out, oi, tid, opp, l0, mixed, soc, deterministic, tensors)


L0 = namedtuple("L0", ["executor", "unpermuted", "permute_probs", "workspace"])


def _l0_executor(p, s, rm, pr, padded_mode, restore_shape, out, soc, tensors) -> L0:
    """l0op::MoeTokenUnpermuteWithRoutingMap: its output shapes, tiling and the simulated launch."""
    num_tokens = restore_shape[0] if restore_shape is not None and len(restore_shape) == 2 else -1
    if pr is not None:
        num_tokens = pr.shape[0] if pr.ndim >= 1 else 0
    if num_tokens == -1:
        _l0_fail("cannot get num_tokens: restore_shape must have 2 elements when probs is None, got "
                 f"{list(restore_shape)}")
    try:
        result = _tiling(p, s, rm, pr, padded_mode, restore_shape, soc=soc)
    except TilingError as e:
        _l0_fail(f"the l0 operator's tiling fails (561103 in the documentation): {e.message}")
    # the l0 outputs: unpermutedTokens (num_tokens, H) is the caller's array (its ViewCopy target) when shapes
    # match; permuteProbs (L,) in the probs dtype is the l0's own tensor
    if padded_mode:
        unpermuted = None
    else:
        unpermuted = _view_copy_target("unpermuted_tokens", out, (num_tokens, p.shape[1]))
    permute_probs = np.zeros(s.shape, dtype=pr.dtype) if pr is not None else None
    token_t = dt_of(p.dtype)
    tmpl = Template(token_t, dt_of(pr.dtype) if pr is not None else token_t, int(pr is not None))
    rm_gm = gm_tensor(rm, 2, np.uint8) if rm is not None else gm_tensor(None, 2, np.uint8)
    gm = GmTensors(gm_tensor(p, 0), gm_tensor(s, 1, np.int32), rm_gm, gm_tensor(pr, 3, gm_view(p).dtype),
                   gm_tensor(unpermuted, 4, gm_view(p).dtype), gm_tensor(permute_probs, 5, np.uint16),
                   gm_tensor(None, 6, np.int32))
    td = TilingData(*result.fields.values())
    key = result.tiling_key
    if key == KEY_PAD and (result.fields["num_tokens_each_front_core"] == 0
                           or (result.fields["tail_core"] and result.fields["num_tokens_each_tail_core"] == 0)):
        raise ParamRangeError(f"{OP} tilingKey 1000: len(sorted_indices) = {s.shape[0]} gives capacity "
                              f"{result.fields['capacity']} for {result.fields['num_experts']} experts, so a core "
                              "has no probs to gather; its loop count 0 - 1 wraps to 2**64 - 1 on the device "
                              "(the kernel would not finish)", op=OP, tiling_key=key)
    tensors = dict(tensors, permute_probs=permute_probs)
    experts = pr.shape[1] if pr is not None and pr.ndim == 2 else 1
    links = (IndexLink("sorted_indices", "permuted_tokens", p.shape[1], p.shape[0]),
             IndexLink("sorted_indices", "probs", experts, pr.shape[0] if pr is not None else 0))
    lib = soc.lib_api_workspace
    executor = Executor(OP, result, kernel_for(key, p.dtype == _F32, pr is not None and pr.dtype == _F32),
                        (td, gm, tmpl), GM_NAMES, tensors=tensors, ub_advice=_ub_advice(result),
                        index_links=links,
                        bind_workspace=(lambda a, w, n: _bind_workspace(a, w, n, lib)) if key == 1 else None)
    return L0(executor, unpermuted, permute_probs, result.workspace_size)


def _padded(p, s, pr, out, oi, tid, opp, l0, mixed, soc, deterministic, tensors):
    """The padded-mode chain of l0 operators (see the module docstring)."""
    steps = []
    source = p
    if l0 is not None:
        steps.append(KernelStep(f"l0op::{OP}", l0.executor))
        if p.size:
            if s.shape[0] != p.shape[0]:
                _l0_fail(f"l0op::Reshape of permuteProbs ({s.shape[0]} elements, one per sorted index) to "
                         f"({p.shape[0]}, 1) for the Mul with permuted_tokens fails")
            source = np.empty(p.shape, dtype=_F32 if mixed else p.dtype)
            pp = l0.permute_probs

            # the product in fp32, kept as fp32 (mixed) or rounded once to the tokens' dtype
            steps.append(HostStep("l0op::Mul", lambda source=source, pp=pp: mul_rows(p, pp, source),
                                  mul_work(p, pp, source)))
    var = np.empty(out.shape, dtype=_F32) if mixed else out
    steps.append(zeros_like_step(var))
    if mixed:
        # Cast of zeros to FP32: var is already FP32 zeros here, the chip's Cast still runs over them
        steps.append(HostStep("l0op::Cast", lambda: None, cast_work(out, var)))
    values = np.empty(s.shape, dtype=np.int32)
    positions = np.empty(s.shape, dtype=np.int32)
    steps.append(sort_ids_as_fp32_step(s, values, positions))
    workspace = l0.workspace if l0 is not None else 0
    if p.size:
        use_new_op = out.shape[0] < MAX_SORT_ROWS and (
            var.dtype in (_BF16, _F16) or (deterministic and not soc.is_regbase))
        if use_new_op:
            try:
                # its tiling reads the context's switch itself (fp32 var: key 6 instead of 1); on 950 only bf16 /
                # fp16 var get here, whose keys do not depend on it
                add = index_add_with_sorted_executor(var, values, positions, source, soc=soc,
                                                     deterministic=deterministic)
            except InnerNullptrError as e:
                _l0_fail(f"l0op::MoeInplaceIndexAddWithSorted: {e.message}")
            steps.append(KernelStep("l0op::MoeInplaceIndexAddWithSorted", add))
            workspace = max(workspace, add.workspace_size)
        else:
            if var.shape[1:] != source.shape[1:]:
                _l0_fail(f"l0op::MoeInplaceIndexAddAiCore: unpermuted_tokens rows ({var.shape[1]}) and permuted_tokens "
                         f"rows ({source.shape[1]}) differ in length")
            if source.shape[0] < s.shape[0]:
                _l0_fail(f"l0op::MoeInplaceIndexAddAiCore: {s.shape[0]} indices for {source.shape[0]} source rows")
            host = index_add_rows_step(var, s, source, lambda k, v: OutOfBoundsError(
                f"InplaceIndexAdd (host step): sorted_indices[{k}] = {v} addresses no row of unpermuted_tokens "
                f"(rows 0 .. {var.shape[0] - 1})", op=OP))
            add = aicore_step(var, s, source, host, soc=soc, deterministic=deterministic)
            steps.append(add)
            if isinstance(add, KernelStep):
                workspace = max(workspace, add.executor.workspace_size)
    if l0 is not None:
        steps.append(view_copy_step(l0.permute_probs, _view_copy_target("permute_probs", opp, s.shape)))
    steps.append(view_copy_step(positions, _view_copy_target("out_index", oi, s.shape)))
    steps.append(view_copy_step(values, _view_copy_target("permute_token_id", tid, s.shape)))
    if mixed:
        steps.append(HostStep("l0op::Cast", lambda: round_to_half(var, out), cast_work(var, out)))   # half to even
    steps.append(view_copy_step(out, out))
    tiling = l0.executor.tiling if l0 is not None else None
    return workspace, Composite(OP, tiling, steps, api=API, tensors=tensors, workspace_size=workspace, soc=soc)


def _ub_advice(result) -> str:
    f = result.fields
    if result.tiling_key == KEY_PAD:
        return (f"tilingKey 1000 gathers up to {f['num_tokens_each_front_core']} probs per core in one UB buffer; "
                "more cores (tiling.get_soc(..., aiv_num=...)) or fewer sorted indices make it smaller.")
    return (f"Kernel G holds hidden pieces of {f['hidden_splited_length']} elements ({f['buffer_num']} input "
            f"buffers) and {f['tokens_splited_length']} tokens' indices/probs; a larger ub_size in a custom profile "
            "(tiling.get_soc(..., ub_size=...)) gives longer pieces.")


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenUnpermuteWithRoutingMap: run the steps of phase one; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(permuted_tokens, sorted_indices, routing_map=None, probs=None, padded_mode=False,
                     restore_shape=None):
    """Zero-filled (unpermuted_tokens, out_index, permute_token_id, permute_probs or None) of the shapes the op
    writes: unpermuted (N, H) with N = probs.dim0, else restore_shape[0] (restore_shape[0] in padded mode
    whenever it has two elements); the others (L,). A restore_shape no output can have ([-1, 64],
    [2**40, 64]) is refused (161002) before anything is allocated."""
    require("permuted_tokens", permuted_tokens)
    require("sorted_indices", sorted_indices)
    p, s = as_input("permuted_tokens", permuted_tokens), as_input("sorted_indices", sorted_indices)
    as_input("routing_map", routing_map)
    pr = as_input("probs", probs)
    padded_mode = flag("padded_mode", padded_mode)
    h = p.shape[1] if p.ndim == 2 else 0
    rs = int_list("restore_shape", restore_shape)
    if pr is not None and pr.ndim >= 1 and not (padded_mode and rs is not None and len(rs) == 2):
        tokens = (pr.shape[0], "probs")
    else:
        tokens = (rs[0] if rs else 0, "restore_shape[0]")
    slots = [(s.shape[0] if s.ndim == 1 else 0, "sorted_indices")]
    out = output_array("unpermuted_tokens", [tokens, (h, "permuted_tokens")], p.dtype)
    out_index = output_array("out_index", slots, np.int32)
    token_id = output_array("permute_token_id", slots, np.int32)
    pp = output_array("permute_probs", slots, pr.dtype) if pr is not None else None
    return out, out_index, token_id, pp


def moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, routing_map=None, probs=None,
                                         padded_mode=False, restore_shape=None, *, soc="ascend910b", check=None):
    """Friendly call: allocates the outputs, runs both phases.

    Returns (unpermuted_tokens (N, H) token dtype, out_index (L,) int32, permute_token_id (L,) int32,
    permute_probs (L,) probs dtype or None). Not padded, out_index and permute_token_id are not written (zeros).
    `check`: checked mode of the run, as on the aclnn call.
    """
    validate_check(check)
    soc = get_soc(soc)
    outs = allocate_outputs(permuted_tokens, sorted_indices, routing_map, probs, padded_mode, restore_shape)
    size, executor = get_workspace_size(permuted_tokens, sorted_indices, routing_map, probs, padded_mode,
                                        restore_shape, *outs, soc=soc)
    run_friendly(run, size, executor, check)
    return outs
