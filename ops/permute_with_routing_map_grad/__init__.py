"""MoeTokenPermuteWithRoutingMapGrad: gradient of the routing-map permute (aclnnMoeTokenPermuteWithRoutingMapGrad).

source: moe/moe_token_permute_with_routing_map_grad/op_host/op_api/aclnn_moe_token_permute_with_routing_map_grad.cpp,
op_api/moe_token_permute_with_routing_map_grad.cpp (the l0 wrapper) @ 25fb6b92890d.

A hand-written composite aclnn. Checks, in the
real order: numExperts / tokensNum <= 0 -> 161002; Gp, sortedIndices or tokensGradOut missing -> 161001; gp given
without a routing map -> 161001; dtypes (Gp bf16 / fp16 / fp32 equal to tokensGradOut; gp of that list, equal to
probsGradOut, equal to Gp unless gp is fp32 with fp32 / bf16 Gp; routing map int8 / bool; sortedIndices int32)
-> 161002; Gp 2-D, routing map 2-D, gp 1-D -> 161002. Empty Gp or tokensGradOut: success, workspace 0, nothing
runs. The kernel's tiling failing (topK > 512 without dropAndPad) -> 161002: the source leaves that status to
the framework and the op's documentation lists 161002 for shapes outside the supported range (_l0_tiling).

The real aclnn does not compare the other shapes; the simulator refuses, with 161002 (the documentation's
"shape not supported"), shapes for which a kernel would address memory outside a tensor: tokensGradOut
(tokens_num, H); sortedIndices (M,); gp (M,); probsGradOut and the routing map (tokens_num, num_experts)
when the probs gradient is computed; without dropAndPad M // (M // tokens_num) == tokens_num; and a routing
map with more ones than gp has values (MaskedScatter would read past gp).

Steps, in the aclnn's order ("kernel" = simulated launch, "host" = NumPy standing in for an l0 op: another
library's; on ascend950 the open-source build takes MoeMaskedScatter and MoeInplaceIndexAddAiCore from moe/3rd/
as arch35 kernels, simulated here, while 910B / 910_93 take MaskedScatter / InplaceIndexAdd from another library):
* always: ZerosLike(tokensGradOut) [host]; ZerosLike(probsGradOut) [host] when gp and probsGradOut are given.
* no dropAndPad: MoeTokenPermuteWithRoutingMapGrad key 0 [kernel G] into the zeros; ViewCopy [host]; with
  probs gradients: Cast(routing map -> bool) [host; int8 maps only: l0op::Cast of a bool map returns it
  unchanged, no launch], Transpose(zeros), Transpose(mask) [host]; MoeMaskedScatter
  [kernel: its arch35 kernel, ops.l0.moe_masked_scatter] on 950, MaskedScatter [host] on 910B / 910_93;
  Transpose, ViewCopy [host].
* dropAndPad: with probs gradients, MoeTokenPermuteWithRoutingMapGrad key 1000 [kernel] into the probs zeros,
  ViewCopy [host]; then the tokens gradient: Sort(sortedIndices viewed as fp32, ascending, stable) [host] +
  MoeInplaceIndexAddWithSorted [kernel] when tokens_num < 2139095040 and Gp is bf16 / fp16 or the
  deterministic switch is on; otherwise l0op::MoeInplaceIndexAddAiCore: on 950 MoeInplaceIndexAdd's arch35
  SIMT / SIMD / SIMD-sort / SIMT-sort kernel [kernel, ops.l0.moe_inplace_index_add; ids repeating five times
  or more take SIMD sort with rows of 128 bytes or more, SIMT sort with shorter rows; the switch never gets
  here: it takes the sorted path], on 910B / 910_93 InplaceIndexAdd of another library [host: fp32
  adds in slot order]; ViewCopy [host]. Every profile (910B, 910_93, 950) takes the sorted path under that condition, as
  the real aclnn does.

Ascend 950 runs the same l0 kernel (the op has no arch35 variant); the simulator uses the same code with the
950 profile's core count and UB.
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import dt_of
from tiling import get_soc
from tiling.moe_token_permute_with_routing_map_grad import FIELDS, TILING_KEY_DROP_PAD
from tiling.moe_token_permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad as _tiling
from tiling.status import ParamInvalidError, ParamNullptrError, TilingError

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
    masked_scatter_rows,
    masked_scatter_work,
    nonzero_mask,
    sort_ids_as_fp32_step,
    transpose_step,
    view_copy_step,
    zeros_like_step,
)
from .._validate import as_input, as_output, check_no_alias, flag, int_attr, output_array, require, routing_map_dtype
from ..common.inplace_index_add_with_sorted import index_add_with_sorted_executor
from ..common.unpermute_gather import gather_template
from ..l0.moe_inplace_index_add import aicore_step
from ..l0.moe_masked_scatter import get_workspace_size as masked_scatter_executor
from .kernel import KERNELS, GmTensors

OP = "MoeTokenPermuteWithRoutingMapGrad"
API = "aclnnMoeTokenPermuteWithRoutingMapGrad"
MAX_SORT_SHAPE_DIM = 2139095040      # 0x7F800000: the fp32 bit pattern of +inf; larger ids do not sort as floats

_BF16, _F16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
_I32 = np.dtype(np.int32)
FLOAT_DTYPES = (_F16, _F32, _BF16)
MIX_TOKEN_DTYPES = (_F32, _BF16)     # Gp dtypes that may pair with an fp32 gp
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenPermuteWithRoutingMapGradTilingData = namedtuple("MoeTokenPermuteWithRoutingMapGradTilingData", FIELDS)
GM_NAMES = ("permuted_token_output_grad", "permuted_probs_output_grad", "sorted_indices", "tokens_grad",
            "probs_grad")


def _names(dtypes) -> str:
    return ", ".join(d.name for d in dtypes)


def _check_dtypes(g, gp, s, rm, out, probs_out) -> None:
    """CheckDtypeValid, in its order (all 161002)."""
    if g.dtype not in FLOAT_DTYPES:
        raise ParamInvalidError(f"permuted_token_output_grad dtype must be one of {_names(FLOAT_DTYPES)}, "
                                f"got {g.dtype}")
    if out.dtype != g.dtype:
        raise ParamInvalidError(f"tokens_grad_out dtype ({out.dtype}) must equal permuted_token_output_grad dtype "
                                f"({g.dtype})")
    if gp is not None:
        if gp.dtype not in FLOAT_DTYPES:
            raise ParamInvalidError(f"permuted_probs_output_grad dtype must be one of {_names(FLOAT_DTYPES)}, "
                                    f"got {gp.dtype}")
        if probs_out is not None and probs_out.dtype != gp.dtype:
            raise ParamInvalidError(f"probs_grad_out dtype ({probs_out.dtype}) must equal permuted_probs_output_grad "
                                    f"dtype ({gp.dtype})")
        if gp.dtype != _F32 and gp.dtype != g.dtype:
            raise ParamInvalidError(f"permuted_probs_output_grad dtype ({gp.dtype}) must equal "
                                    f"permuted_token_output_grad dtype ({g.dtype}), or be float32")
        if gp.dtype == _F32 and g.dtype not in MIX_TOKEN_DTYPES:
            raise ParamInvalidError(f"float32 permuted_probs_output_grad needs float32 or bfloat16 "
                                    f"permuted_token_output_grad, got {g.dtype}")
    routing_map_dtype("routing_map", rm)
    if s.dtype != _I32:
        raise ParamInvalidError(f"sorted_indices dtype must be int32, got {s.dtype}")


def _check_ranks(g, rm, gp) -> None:
    """CheckShapeValid (161002)."""
    if g.ndim != 2:
        raise ParamInvalidError(f"permuted_token_output_grad must be 2-D (rows, hidden), got shape {g.shape}")
    if rm is not None and rm.ndim != 2:
        raise ParamInvalidError(f"routing_map must be 2-D (tokens, experts), got shape {rm.shape}")
    if gp is not None and gp.ndim != 1:
        raise ParamInvalidError(f"permuted_probs_output_grad must be 1-D (rows,), got shape {gp.shape}")


def _shape_error(message: str):
    raise ParamInvalidError(f"{OP}: {message}")


def _check_shapes(g, gp, s, rm, out, probs_out, experts: int, tokens: int, pad: bool, probs_wanted: bool) -> None:
    """The simulator's own checks (see the module docstring): shapes a kernel would overrun."""
    m, h = g.shape
    if s.shape != (m,):
        _shape_error(f"sorted_indices must have shape ({m},) (one entry per permuted row), got {s.shape}")
    if not pad:
        top_k = m // tokens
        if top_k > 0 and m // top_k != tokens:
            _shape_error(f"{m} permuted rows over tokens_num {tokens} give topK {top_k} and {m // top_k} tokens; "
                         f"the kernel would write past tokens_grad_out. Pass tokens_num * topK rows")
    if out.shape != (tokens, h):
        _shape_error(f"tokens_grad_out must have shape (tokens_num, hidden) = {(tokens, h)}, got {out.shape}")
    if gp is not None and gp.shape != (m,):
        _shape_error(f"permuted_probs_output_grad must have shape ({m},), got {gp.shape}")
    if probs_wanted:
        if probs_out.shape != (tokens, experts):
            _shape_error(f"probs_grad_out must have shape (tokens_num, num_experts) = {(tokens, experts)}, "
                         f"got {probs_out.shape}")
        if not pad:
            _check_map_shape(rm, experts, tokens)


def _check_counts(experts: int, tokens: int) -> None:
    """The aclnn's first rule on the two attributes that size the outputs (161002)."""
    if experts <= 0:
        raise ParamInvalidError(f"num_experts must be greater than 0, got {experts}")
    if tokens <= 0:
        raise ParamInvalidError(f"tokens_num must be greater than 0, got {tokens}")


def _check_map_shape(rm, experts: int, tokens: int) -> None:
    """Without dropAndPad the probs gradient is scattered through the routing map: it must be (tokens_num,
    num_experts), the shape of probs_grad_out (161002)."""
    if rm.shape != (tokens, experts):
        _shape_error(f"routing_map must have shape (tokens_num, num_experts) = {(tokens, experts)}, got {rm.shape}")


def _check_scatter_count(rm, gp) -> None:
    ones = int(np.count_nonzero(rm))
    if ones > gp.size:
        _shape_error(f"routing_map has {ones} routed pairs but permuted_probs_output_grad has only {gp.size} values "
                     "(MaskedScatter would read past its source)")


def _l0_tiling(g, gp, s, rm, experts, tokens, pad, soc):
    """The l0 kernel's tiling. Where it fails (topK > 512 without drop-and-pad) the source leaves the status to
    the framework (the l0 wrapper ignores the launcher's result); the op's documentation lists only 161001 and
    161002, the latter for "shapes outside the supported range", so that is the status here."""
    # in drop-and-pad mode the l0 call hands the kernel a (M, 0) tensor of gp's dtype (Gp's without gp)
    first = np.empty((g.shape[0], 0), dtype=g.dtype if gp is None else gp.dtype) if pad else g
    try:
        return _tiling(first, gp, s, rm, experts, tokens, pad, soc=soc)
    except TilingError as e:
        raise ParamInvalidError(f"shape outside the supported range: {e.message}") from None


def _kernel_executor(result, kernel, gm, tmpl, tensors, links) -> Executor:
    td = MoeTokenPermuteWithRoutingMapGradTilingData(*result.fields.values())
    return Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors, index_links=links,
                    ub_advice=_ub_advice(result))


def _ub_advice(result) -> str:
    if result.tiling_key == TILING_KEY_DROP_PAD:
        return "The drop-and-pad kernel needs one 32-byte buffer; any UB holds it."
    f = result.fields
    return (f"Kernel G is sized by the tiling: hidden pieces of {f['hidden_splited_length']} elements, "
            f"{f['tokens_splited_length']} tokens' indices per chunk. A larger ub_size in a custom profile "
            "(tiling.get_soc(..., ub_size=...)) gives longer pieces.")


def _masked_scatter_steps(mask_src, gp, probs_zeros, probs_out, soc) -> list:
    """Cast, Transpose, Transpose, MaskedScatter, Transpose, ViewCopy of the non-pad probs gradient. The scatter is
    l0op::MoeMaskedScatter: on Ascend 950 its arch35 kernel [kernel], elsewhere CANN's MaskedScatter [host]. The
    Cast to bool is a step only for an int8 map: CANN's l0op::Cast returns a tensor that already has the target
    dtype unchanged, launching nothing."""
    n, e = probs_zeros.shape
    zeros_t = np.empty((e, n), dtype=probs_zeros.dtype)
    mask_t = np.empty((e, n), dtype=bool)
    back = np.empty((n, e), dtype=probs_zeros.dtype)
    steps = []
    if mask_src.dtype == np.bool_:
        mask = mask_src         # l0op::Cast to the tensor's own dtype returns it: no launch, no step
    else:
        mask = np.empty((n, e), dtype=bool)
        steps.append(HostStep("l0op::Cast", lambda: nonzero_mask(mask_src, mask), cast_work(mask_src, mask)))
    steps += [transpose_step(probs_zeros, zeros_t), transpose_step(mask, mask_t)]
    if soc.is_regbase:
        scattered = np.empty((e, n), dtype=probs_zeros.dtype)     # the l0 op's AllocTensor
        _, scatter = masked_scatter_executor(zeros_t, mask_t, gp, y_out=scattered, soc=soc)
        return steps + [KernelStep("l0op::MoeMaskedScatter", scatter), transpose_step(scattered, back),
                        view_copy_step(back, probs_out)]

    def masked_scatter():
        ones = int(np.count_nonzero(mask_t))
        if ones > gp.size:      # checked in phase one; the routing map changed since
            _shape_error(f"routing_map has {ones} routed pairs but permuted_probs_output_grad has only {gp.size} "
                         "values")
        masked_scatter_rows(zeros_t, mask_t, gp[:ones])     # row-major over (E, N): expert-major order

    return steps + [HostStep("l0op::MaskedScatter", masked_scatter, masked_scatter_work(zeros_t, mask_t, gp)),
                    transpose_step(zeros_t, back),
                    view_copy_step(back, probs_out)]


def get_workspace_size(permuted_token_output_grad, permuted_probs_output_grad=None, sorted_indices=None,
                       routing_map=None, num_experts=0, tokens_num=0, drop_and_pad=False, tokens_grad_out=None,
                       probs_grad_out=None, *, soc="ascend910b", deterministic=False):
    """aclnnMoeTokenPermuteWithRoutingMapGradGetWorkspaceSize -> (workspace_size, executor).

    `deterministic` is the context's ACL_OPT_DETERMINISTIC switch (default off, as in CANN): with fp32
    gradients in drop-and-pad mode it selects the sorted index-add kernel instead of the AiCore index add.
    """
    soc = get_soc(soc)
    experts = int_attr("num_experts", num_experts)
    tokens = int_attr("tokens_num", tokens_num)
    pad = flag("drop_and_pad", drop_and_pad)
    deterministic = flag("deterministic", deterministic)
    _check_counts(experts, tokens)
    require("permuted_token_output_grad", permuted_token_output_grad)
    require("sorted_indices", sorted_indices)
    require("tokens_grad_out", tokens_grad_out)
    if routing_map is None and permuted_probs_output_grad is not None:
        raise ParamNullptrError("routing_map is required when permuted_probs_output_grad is given (pass both or "
                                "neither)")
    g = as_input("permuted_token_output_grad", permuted_token_output_grad)
    gp = as_input("permuted_probs_output_grad", permuted_probs_output_grad)
    s = as_input("sorted_indices", sorted_indices)
    rm = as_input("routing_map", routing_map)
    out = as_output("tokens_grad_out", tokens_grad_out)
    probs_out = as_output("probs_grad_out", probs_grad_out)
    tensors = dict(permuted_token_output_grad=g, permuted_probs_output_grad=gp, sorted_indices=s, routing_map=rm,
                   tokens_grad_out=out, probs_grad_out=probs_out)
    check_no_alias({k: tensors[k] for k in list(tensors)[:4]}, {"tokens_grad_out": out, "probs_grad_out": probs_out})
    _check_dtypes(g, gp, s, rm, out, probs_out)
    _check_ranks(g, rm, gp)
    if g.size == 0 or out.size == 0:
        return 0, Composite(OP, None, [], api=API, tensors=tensors)

    probs_wanted = gp is not None and probs_out is not None
    _check_shapes(g, gp, s, rm, out, probs_out, experts, tokens, pad, probs_wanted)
    if probs_wanted and not pad:
        _check_scatter_count(rm, gp)
    result = _l0_tiling(g, gp, s, rm, experts, tokens, pad, soc)

    tokens_zeros = np.empty(out.shape, dtype=out.dtype)      # ZerosLike(tokensGradOut), filled at run time
    probs_zeros = np.empty(probs_out.shape, dtype=probs_out.dtype) if probs_wanted else None
    steps = [zeros_like_step(tokens_zeros)] + ([zeros_like_step(probs_zeros)] if probs_wanted else [])
    m, h = g.shape
    if not pad:
        gm = GmTensors(gm_tensor(g, 0), gm_tensor(None, 1, np.uint8), gm_tensor(s, 2, np.int32),
                       gm_tensor(tokens_zeros, 3), gm_tensor(None, 4, np.uint8))
        tmpl = gather_template(dt_of(g.dtype), None, skip_negative=True, used_core_num=result.block_dim)
        kernel = KERNELS[0][g.dtype == _F32] if result.block_dim > 0 else None
        links = (IndexLink("sorted_indices", "permuted_token_output_grad", h, m),)
        steps.append(KernelStep(f"l0op::{OP}", _kernel_executor(result, kernel, gm, tmpl, tensors, links)))
        steps.append(view_copy_step(tokens_zeros, out))
        if probs_wanted:
            steps += _masked_scatter_steps(rm, gp, probs_zeros, probs_out, soc)
    else:
        if probs_wanted:
            gm = GmTensors(gm_tensor(None, 0, np.uint16), gm_tensor(gp, 1), gm_tensor(s, 2, np.int32),
                           gm_tensor(None, 3, np.uint16), gm_tensor(probs_zeros, 4))
            links = (IndexLink("sorted_indices", "probs_grad", experts, tokens),)
            steps.append(KernelStep(f"l0op::{OP}", _kernel_executor(result, KERNELS[TILING_KEY_DROP_PAD], gm, None,
                                                                    tensors, links)))
            steps.append(view_copy_step(probs_zeros, probs_out))
        use_sorted = tokens < MAX_SORT_SHAPE_DIM and (g.dtype in (_BF16, _F16) or deterministic)
        if use_sorted:
            values, order = np.empty(m, dtype=np.int32), np.empty(m, dtype=np.int32)
            steps.append(sort_ids_as_fp32_step(s, values, order))
            add = index_add_with_sorted_executor(tokens_zeros, values, order, g, soc=soc, deterministic=deterministic)
            steps.append(KernelStep("l0op::MoeInplaceIndexAddWithSorted", add))
        else:
            host = index_add_rows_step(tokens_zeros, s, g, lambda k, v: ParamInvalidError(
                f"InplaceIndexAdd: sorted_indices[{k}] = {v} is not a token id in [0, {tokens_zeros.shape[0]})"))
            step = aicore_step(tokens_zeros, s, g, host, soc=soc, deterministic=deterministic)
            steps.append(step)
        steps.append(view_copy_step(tokens_zeros, out))

    workspace = max((st.executor.workspace_size for st in steps if isinstance(st, KernelStep)), default=0)
    return workspace, Composite(OP, result, steps, api=API, tensors=tensors, workspace_size=workspace)


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenPermuteWithRoutingMapGrad: run the steps; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(permuted_token_output_grad, permuted_probs_output_grad, num_experts, tokens_num,
                     routing_map=None, drop_and_pad=False):
    """Zeroed (tokens_grad_out (tokens_num, H) in Gp's dtype, probs_grad_out (tokens_num, num_experts) in gp's
    dtype or None without gp). The aclnn's rules on tokens_num / num_experts (positive; without drop_and_pad
    the routing map's shape when gp is given) and sizes no output can have (2**40) are refused (161002) before
    anything is allocated."""
    experts, tokens = int_attr("num_experts", num_experts), int_attr("tokens_num", tokens_num)
    _check_counts(experts, tokens)
    require("permuted_token_output_grad", permuted_token_output_grad)
    g = as_input("permuted_token_output_grad", permuted_token_output_grad)
    gp = as_input("permuted_probs_output_grad", permuted_probs_output_grad)
    rm = as_input("routing_map", routing_map)
    if gp is not None and rm is not None and g.size and not flag("drop_and_pad", drop_and_pad):
        _check_map_shape(rm, experts, tokens)
    h = g.shape[1] if g.ndim == 2 else 0
    out = output_array("tokens_grad_out", [(tokens, "tokens_num"), (h, "permuted_token_output_grad")], g.dtype)
    probs = None if gp is None else output_array("probs_grad_out", [(tokens, "tokens_num"), (experts, "num_experts")],
                                                 gp.dtype)
    return out, probs


def moe_token_permute_with_routing_map_grad(permuted_tokens_grad, permuted_probs_grad, sorted_indices, routing_map,
                                            num_experts, tokens_num, drop_and_pad=False, *, soc="ascend910b",
                                            deterministic=False, check=None):
    """Friendly call: allocates the outputs, runs both phases.

    Returns (tokens_grad (tokens_num, H) in the dtype of permuted_tokens_grad, probs_grad (tokens_num,
    num_experts) in the dtype of permuted_probs_grad, or None when permuted_probs_grad is None). `check`:
    checked mode of the run, as on the aclnn call.
    """
    validate_check(check)
    soc = get_soc(soc)
    out, probs = allocate_outputs(permuted_tokens_grad, permuted_probs_grad, num_experts, tokens_num, routing_map,
                                  drop_and_pad)
    size, executor = get_workspace_size(permuted_tokens_grad, permuted_probs_grad, sorted_indices, routing_map,
                                        num_experts, tokens_num, drop_and_pad, out, probs, soc=soc,
                                        deterministic=deterministic)
    run_friendly(run, size, executor, check)
    return out, probs
