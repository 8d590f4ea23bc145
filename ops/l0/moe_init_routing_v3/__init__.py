"""l0 MoeInitRoutingV3 on Ascend 950: what aclnnMoeTokenPermuteV2 launches there (activeNum n * k, capacity 0,
dropless, count-type expert tokens, GATHER row indices).

`get_workspace_size(...)` runs the real arch35 tiling (tiling.moe_init_routing_v3) and returns
(workspace_size, Executor); `executor.run(workspace)` (or ops._framework.run_executor) fills the outputs:

* expanded_x (n * k, cols): row i is x[expanded_dst_to_src[i] // k] for the first `active` rows, where the flat
  expert ids are sorted stably and `active` counts the ids in [expertStart, expertEnd); the rows beyond are not
  written.
* expanded_row_idx (n * k) int32: expanded_row_idx[slot] = the slot's sorted position, -1 for a dropped slot.
* expert_tokens_count (expertEnd - expertStart) int64: tokens per active expert.
* expanded_scale (n * k) float32: with a scale input (n) float32, scale[row] of each gathered row.

Modelled keys: 10000000 (one-core sort) and 11000000 (multi-core sort) for x of 1, 2 or 4 bytes without MX
element types, the MXFP8 (10030000 / 11030000) and MXFP4 (10100000 / 11100000) quantising gathers, and
3000000 (EMPTY_TENSOR). Any other key (the other quantised gathers, SCATTER row indices, drop-pad and full-load
templates) and the cumsum / key-value expert-token types raise KernelNotSimulatedError naming the key: nothing
falls back to another kernel. The kernels take the tiling through tiling_data.kernel_tiling_data (master's 68
fields, in order).

source: moe/moe_init_routing_v3/op_kernel/moe_init_routing_v3_apt.cpp and op_host/op_api/moe_init_routing_v3.cpp
@ 25fb6b92890d
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ascend_sim import SimulatorError
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of
from tiling import get_soc
from tiling.moe_init_routing_v3 import moe_init_routing_v3 as _tiling
from tiling.status import ParamInvalidError, ParamNullptrError

from ..._framework import Executor
from ..._validate import as_input, as_output, check_no_alias
from .kernel import KERNELS, KEY_EMPTY_TENSOR, MX_KEYS, OP, GmTensors, Template, launch_plan
from .tiling_data import kernel_tiling_data

API = "l0op::MoeInitRoutingV3"
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_MX_ELEMENT_TYPES = ("float8_e5m2", "float8_e4m3fn", "float4_e2m1fn")
COUNT_MODE = 1


class KernelNotSimulatedError(SimulatorError):
    """The tiling chose a kernel (tilingKey) or a mode the simulator does not model for MoeInitRoutingV3."""

    def __init__(self, summary: str, tiling_key: int):
        super().__init__(summary + "; this kernel is not simulated", op=OP, tiling_key=tiling_key)


def _bits(array: np.ndarray | None, index: int) -> GlobalTensor:
    """A GlobalTensor over the array's bytes as unsigned integers of its element width (the gather moves bits)."""
    if array is None:
        return GlobalTensor(np.zeros(0, dtype=np.uint8), index, 0)
    return GlobalTensor(array.reshape(-1).view(_UNSIGNED[array.dtype.itemsize]), index, 0)


def _plain(array: np.ndarray | None, index: int, dtype) -> GlobalTensor:
    if array is None or array.size == 0:
        return GlobalTensor(np.zeros(0, dtype=dtype), index, 0)
    return GlobalTensor(array.reshape(-1).view(dtype), index, 0)


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int, lib_api_workspace: int) -> tuple:
    """The user workspace (after the system workspace) as int32 and, over the same bytes, float32 GM."""
    td, gm, tmpl = args
    user = workspace.reshape(-1).view(np.uint8)[lib_api_workspace: workspace_size]
    user = user[: user.size - user.size % 4]
    return td, gm._replace(workspace=GlobalTensor(user.view(np.int32), 7, 0),
                           workspace_f32=GlobalTensor(user.view(np.float32), 8, 0)), tmpl


def _check_modelled(result, x: np.ndarray, expert_tokens_num_type: int) -> None:
    key = result.tiling_key
    if key not in KERNELS:
        raise KernelNotSimulatedError(f"MoeInitRoutingV3 tilingKey {key}", key)
    if key == KEY_EMPTY_TENSOR:
        return
    if key in MX_KEYS:
        if x.dtype not in (np.float16, ml_dtypes.bfloat16):
            raise KernelNotSimulatedError(f"tilingKey {key} with x of {x.dtype}: the MX gathers quantise fp16 / bf16",
                                          key)
    elif x.dtype.name in _MX_ELEMENT_TYPES or x.dtype.itemsize not in _UNSIGNED:
        raise KernelNotSimulatedError(f"tilingKey {key} with x of {x.dtype}: the MX gather (MoeV3GatherOutMxfp8 / "
                                      "MoeV3GatherOutMxFp4) runs for it", key)
    if expert_tokens_num_type != COUNT_MODE:
        raise KernelNotSimulatedError(f"tilingKey {key} with expert_tokens_num_type {expert_tokens_num_type}: only "
                                      "the count type (1) of ExpertTokensCount is modelled", key)


def get_workspace_size(x, expert_idx, scale=None, offset=None, *, active_num, expert_capacity, expert_num,
                       drop_pad_mode, expert_tokens_num_type, expert_tokens_num_flag, quant_mode, active_expert_range,
                       row_idx_type, expanded_x_out, expanded_row_idx_out, expert_tokens_count_or_cumsum_out,
                       expanded_scale_out, soc="ascend950", mx_scale_rule="round_scale"):
    """MoeInitRoutingV3 tiling + launch preparation -> (workspace_size, Executor). Inputs and outputs are numpy
    arrays (outputs writeable, filled in place; expanded_scale_out may be None); attributes as the OpDef's.
    mx_scale_rule (simulator option, MXFP8 keys only): "round_scale" (default) is the master kernel's rule;
    "floor" the OCP MX v1.0 rule, which master does not do.
    Raises the tiling's TilingError where it fails and KernelNotSimulatedError for an unmodelled kernel."""
    soc = get_soc(soc)
    x, expert_idx = as_input("x", x), as_input("expert_idx", expert_idx)
    scale, offset = as_input("scale", scale), as_input("offset", offset)
    expanded_x = as_output("expanded_x_out", expanded_x_out)
    row_idx = as_output("expanded_row_idx_out", expanded_row_idx_out)
    counts = as_output("expert_tokens_count_or_cumsum_out", expert_tokens_count_or_cumsum_out)
    expanded_scale = as_output("expanded_scale_out", expanded_scale_out)
    if scale is not None and expanded_scale is None:
        raise ParamNullptrError("expanded_scale_out is required when a scale input is given (the gather copies each "
                                "row's scale into it)")
    check_no_alias({"x": x, "expert_idx": expert_idx, "scale": scale, "offset": offset},
                   {"expanded_x_out": expanded_x, "expanded_row_idx_out": row_idx,
                    "expert_tokens_count_or_cumsum_out": counts, "expanded_scale_out": expanded_scale})
    result = _tiling(x, expert_idx, scale, offset, active_num=active_num, expert_capacity=expert_capacity,
                     expert_num=expert_num, drop_pad_mode=drop_pad_mode,
                     expert_tokens_num_type=expert_tokens_num_type, expert_tokens_num_flag=expert_tokens_num_flag,
                     quant_mode=quant_mode, active_expert_range=active_expert_range, row_idx_type=row_idx_type,
                     expanded_x_out=expanded_x, expanded_row_idx_out=row_idx,
                     expert_tokens_count_or_cumsum_out=counts, expanded_scale_out=expanded_scale, soc=soc)
    _check_modelled(result, x, int(expert_tokens_num_type))
    mx = result.tiling_key in MX_KEYS
    if mx_scale_rule not in ("floor", "round_scale"):
        raise ParamInvalidError(f"mx_scale_rule must be 'floor' or 'round_scale', got {mx_scale_rule!r}")
    # the MX gathers write E8M0 bytes into expanded_scale, the others float32 scale rows
    gm = GmTensors(_bits(x, 0), _plain(expert_idx, 1, np.int32), _plain(scale, 2, np.float32), _bits(expanded_x, 3),
                   _plain(row_idx, 4, np.int32), _plain(counts, 5, np.int64),
                   _bits(expanded_scale, 6) if mx else _plain(expanded_scale, 6, np.float32), None, None)
    td = kernel_tiling_data(result)
    lib = soc.lib_api_workspace
    tmpl = Template(x.dtype.itemsize, int(x.dtype.name in _MX_ELEMENT_TYPES), dt_of(x.dtype) if mx else 0,
                    int(mx_scale_rule == "round_scale"))
    executor = Executor(OP, result, KERNELS[result.tiling_key], (td, gm, tmpl),
                        ("x", "expert_idx", "scale", "expanded_x", "expanded_row_idx", "expert_tokens_count",
                         "expanded_scale", "workspace", "workspace"),
                        api=API, tensors=dict(x=x, expert_idx=expert_idx, scale=scale, offset=offset,
                                              expanded_x_out=expanded_x, expanded_row_idx_out=row_idx,
                                              expert_tokens_count_or_cumsum_out=counts,
                                              expanded_scale_out=expanded_scale),
                        bind_workspace=lambda args, ws, size: _bind_workspace(args, ws, size, lib),
                        ub_plan=None if result.tiling_key == KEY_EMPTY_TENSOR else launch_plan(result.ub_plan, td),
                        writes=(expanded_x, row_idx, counts))
    return result.workspace_size, executor
