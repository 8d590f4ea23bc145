"""MoeTokenUnpermuteWithRoutingMapGrad: gradient of the routing-map unpermute.

source: moe/moe_token_unpermute_with_routing_map_grad/op_host/moe_token_unpermute_with_routing_map_grad_def.cpp (the
OpDef its auto-generated aclnn checks; master has no op_api/ for it) and
docs/aclnnMoeTokenUnpermuteWithRoutingMapGrad.md (the status table) @ 25fb6b92890d. The OpDef gives ascend910b / 910_93
the membase binary (kernel.py) and ascend950
the regbase one, moe_token_unpermute_with_routing_map_grad_apt (arch35.py).

aclnn entry (auto-generated "inner" aclnn in CANN): null required tensor -> 161001,
dtype combination outside the OpDef columns -> 161002, tiling failure -> 561002.
Shape relations the documentation requires but the tiling does not read (output shapes,
routing map / probs / permuted tokens against the gradients) are checked here and give
561002 as the documentation's error table says ("input or output shape does not meet
the requirements"). With dropAndPad and probs, slots need an expert column (slot j belongs to expert
j // capacity, capacity = slots / experts) and a hidden size above 0 (keys 11 / 111 reduce each slot's
per-piece partial sums, and hidden 0 leaves none): both refused with 561002 rather than a kernel reading
past its buffers.
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import DT_FLOAT
from tiling import get_soc
from tiling.moe_token_unpermute_with_routing_map_grad import FIELDS
from tiling.moe_token_unpermute_with_routing_map_grad import moe_token_unpermute_with_routing_map_grad as _tiling
from tiling.status import ParamNullptrError, TilingError

from .._framework import (
    Executor,
    IndexLink,
    dtype_code,
    gm_tensor,
    match_dtype_columns,
    run_executor,
    run_friendly,
    validate_check,
)
from .._validate import as_input, as_output, check_no_alias, flag, int_list, output_array, require, routing_map_dtype
from .arch35 import KERNELS as ARCH35_KERNELS
from .kernel import KERNELS, GmTensors, Template

OP = "MoeTokenUnpermuteWithRoutingMapGrad"
API = "aclnnMoeTokenUnpermuteWithRoutingMapGrad"
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeTokenUnpermuteWithRoutingMapGradTilingData = namedtuple("MoeTokenUnpermuteWithRoutingMapGradTilingData", FIELDS)
TilingData = MoeTokenUnpermuteWithRoutingMapGradTilingData

_BF16, _F16, _F32 = ml_dtypes.bfloat16, np.float16, np.float32
# OpDef columns: (unpermuted_tokens_grad, out_index, permute_token_id, routing_map, permuted_tokens, probs,
#                 permuted_tokens_grad, probs_grad)
DTYPE_COLUMNS = [
    (g, np.int32, np.int32, rm, g, p, g, p)
    for g, p in ((_BF16, _BF16), (_BF16, _F32), (_F16, _F16), (_F32, _F32))
    for rm in (np.bool_, np.int8)
]
_INPUT_NAMES = ("unpermuted_tokens_grad", "out_index", "permute_token_id", "routing_map", "permuted_tokens",
                "probs", "permuted_tokens_grad", "probs_grad")


def _shape_error(message: str):
    raise TilingError(f"{OP}: {message}")


def _check_shapes(g, o, rm, p, pr, out_grad, probs_grad_out, drop_and_pad: bool) -> None:
    n, h = g.shape
    m = o.shape[0]
    if out_grad.shape != (m, h):
        _shape_error(f"permuted_tokens_grad_out must have shape (len(out_index), hidden) = {(m, h)}, "
                     f"got {out_grad.shape}")
    if pr is None:
        return
    e = pr.shape[1]
    if pr.shape[0] != n:
        _shape_error(f"probs must have tokens_num = {n} rows (unpermuted_tokens_grad dim 0), got shape {pr.shape}")
    if rm.shape != pr.shape:
        _shape_error(f"routing_map shape {rm.shape} must equal probs shape {pr.shape}")
    if p.shape != (m, h):
        _shape_error(f"permuted_tokens must have shape (len(out_index), hidden) = {(m, h)}, got {p.shape}")
    if probs_grad_out.shape != (n, e):
        _shape_error(f"probs_grad_out must have the probs shape {(n, e)}, got {probs_grad_out.shape}")
    if drop_and_pad and m and e == 0:
        # slot j belongs to expert j // capacity with capacity = len(out_index) / experts: no expert, no owner
        _shape_error(f"with drop_and_pad, {m} slots need at least one expert column in probs, got shape {pr.shape}")
    if drop_and_pad and m and h == 0 and probs_grad_out.size:
        # keys 11 / 111 reduce each slot's per-piece partial sums: a zero hidden size leaves zero pieces, and the
        # kernel would read a sum from its empty partial-sum buffer
        _shape_error("with drop_and_pad and probs, hidden_size 0 leaves the probs gradient's sum without a hidden "
                     "piece to reduce")


def get_workspace_size(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None, permuted_tokens=None,
                       probs=None, drop_and_pad=False, restore_shape=None, permuted_tokens_grad_out=None,
                       probs_grad_out=None, *, soc="ascend910b"):
    """aclnnMoeTokenUnpermuteWithRoutingMapGradGetWorkspaceSize -> (workspace_size, executor)."""
    soc = get_soc(soc)
    drop_and_pad = flag("drop_and_pad", drop_and_pad)
    restore_shape = int_list("restore_shape", restore_shape)
    require("unpermuted_tokens_grad", unpermuted_tokens_grad)
    require("out_index", out_index)
    require("permute_token_id", permute_token_id)
    require("permuted_tokens_grad_out", permuted_tokens_grad_out)
    g = as_input("unpermuted_tokens_grad", unpermuted_tokens_grad)
    o = as_input("out_index", out_index)
    i = as_input("permute_token_id", permute_token_id)
    rm = as_input("routing_map", routing_map)
    p = as_input("permuted_tokens", permuted_tokens)
    pr = as_input("probs", probs)
    out_grad = as_output("permuted_tokens_grad_out", permuted_tokens_grad_out)
    out_probs_grad = as_output("probs_grad_out", probs_grad_out)
    tensors = dict(zip(_INPUT_NAMES, (g, o, i, rm, p, pr, out_grad, out_probs_grad), strict=True))
    check_no_alias({n: tensors[n] for n in _INPUT_NAMES[:6]}, {n: tensors[n] for n in _INPUT_NAMES[6:]})
    routing_map_dtype("routing_map", rm)        # the OpDef check names the map's dtype first
    match_dtype_columns(OP, list(tensors.items()), DTYPE_COLUMNS)
    if pr is not None and out_probs_grad is None:
        raise ParamNullptrError("probs_grad_out is required when probs is given (the kernel writes the probs "
                                "gradient through it)")

    result = _tiling(g, o, i, rm, p, pr, drop_and_pad, restore_shape, soc=soc)
    _check_shapes(g, o, rm, p, pr, out_grad, out_probs_grad, drop_and_pad)

    token_t = dtype_code(g, DT_FLOAT)
    grads = gm_tensor(g, 0)
    absent = grads.data.dtype   # absent optional tensors are empty arrays of the token carrier type
    gm = GmTensors(grads, gm_tensor(o, 1, np.int32), gm_tensor(i, 2, np.int32), gm_tensor(rm, 3, np.int8),
                   gm_tensor(p, 4, absent), gm_tensor(pr, 5, absent), gm_tensor(out_grad, 6),
                   gm_tensor(out_probs_grad, 7, absent))
    tmpl = Template(token_t, dtype_code(pr, token_t))
    td = TilingData(*result.fields.values())
    n, h = g.shape
    rows, experts = out_grad.shape[0], pr.shape[1] if pr is not None else 0
    links = (IndexLink("out_index", "permuted_tokens_grad", h, rows),
             IndexLink("out_index", "permuted_tokens", h, rows),
             IndexLink("permute_token_id", "unpermuted_tokens_grad", h, n),
             IndexLink("permute_token_id", "probs", experts, n),
             IndexLink("permute_token_id", "probs_grad", experts, n))
    executor = Executor(OP, result, kernels_of(soc)[result.tiling_key], (td, gm, tmpl), _INPUT_NAMES, api=API,
                        tensors=tensors, ub_advice=_ub_advice(result), index_links=links)
    return result.workspace_size, executor


def kernels_of(soc) -> dict:
    """The tiling-key table of the kernel binary the chip loads: ascend950 registers the regbase config
    (moe_token_unpermute_with_routing_map_grad_apt.cpp, arch35/ kernels), 910B / 910_93 the membase one."""
    return ARCH35_KERNELS if soc.is_regbase else KERNELS


def _ub_advice(result) -> str:
    """What shrinks this op's UB plan (appended to a UBOverflowError)."""
    f = result.fields
    lines = [f"The plan is sized by the tiling: hidden pieces of {f['hidden_size_align']} elements, up to "
             f"{max(f['row_id_map_each_core'], f['row_id_map_tail_core'])} slots per core."]
    if result.tiling_key == 101:
        lines.append("tilingKey 101 (bf16 gradients, fp32 probs) is a known quirk of the real op: its tiling budgets "
                     "the probs-gradient buffer in the 2-byte gradient type while the kernel allocates it in fp32. "
                     "To fit: pass bf16 probs (key 1), spread fewer tokens per core (fewer tokens or more cores), or "
                     "use a smaller hidden size.")
    else:
        lines.append("To fit: fewer tokens per core (fewer tokens or more cores), a smaller hidden size, or a larger "
                     "ub_size in a custom profile (tiling.get_soc(..., ub_size=...)).")
    return "\n".join(lines)


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """aclnnMoeTokenUnpermuteWithRoutingMapGrad: launch the kernel; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def allocate_outputs(unpermuted_tokens_grad, out_index, probs=None):
    """Zeroed (permuted_tokens_grad_out (len(out_index), H) in the gradient dtype, probs_grad_out in the probs
    shape and dtype, or None without probs)."""
    require("unpermuted_tokens_grad", unpermuted_tokens_grad)
    require("out_index", out_index)
    g, o = as_input("unpermuted_tokens_grad", unpermuted_tokens_grad), as_input("out_index", out_index)
    pr = as_input("probs", probs)
    m = o.shape[0] if o.ndim >= 1 else 0
    h = g.shape[1] if g.ndim == 2 else 0
    out_grad = output_array("permuted_tokens_grad_out", [(m, "out_index"), (h, "unpermuted_tokens_grad")], g.dtype)
    probs_grad = None if pr is None else output_array("probs_grad_out", [(d, "probs") for d in pr.shape], pr.dtype)
    return out_grad, probs_grad


def moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None,
                                              permuted_tokens=None, probs=None, drop_and_pad=False,
                                              restore_shape=None, *, soc="ascend910b", check=None):
    """Friendly call: allocates the outputs, runs both phases.

    Returns (permuted_tokens_grad (M, H) in the grad dtype, probs_grad (N, E) in the probs dtype or None).
    Rows of permuted_tokens_grad that no slot addresses stay 0. `check`: checked mode of the run, as on the
    aclnn call.
    """
    validate_check(check)
    soc = get_soc(soc)
    out_grad, out_probs_grad = allocate_outputs(unpermuted_tokens_grad, out_index, probs)
    size, executor = get_workspace_size(unpermuted_tokens_grad, out_index, permute_token_id, routing_map,
                                        permuted_tokens, probs, drop_and_pad, restore_shape, out_grad,
                                        out_probs_grad, soc=soc)
    run_friendly(run, size, executor, check)
    return out_grad, out_probs_grad
