"""l0op::MoeFinalizeRoutingV2Grad on Ascend 950: the arch35 kernels aclnnMoeTokenUnpermuteGrad launches (gradY = G,
expandedRowIdx = sorted_indices, expandedX = permuted_tokens, scales = probs or none, dropPadMode 0, activeNum =
len(sorted_indices); no expert_idx / bias).

source: moe/moe_finalize_routing_v2_grad/op_host/op_api/moe_finalize_routing_v2_grad.cpp @ 25fb6b92890d.

    grad_expanded_x[idx[j]] = grad_y[j // topK] * scales[j]        fp32 product, CAST_RINT to T (grad_y[j] without)
    grad_scales[j]          = sum over h of grad_y[j // topK, h] * expanded_x[idx[j], h]     fp32, CAST_RINT to S

(idx = expanded_row_idx) for every slot whose index names a row, 0 <= idx[j] < expandedXDim0 (len(idx), or activeNum
when 0 < activeNum < it; expert_num * expert_capacity with dropPadMode 1). Any other slot writes no row and gets a
probs gradient of exactly +0. The fp32 sum is the arch35 CalcGradScaleVF's (not_split_h.py; the in-register order
of ReduceSum is the one assumption). Rows of grad_expanded_x no slot names are not written (dropPadMode 1 zeroes
the whole tensor first); without scales grad_scales is not touched.

Templates (kernel.KERNELS): 10001 / 10002 without scales (one row piece / hiddenPrePart-element pieces,
without_scale.py), 20011 with scales, not cut H (not_split_h.py), 20012 with scales, cut H (split_h.py); bias /
expert_idx (keys 2002x, never passed by the family) raise NotImplementedError after the tiling.
dropPadMode 0 and 1 are simulated (1 only adds the zeroing pass and a SyncAll).

Tiling: tiling.moe_finalize_routing_v2_grad (every shared check, TilingError 561002) runs first. Two phases as
every l0 launch here: `get_workspace_size(...) -> (workspace_size, Executor)`, then `run(...)` or a KernelStep of a
composite aclnn; the outputs are filled in place.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import DT_FLOAT, dt_of, gm_view
from tiling import get_soc
from tiling.moe_finalize_routing_v2_grad import NOT_SPLIT_H_FIELDS, WITHOUT_SCALE_FIELDS
from tiling.moe_finalize_routing_v2_grad import moe_finalize_routing_v2_grad as _tiling

from ..._framework import Executor, IndexLink, gm_tensor, run_executor
from ..._validate import as_input, as_output, check_no_alias, int_attr, require
from .kernel import GmTensors, Template, kernel_for
from .split_h import MoeFinalizeRoutingV2GradSplitHTilingData

OP = "MoeFinalizeRoutingV2Grad"
API = "l0op::MoeFinalizeRoutingV2Grad"
GM_NAMES = ("grad_y", "expanded_row_idx", "expanded_x", "scales", "grad_expanded_x", "grad_scales")   # by GM id
# named after the C++ structs; the classes must be importable under their own names for numba's disk cache
MoeFinalizeRoutingV2GradTilingData = namedtuple("MoeFinalizeRoutingV2GradTilingData", WITHOUT_SCALE_FIELDS)
MoeFinalizeRoutingV2GradNotSplitHTilingData = namedtuple("MoeFinalizeRoutingV2GradNotSplitHTilingData",
                                                         NOT_SPLIT_H_FIELDS)
_STRUCTS = {10001: MoeFinalizeRoutingV2GradTilingData, 10002: MoeFinalizeRoutingV2GradTilingData,
            20011: MoeFinalizeRoutingV2GradNotSplitHTilingData, 20021: MoeFinalizeRoutingV2GradNotSplitHTilingData,
            20012: MoeFinalizeRoutingV2GradSplitHTilingData, 20022: MoeFinalizeRoutingV2GradSplitHTilingData}

SUPPORTED_DROP_PAD_MODES = (0, 1)


def _ub_advice(result) -> str:
    f = result.fields
    if "hidden_pre_part" in f:
        return (f"the without-scale template copies pieces of hiddenPrePart {f['hidden_pre_part']} elements; a larger "
                "ub_size in a custom profile (tiling.get_soc('ascend950', ub_size=...)) gives longer pieces")
    return ("the not-cut-H template holds a whole row (hAlign elements) of grad_y, expanded_x and grad_expanded_x, "
            "double-buffered; a larger ub_size in a custom profile keeps longer rows whole")


def _byte_views(a, index: int, writable: bool):
    """GM views of an array's bytes as uint16 and as float32 (whole words; the view S does not have is unused);
    an absent array is empty. Inputs read-only, so that with or without scales the stage has one numba type."""
    raw = np.zeros(0, np.uint8) if a is None else gm_view(a).reshape(-1).view(np.uint8)
    u16, f32 = raw[: raw.size - raw.size % 2].view(np.uint16), raw[: raw.size - raw.size % 4].view(np.float32)
    if not writable:
        for v in (u16, f32):
            v.setflags(write=False)
    return GlobalTensor(u16, index, 0), GlobalTensor(f32, index, 0)


def _expanded_x(ex, gy) -> GlobalTensor:
    """expanded_x's GM view, or an empty read-only one of grad_y's carrier (one numba type with or without it)."""
    if ex is not None:
        return gm_tensor(ex, 2)
    empty = np.zeros(0, gm_view(gy).dtype)
    empty.setflags(write=False)
    return GlobalTensor(empty, 2, 0)


def get_workspace_size(grad_y, expanded_row_idx, expanded_x=None, scales=None, expert_idx=None, bias=None, *,
                       drop_pad_mode, active_num, expert_num, expert_capacity, grad_expanded_x_out, grad_scales_out,
                       soc="ascend950"):
    """l0op::MoeFinalizeRoutingV2Grad -> (workspace_size, Executor).

    grad_y (N, H) fp32 / fp16 / bf16; expanded_row_idx (N * topK,) int32; expanded_x (rows, H) (dropPadMode 1:
    (E, C, H)) in grad_y's dtype, required with scales; scales (N, topK) fp32 / fp16 / bf16 or None;
    grad_expanded_x_out (rows, H) in grad_y's dtype and grad_scales_out (the scales' shape and dtype; unused, any
    array, without scales), filled by the run. Tiling failures raise TilingError (561002); bias / expert_idx raise
    NotImplementedError after the tiling."""
    soc = get_soc(soc)
    for name, t in (("grad_y", grad_y), ("expanded_row_idx", expanded_row_idx),
                    ("grad_expanded_x_out", grad_expanded_x_out), ("grad_scales_out", grad_scales_out)):
        require(name, t)
    gy, idx = as_input("grad_y", grad_y), as_input("expanded_row_idx", expanded_row_idx)
    ex, sc = as_input("expanded_x", expanded_x), as_input("scales", scales)
    ei, bs = as_input("expert_idx", expert_idx), as_input("bias", bias)
    gex, gsc = as_output("grad_expanded_x_out", grad_expanded_x_out), as_output("grad_scales_out", grad_scales_out)
    mode = int_attr("drop_pad_mode", drop_pad_mode)
    attrs = (mode, int_attr("active_num", active_num), int_attr("expert_num", expert_num),
             int_attr("expert_capacity", expert_capacity))
    inputs = {"grad_y": gy, "expanded_row_idx": idx, "expanded_x": ex, "scales": sc, "expert_idx": ei, "bias": bs}
    check_no_alias(inputs, {"grad_expanded_x_out": gex, "grad_scales_out": gsc})
    result = _tiling(gy, idx, ex, sc, ei, bs, *attrs, grad_expanded_x_out=gex,
                     grad_scales_out=gsc if sc is not None else None, soc=soc)
    if ei is not None or bs is not None or mode not in SUPPORTED_DROP_PAD_MODES:
        raise NotImplementedError(f"{OP}: only dropPadMode 0 / 1 without expert_idx / bias is simulated (what "
                                  "MoeTokenUnpermuteGrad passes)")
    key, f = result.tiling_key, result.fields
    td = _STRUCTS[key](*f.values())
    gm = GmTensors(gm_tensor(gy, 0), gm_tensor(idx, 1, np.int32), _expanded_x(ex, gy), *_byte_views(sc, 3, False),
                   gm_tensor(gex, 4), *_byte_views(gsc if sc is not None else None, 5, True))
    tmpl = Template(dt_of(gy.dtype), DT_FLOAT if sc is None else dt_of(sc.dtype), int(sc is not None), mode)
    tensors = dict(inputs, grad_expanded_x=gex, grad_scales=gsc)
    links = [IndexLink("expanded_row_idx", "grad_expanded_x", f["hidden"], f["expanded_x_dim0"])]
    if sc is not None:
        links.append(IndexLink("expanded_row_idx", "expanded_x", f["hidden"], f["expanded_x_dim0"]))
    executor = Executor(OP, result, kernel_for(key, f), (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors,
                        index_links=tuple(links), ub_advice=_ub_advice(result),
                        writes=(gex, gsc) if sc is not None else (gex,))
    return result.workspace_size, executor


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)
