"""l0op::MoeMaskedScatter on Ascend 950: the arch35 kernel aclnnMoeTokenPermuteWithRoutingMapGrad launches (open
build, BUILD_OPEN_PROJECT_API) for the probs gradient without dropAndPad.

source: moe/3rd/moe_masked_scatter/op_host/op_api/moe_masked_scatter.cpp @ 25fb6b92890d.

    y = x; the k-th True of mask, in row-major order, takes updates[k]

It only moves values: every dtype of the OpDef is carried as the unsigned integer of its width (one kernel per
width: keys 10, 20, 40, 80). The l0 wrapper (op_api/moe_masked_scatter.cpp) allocates y and launches
MoeMaskedScatter on DAV_3510, CANN's own MaskedScatter elsewhere (the 910B chain keeps a host step for it).

Tiling: tiling.moe_masked_scatter. Two phases as every l0 launch here: `get_workspace_size(...) -> (workspace_size,
Executor)`, then `run(...)` or a KernelStep of a composite aclnn. The workspace holds the prefix counts between the
kernel's two phases (see kernel.py).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ascend_sim.datacopy import GlobalTensor
from tiling import get_soc
from tiling.moe_masked_scatter import FIELDS
from tiling.moe_masked_scatter import moe_masked_scatter as _tiling

from ..._framework import Executor, run_executor
from ..._validate import as_input, as_output, check_no_alias, require
from .kernel import KERNELS, ScatterGm

OP = "MoeMaskedScatter"
API = "l0op::MoeMaskedScatter"
GM_NAMES = ("x", "mask", "updates", "y", "workspace")
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeMaskedScatterTilingData = namedtuple("MoeMaskedScatterTilingData", FIELDS)

_CARRIERS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(array: np.ndarray, index: int, width: int) -> GlobalTensor:
    """GM over the array's bytes as the unsigned integer of `width` bytes (no copy)."""
    return GlobalTensor(array.reshape(-1).view(_CARRIERS[width]), index, 0)


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int, lib_api_workspace: int) -> tuple:
    """The user workspace (after the system workspace) as int32 GM."""
    td, gm = args
    user = workspace.reshape(-1).view(np.uint8)[lib_api_workspace: workspace_size]
    user = user[: user.size - user.size % 4]
    return td, gm._replace(workspace=GlobalTensor(user.view(np.int32), 4, 0))


def _ub_advice(result) -> str:
    f = result.fields
    return (f"MoeMaskedScatter counts the mask {f['ub_factor']} bytes at a time (and scatters 1- / 2-byte values "
            f"{f['buffer_size']} at a time); a larger ub_size in a custom profile gives longer pieces")


def get_workspace_size(x, mask, updates, *, y_out, soc="ascend950"):
    """l0op::MoeMaskedScatter -> (workspace_size, Executor).

    x: any shape, a dtype of tiling.moe_masked_scatter.SUPPORTED_DTYPES; mask: x's shape, bool; updates: x's dtype,
    at least as many elements as mask has Trues (more are never read; fewer: the kernel's read past updates faults,
    OutOfBoundsError); y_out: x's shape and dtype, filled by the run. Tiling failures raise TilingError (561002);
    an A2 / A3 profile NotImplementedError (CANN's MaskedScatter runs there)."""
    soc = get_soc(soc)
    for name, t in (("x", x), ("mask", mask), ("updates", updates), ("y_out", y_out)):
        require(name, t)
    xa, ma, ua = as_input("x", x), as_input("mask", mask), as_input("updates", updates)
    y = as_output("y_out", y_out)
    check_no_alias({"x": xa, "mask": ma, "updates": ua}, {"y_out": y})
    result = _tiling(xa, ma, ua, y_out=y, soc=soc)
    if result.tiling_key not in KERNELS:
        raise NotImplementedError(f"{OP}: tilingKey {result.tiling_key} (int64 prefix counts, more than INT32_MAX "
                                  "elements) is not simulated")
    width = xa.dtype.itemsize
    gm = ScatterGm(_bits(xa, 0, width), _bits(ma, 1, 1), _bits(ua, 2, width), _bits(y, 3, width), None)
    td = MoeMaskedScatterTilingData(*result.fields.values())
    lib = soc.lib_api_workspace
    executor = Executor(OP, result, KERNELS[result.tiling_key], (td, gm), GM_NAMES, api=API,
                        tensors=dict(x=xa, mask=ma, updates=ua, y=y), ub_advice=_ub_advice(result),
                        bind_workspace=lambda args, ws, size: _bind_workspace(args, ws, size, lib), writes=(y,))
    return result.workspace_size, executor


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; y is filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)


def moe_masked_scatter(x, mask, updates, *, soc="ascend950", check=None) -> np.ndarray:
    """Friendly call: y (x's shape and dtype) = x with mask's Trues taking updates in row-major order."""
    xa = as_input("x", x)
    y = np.empty(xa.shape, dtype=xa.dtype) if xa is not None else None
    size, executor = get_workspace_size(x, mask, updates, y_out=y, soc=soc)
    run(np.zeros(size, np.uint8), size, executor, check=check)
    return y
