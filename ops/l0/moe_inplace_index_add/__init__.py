"""l0op::MoeInplaceIndexAddAiCore on Ascend 950: MoeInplaceIndexAdd's arch35 kernels (moe/3rd/moe_inplace_index_add,
@ 25fb6b92890d), launched by aclnnMoeTokenPermuteWithRoutingMapGrad (drop-and-pad tokens gradient) and
aclnnMoeTokenUnpermuteWithRoutingMap (padded mode) where they do not take the sorted index add.

source: moe/3rd/moe_inplace_index_add/op_host/op_api/moe_inplace_index_add.cpp @ 25fb6b92890d.

    var[pre, indices[j], after] += updates[pre, j, after]        (axis 0 and no alpha on those chains)

The tiling (tiling.moe_inplace_index_add) chooses one of five templates; the simulated kernels are SIMT
(keys 1000xx / 1001xx, atomic adds in an order that depends on timing), SIMD's column split (key 400000,
deterministic: slot order per element), SIMD sort's column and id splits (key 200000, ProcessAfter /
ProcessIndices: windows of ids scored, sorted and summed per run, simd_sort.py), SIMT sort (key 500000: the same
windows summed per run by SIMT threads, simt_sort.py) and the deterministic template (keys 300000 + 0/1/2 with the
context's deterministic switch): its pre and column splits (slot order per element, deterministic.py) and its id
split (fixed-point partial sums, deterministic_quant.py), for float32 / float16 / bfloat16 var and int32 indices.
SIMD sort's pre split, SIMT sort with 64-bit offsets (500010) and the other dtypes / branches raise
NotImplementedError; `modelled(...)` tells a chain beforehand.

The deterministic switch is the keyword-only `deterministic=False` of get_workspace_size (and of the chains'
get_workspace_size, whose docstrings call it the context's ACL_OPT_DETERMINISTIC option): the real op reads it in
its tiling (TilingContext::GetDeterministic), not as an input or attribute.
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of
from tiling import get_soc
from tiling.moe_inplace_index_add import (
    DETERMINISTIC_FIELDS,
    KEY_DETERMINISTIC,
    KEY_SIMD,
    KEY_SIMD_SORT,
    KEY_SIMT_SORT,
    SIMD_FIELDS,
    SIMD_SORT_FIELDS,
    SIMT_FIELDS,
    SIMT_SORT_FIELDS,
    TEMPLATE_DETERMINISTIC,
    TEMPLATE_SIMD,
    TEMPLATE_SIMD_SORT,
    TEMPLATE_SIMT,
    TEMPLATE_SIMT_SORT,
    select_template,
)
from tiling.moe_inplace_index_add import moe_inplace_index_add as _tiling
from tiling.status import InnerNullptrError, TilingError

from ..._framework import Executor, IndexLink, gm_tensor, run_executor
from ..._validate import as_input, as_output, check_no_alias, flag, require
from .kernel import (
    DETERMINISTIC_KERNEL,
    SIMD_KERNEL,
    SIMD_SORT_KERNEL,
    SIMT_KERNEL,
    SIMT_SORT_CAST_KERNEL,
    SIMT_SORT_KERNEL,
    GmTensors,
    QuantGmTensors,
    Template,
    deterministic_quant_kernel,
)

OP = "MoeInplaceIndexAdd"
API = "l0op::MoeInplaceIndexAddAiCore"
GM_NAMES = ("var", "indices", "updates", "workspace")
# named after the C++ structs; the classes must be importable under their own names for numba's disk cache
MoeInplaceIndexAddSimtTilingData = namedtuple("MoeInplaceIndexAddSimtTilingData", SIMT_FIELDS)
MoeInplaceIndexAddSimdTilingData = namedtuple("MoeInplaceIndexAddSimdTilingData", SIMD_FIELDS)
MoeInplaceIndexAddSimdSortTilingData = namedtuple("MoeInplaceIndexAddSimdSortTilingData", SIMD_SORT_FIELDS)
MoeInplaceIndexAddSimtSortTilingData = namedtuple("MoeInplaceIndexAddSimtSortTilingData", SIMT_SORT_FIELDS)
MoeInplaceIndexAddDeterminsticTilingData = namedtuple("MoeInplaceIndexAddDeterminsticTilingData",
                                                      DETERMINISTIC_FIELDS)
_DETERMINISTIC_KEYS = range(KEY_DETERMINISTIC, KEY_DETERMINISTIC + 3)

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_I32 = np.dtype(np.int32)


def modelled(var, indices, updates, *, soc="ascend950", deterministic=False) -> bool:
    """True if the l0 call (axis 0, no alpha) runs a simulated kernel: ascend950, float var, int32 indices, and
    the SIMT template, SIMD's column split, SIMD sort's column or id split (not its pre split), SIMT sort with
    32-bit offsets or (deterministic) the deterministic template. TilingError where the real tiling fails."""
    soc = get_soc(soc)
    if not soc.is_regbase or var.dtype not in _FLOATS or indices.dtype != _I32:
        return False
    template = select_template(var, indices, updates, None, 0, soc=soc, deterministic=deterministic)
    if template == TEMPLATE_SIMT:
        return True
    if template == TEMPLATE_SIMT_SORT:
        return _tiling(var, indices, updates, None, 0, soc=soc).tiling_key == KEY_SIMT_SORT
    if template == TEMPLATE_DETERMINISTIC:
        return True
    if template == TEMPLATE_SIMD_SORT:
        return not _tiling(var, indices, updates, None, 0, soc=soc).fields["is_split_pre_axis"]
    return template == TEMPLATE_SIMD and _tiling(var, indices, updates, None, 0, soc=soc).fields[
        "is_split_after_axis"] == 1


def _not_quantised(fields) -> bool:
    """The deterministic template's pre or column split (the NotQuant kernel, modelled), not its id split."""
    return fields["is_split_pre_axis"] == 1 or fields["is_split_after_axis"] == 1


def get_workspace_size(var, indices, updates, alpha=None, axis=0, *, var_out=None, soc="ascend950",
                       deterministic=False):
    """l0op::MoeInplaceIndexAddAiCore -> (workspace_size, Executor); the run adds into var in place.

    var: (..., N, ...) float32 / float16 / bfloat16, writeable and C-contiguous; indices: (K,) int32 rows of var
    along `axis`; updates: var's shape with K along the axis, var's dtype. var_out is var (the op's output is its
    input); passing another array is refused. Tiling failures raise TilingError (561002); templates, dtypes and
    branches not modelled raise NotImplementedError after the tiling has run. Indices outside the var end in
    OutOfBoundsError naming the bad element, except in SIMT sort, whose kernel skips them (simt_sort.py).
    """
    soc = get_soc(soc)
    for name, t in (("var", var), ("indices", indices), ("updates", updates)):
        require(name, t)
    v = as_output("var", var)
    i, u = as_input("indices", indices), as_input("updates", updates)
    if var_out is not None and var_out is not var:
        raise TilingError(f"{OP}: var_out must be var itself (the op adds in place)")
    tensors = dict(var=v, indices=i, updates=u)
    check_no_alias({"indices": i, "updates": u}, {"var": v})
    result = _tiling(v, i, u, alpha, axis, soc=soc, deterministic=flag("deterministic", deterministic))
    if alpha is not None:
        raise NotImplementedError(f"{OP}: the alpha input is not modelled (the chains pass none)")
    if v.dtype not in _FLOATS or i.dtype != _I32:
        raise NotImplementedError(f"{OP}: only float32 / float16 / bfloat16 var with int32 indices is modelled, "
                                  f"got {v.dtype} / {i.dtype}")
    if not (result.tiling_key in (KEY_SIMD, KEY_SIMD_SORT, KEY_SIMT_SORT) or result.tiling_key in _DETERMINISTIC_KEYS
            or 100000 <= result.tiling_key < 102000):
        raise NotImplementedError(f"{OP}: the kernel of tilingKey {result.tiling_key} (SIMT sort, 64-bit offsets) is "
                                  "not modelled")
    bind = None
    if result.tiling_key in _DETERMINISTIC_KEYS:
        td = MoeInplaceIndexAddDeterminsticTilingData(*result.fields.values())
        kernel = DETERMINISTIC_KERNEL
        if not _not_quantised(result.fields):
            kernel = deterministic_quant_kernel(int(td.pre_axis), bool(td.is_opti))
            lib = soc.lib_api_workspace
            bind = lambda args, ws, size: _bind_workspace(args, ws, size, lib)  # noqa: E731
    elif result.tiling_key == KEY_SIMT_SORT:
        td = MoeInplaceIndexAddSimtSortTilingData(*result.fields.values())
        kernel = SIMT_SORT_CAST_KERNEL if result.fields["indices_cast_mode"] else SIMT_SORT_KERNEL
    elif result.tiling_key == KEY_SIMD_SORT:
        if result.fields["is_split_pre_axis"] == 1:
            raise NotImplementedError(f"{OP}: the SIMD-sort template's pre split (ProcessPre) is not modelled, only "
                                      "its column and id splits (ProcessAfter, ProcessIndices)")
        td, kernel = MoeInplaceIndexAddSimdSortTilingData(*result.fields.values()), SIMD_SORT_KERNEL
    elif result.tiling_key == KEY_SIMD:
        if result.fields["is_split_after_axis"] != 1:
            raise NotImplementedError(f"{OP}: only the SIMD template's column split (ProcessAfter) is modelled")
        td, kernel = MoeInplaceIndexAddSimdTilingData(*result.fields.values()), SIMD_KERNEL
    else:
        td, kernel = MoeInplaceIndexAddSimtTilingData(*result.fields.values()), SIMT_KERNEL
    gm = GmTensors(gm_tensor(v, 0), gm_tensor(i, 1, np.int32), gm_tensor(u, 2))
    if bind is not None:
        gm = QuantGmTensors(*gm, None, None, None)
    tmpl = Template(dt_of(v.dtype), result.tiling_key // 100 % 10 if result.tiling_key < 200000 else 0)
    after = result.fields["after_axis"]
    links = (IndexLink("indices", "var", after, result.fields["var_in_axis"]),)
    executor = Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors,
                        index_links=links, writes=(v,), bind_workspace=bind,
                        ub_advice="the SIMD template's index window and column piece shrink with the UB; a custom "
                                  "profile (tiling.get_soc('ascend950', ub_size=...)) changes them")
    return result.workspace_size, executor


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int, lib_api_workspace: int) -> tuple:
    """The id split's workspace as float32 / int32 / uint32 GM over all of its bytes, each view's offset at the user
    workspace (after the system workspace): the kernel's reads at row -1 stay inside the workspace."""
    td, gm, tmpl = args
    whole = workspace.reshape(-1).view(np.uint8)[: workspace_size // 4 * 4]
    first = lib_api_workspace // 4
    return td, gm._replace(ws_f32=GlobalTensor(whole.view(np.float32), 3, first),
                           ws_i32=GlobalTensor(whole.view(np.int32), 3, first),
                           ws_u32=GlobalTensor(whole.view(np.uint32), 3, first)), tmpl


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; var is updated in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def aicore_step(var, indices, updates, host_step, *, soc, deterministic=False):
    """The chains' l0op::MoeInplaceIndexAddAiCore(var, 0, indices, updates, nullptr) step: a simulated launch on
    ascend950 where `modelled` says so, else `host_step` (910B / 910_93: InplaceIndexAdd of another CANN library;
    950: a template not modelled). var, indices and updates may be filled by earlier steps at run time."""
    from ..._framework import KernelStep
    try:
        if not modelled(var, indices, updates, soc=soc, deterministic=deterministic):
            return host_step
        _, executor = get_workspace_size(var, indices, updates, soc=soc, deterministic=deterministic)
    except TilingError as e:     # the launch fails: the l0 call returns nullptr, the aclnn 561103
        raise InnerNullptrError(f"{API} returned nullptr: {e.message}") from None
    return KernelStep(API, executor)
