"""l0op::MoeInitRoutingV2Grad on Ascend 950: the arch35 kernels aclnnMoeTokenPermuteGrad launches (fp16 / bf16 /
fp32 rows, topK = num_topk, dropPadMode 0, activeNum = rows of the gradient).

source: moe/moe_init_routing_v2_grad/op_host/op_api/moe_init_routing_v2_grad.cpp @ 25fb6b92890d.

    grad_x[t] = sum over j < topK of grad_expanded_x[expanded_row_idx[t * topK + j]], a slot whose row is invalid
                (IsInvalidRowIdx<Mode>: < 0 always, >= activeNum in the active mode, >= N * topK when dropless)
                counting as a zero row; fp32 sums from +0.0 in groups of four slots (base.py), one CAST_RINT

The tiling is tiling.moe_init_routing_v2_grad; the kernels are kernel.KERNELS (one per template). Two phases as
every l0 launch here: `get_workspace_size(...) -> (workspace_size, Executor)`, then `run(...)` (or a KernelStep of
a composite aclnn) fills grad_x_out in place. The workspace is reserved by the tiling and never used.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ascend_sim import UBOverflowError
from ascend_sim.dtypes import dt_of
from tiling import get_soc
from tiling.moe_init_routing_v2_grad import FIELDS_BY_TEMPLATE
from tiling.moe_init_routing_v2_grad import moe_init_routing_v2_grad as _tiling

from ..._framework import Executor, IndexLink, gm_tensor, run_executor
from ..._validate import as_input, as_output, check_no_alias, int_attr, require
from .base import ACTIVE_MODE, DROP_PAD_MODE, DROPLESS_MODE
from .kernel import KERNELS, GmTensors, Template

OP = "MoeInitRoutingV2Grad"
API = "l0op::MoeInitRoutingV2Grad"
GM_NAMES = ("grad_expanded_x", "expanded_row_idx", "grad_x")
# named after the C++ structs; the classes must be importable under their own names for numba's disk cache
MoeInitRoutingV2GradRegbaseSplitHTilingData = namedtuple("MoeInitRoutingV2GradRegbaseSplitHTilingData",
                                                         FIELDS_BY_TEMPLATE[200000])
MoeInitRoutingV2GradRegbaseFullLoadTilingData = namedtuple("MoeInitRoutingV2GradRegbaseFullLoadTilingData",
                                                           FIELDS_BY_TEMPLATE[300000])
MoeInitRoutingV2GradRegbaseTilingData = namedtuple("MoeInitRoutingV2GradRegbaseTilingData",
                                                   FIELDS_BY_TEMPLATE[400000])
_STRUCTS = {200000: MoeInitRoutingV2GradRegbaseSplitHTilingData, 300000: MoeInitRoutingV2GradRegbaseFullLoadTilingData,
            400000: MoeInitRoutingV2GradRegbaseTilingData}
_MODES = {1: DROPLESS_MODE, 2: DROP_PAD_MODE, 3: ACTIVE_MODE}


def ub_advice(result) -> str:
    f = result.fields
    return (f"the template holds hidden pieces of {f['h_ub_factor']} elements for "
            f"{f.get('n_ub_factor', f.get('k_ub_factor'))} rows at a time; a larger ub_size in a custom profile "
            "(tiling.get_soc('ascend950', ub_size=...)) gives longer pieces")


def _check_factors(result) -> None:
    """A UB too small for one 32-byte block of a row leaves the tiling a zero factor, which the real kernel divides
    by: refused here instead (the real tiling succeeds)."""
    f = result.fields
    rows = f["k_ub_factor"] if "k_ub_factor" in f else f["n_ub_factor"]
    if f["h_ub_factor"] <= 0 or rows <= 0 or f.get("n_ub_factor", 1) <= 0:
        raise UBOverflowError(
            f"the {result.soc.ub_size}-byte UB leaves MoeInitRoutingV2Grad's tiling a zero factor (h_ub_factor "
            f"{f['h_ub_factor']}, rows per pass {rows}): the real kernel would divide by it; " + ub_advice(result),
            op=OP, tiling_key=result.tiling_key, capacity_bytes=result.soc.ub_size)


def get_workspace_size(grad_expanded_x, expanded_row_idx, *, top_k, drop_pad_mode=0, active_num=0, grad_x_out,
                       soc="ascend950"):
    """l0op::MoeInitRoutingV2Grad -> (workspace_size, Executor). grad_expanded_x (R, H) (or (E, C, H) with
    drop-pad) fp16 / bf16 / fp32, expanded_row_idx (N * topK,) int32; grad_x_out (N, H) in the gradient's dtype
    is filled by the run. Shape and attribute errors are the tiling's (TilingError, 561002)."""
    soc = get_soc(soc)
    require("grad_expanded_x", grad_expanded_x)
    require("expanded_row_idx", expanded_row_idx)
    require("grad_x_out", grad_x_out)
    x, idx = as_input("grad_expanded_x", grad_expanded_x), as_input("expanded_row_idx", expanded_row_idx)
    out = as_output("grad_x_out", grad_x_out)
    tensors = dict(grad_expanded_x=x, expanded_row_idx=idx, grad_x_out=out)
    check_no_alias({"grad_expanded_x": x, "expanded_row_idx": idx}, {"grad_x_out": out})
    result = _tiling(x, idx, int_attr("top_k", top_k), int_attr("drop_pad_mode", drop_pad_mode),
                     int_attr("active_num", active_num), grad_x_out=out, soc=soc)
    template = result.tiling_key // 100000 * 100000
    _check_factors(result)
    td = _STRUCTS[template](*result.fields.values())
    gm = GmTensors(gm_tensor(x, 0), gm_tensor(idx, 1, np.int32), gm_tensor(out, 2))
    tmpl = Template(dt_of(x.dtype), _MODES[result.tiling_key % 10])
    rows = int(np.prod(x.shape[:-1])) if x.ndim else 0
    links = (IndexLink("expanded_row_idx", "grad_expanded_x", result.fields["h"], rows),)
    executor = Executor(OP, result, KERNELS[template], (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors,
                        index_links=links, ub_advice=ub_advice(result), writes=(out,))
    return result.workspace_size, executor


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; grad_x_out is filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)
