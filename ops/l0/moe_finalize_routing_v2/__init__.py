"""l0op::MoeFinalizeRoutingV2 on Ascend 950: the arch35 kernels aclnnMoeTokenUnpermute launches (dropPadMode 2,
scales = probs or none, k 1, no expert ranges, no x1 / x2 / bias / expert_idx / x / alpha1 / alpha2 / v).

source: moe/moe_finalize_routing_v2/op_host/op_api/moe_finalize_routing_v2.cpp (the l0 wrapper: on regbase it
launches all eleven inputs and the five attributes) and the arch35 kernels (see the template modules)
@ 25fb6b92890d.

    y[r] = sum over the valid slots j of token r, in slot order, of expanded_x[idx[r*k + j]] * scales[r, j]

(idx = expanded_row_idx) in fp32 from +0.0 (Mul then Add per slot; scales 1 and k 1 without scales), cast to T
round-half-even. A slot is valid unless its index is -1 or, in the dropless modes, at / past activeNum =
expanded_x.dim0 (other negative indices are read before expanded_x: OutOfBoundsError). Zero scales are multiplied,
not skipped. Quirks of the real templates that are kept or bounded (see their modules): K-H full load with k == 1
adds whatever its buffer holds for a skipped slot (undefined); row-K-H full load copies row * k rows of
expanded_x whatever its length (the model copies the rows that exist; a valid index past row * k is an
OutOfBoundsError).

Tiling: tiling.moe_finalize_routing_v2 (every check, all four drop-pad modes, every input and attribute). The
kernels model dropPadMode 2 (READ_INDEX_BY_ROW, what the family passes) without x1 / x2 / bias / expert_idx / x /
alpha1 / alpha2 / v, so the expert ranges (which act only with x and expert_idx) never change a result; other
inputs end in NotImplementedError after the tiling has run. Two phases as every l0 launch here:
`get_workspace_size(...) -> (workspace_size, Executor)`, then `run(...)` or a KernelStep of a composite aclnn.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import DT_FLOAT, dt_of, gm_view
from tiling import get_soc
from tiling.moe_finalize_routing_v2 import FIELDS
from tiling.moe_finalize_routing_v2 import moe_finalize_routing_v2 as _tiling

from ..._framework import Executor, IndexLink, gm_tensor, run_executor
from ..._validate import as_input, as_output, check_no_alias, int_attr, int_list, require
from .kernel import GmTensors, Template, kernel_for

OP = "MoeFinalizeRoutingV2"
API = "l0op::MoeFinalizeRoutingV2"
GM_NAMES = ("expanded_x", "expanded_row_idx", "scales", "y")   # by GM id (both scales views are id 2)
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeFinalizeRoutingV2RegbaseTilingData = namedtuple("MoeFinalizeRoutingV2RegbaseTilingData", FIELDS)

SUPPORTED_DROP_PAD_MODES = (2,)


def _ub_advice(result) -> str:
    f = result.fields
    return (f"template {result.tiling_key // 10000 * 10000} holds rowFactor {f['row_factor']} tokens of "
            f"hFactor {f['h_factor']} elements; a larger ub_size in a custom profile gives more per loop")


def _scales_views(sa):
    """GM views of the scales' bytes as uint16 and as float32 (whole words; the view S does not have is unused)."""
    raw = np.zeros(0, np.uint8) if sa is None else gm_view(sa).reshape(-1).view(np.uint8)
    u16, f32 = raw[: raw.size - raw.size % 2].view(np.uint16), raw[: raw.size - raw.size % 4].view(np.float32)
    for v in (u16, f32):
        v.setflags(write=False)     # read-only like the launch's other inputs: one numba type with or without scales
    return GlobalTensor(u16, 2, 0), GlobalTensor(f32, 2, 0)


def get_workspace_size(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                       x=None, alpha1=None, alpha2=None, v=None, *, drop_pad_mode, zero_expert_range,
                       copy_expert_range, constant_expert_range, k, y_out, soc="ascend950"):
    """l0op::MoeFinalizeRoutingV2 -> (workspace_size, Executor).

    Arguments in the l0 wrapper's order: expanded_x (R, H) fp32 / fp16 / bf16; expanded_row_idx (row * k,) int32;
    x1 / x2 / x (row, H), bias (E, H), alpha1 / alpha2 / v (constant experts, H) in expanded_x's dtype or None;
    scales (row, k) fp32 / fp16 / bf16 or None; expert_idx (row, k) int32 or None; drop_pad_mode and k int64;
    the three expert ranges an aclIntArray each ([start, end), or None for the nullptr MoeTokenUnpermute passes);
    y_out (row, H) in expanded_x's dtype, filled by the run. A malformed argument raises ParamInvalidError (161002)
    naming it; tiling failures raise TilingError (561002)."""
    soc = get_soc(soc)
    require("expanded_x", expanded_x)
    require("expanded_row_idx", expanded_row_idx)
    require("y_out", y_out)
    xa, idx = as_input("expanded_x", expanded_x), as_input("expanded_row_idx", expanded_row_idx)
    sa = as_input("scales", scales)
    extra = {n: as_input(n, t) for n, t in (("x1", x1), ("x2", x2), ("bias", bias), ("expert_idx", expert_idx),
                                            ("x", x), ("alpha1", alpha1), ("alpha2", alpha2), ("v", v))}
    y = as_output("y_out", y_out)
    mode = int_attr("drop_pad_mode", drop_pad_mode)
    ranges = {n: int_list(n, r) for n, r in (("zero_expert_range", zero_expert_range),
                                            ("copy_expert_range", copy_expert_range),
                                            ("constant_expert_range", constant_expert_range))}
    k = int_attr("k", k)
    tensors = dict(expanded_x=xa, expanded_row_idx=idx, scales=sa, y=y)
    check_no_alias({"expanded_x": xa, "expanded_row_idx": idx, "scales": sa,
                    **{n: t for n, t in extra.items() if t is not None}}, {"y_out": y})
    result = _tiling(xa, idx, extra["x1"], extra["x2"], extra["bias"], sa, extra["expert_idx"], x=extra["x"],
                     a1=extra["alpha1"], a2=extra["alpha2"], v=extra["v"], y_out=y, drop_pad_mode=mode,
                     k=k, soc=soc, **ranges)
    if any(t is not None for t in extra.values()) or mode not in SUPPORTED_DROP_PAD_MODES:
        raise NotImplementedError(f"{OP}: only dropPadMode 2 without x1 / x2 / bias / expert_idx / x / alpha1 / "
                                  "alpha2 / v is simulated (what MoeTokenUnpermute passes)")
    f = result.fields
    kernel = kernel_for(result.tiling_key, sa is not None, f["k"])
    td = MoeFinalizeRoutingV2RegbaseTilingData(*f.values())
    gm = GmTensors(gm_tensor(xa, 0), gm_tensor(idx, 1, np.int32), *_scales_views(sa), gm_tensor(y, 3))
    tmpl = Template(dt_of(xa.dtype), DT_FLOAT if sa is None else dt_of(sa.dtype), int(sa is not None), mode)
    links = (IndexLink("expanded_row_idx", "expanded_x", f["h"], xa.shape[0]),)
    executor = Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors,
                        index_links=links, ub_advice=_ub_advice(result), writes=(y,))
    return result.workspace_size, executor


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; y is filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)
