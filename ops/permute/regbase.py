"""The Ascend 950 ("regbase") chains of aclnnMoeTokenPermute and aclnnMoeTokenPermuteV2.

source: moe/moe_token_permute/op_host/op_api/aclnn_moe_token_permute.cpp (BuildMoeInitRoutingV3Executor and the
regbase body) and aclnn_moe_token_permute_v2.cpp (PrepareIndicesForV3, AllocIntermediateTensorsForV3,
CallMoeInitRoutingV3AndUnpack, SliceAndViewCopy, BuildMoeInitRoutingV2Executor) @ 25fb6b92890d.

On the 950 MoeTokenPermute has no kernel of its own: the aclnn builds an executor of l0 operators.

* V2, and V1 with int8 tokens (MoeInitRoutingV3):
  1. l0op::Contiguous of tokens and indices (implicit here: inputs are already C-contiguous),
     l0op::Cast of int64 indices to int32; 1-D indices are viewed as (N, 1) (CreateView, no step).
  2. Intermediate tensors of every slot (AllocTensor, no step): expanded x of N*K rows in the output's dtype and
     trailing shape, expanded row idx int32 (N*K,), expert token counts int64 (10240,), expanded scale (N*K,)
     float32, or the caller's scale shape with N*K rows in E8M0 under MX quantisation.
  3. l0op::MoeInitRoutingV3(x, idx, activeNum = N*K, capacity 0, expertNum 10240, dropPad 0, count type,
     count flag on, quantMode, activeExpertRange [0, 10240), rowIdxType GATHER): a simulated launch of
     its arch35 kernels (ops/l0/moe_init_routing_v3).
  4. l0op::Slice, then l0op::ViewCopy, of the first rows of each intermediate into the caller's output, as many
     as the caller's tensor has (so M comes from permute_tokens_out, not from numOutTokens); the scale only
     under quantisation (V1 never).
* V1 with fp16 / bf16 / fp32 tokens (the aclnn's own body): l0op::MoeInitRoutingV2(tokens, indices,
  activeNum = numOutTokens, capacity 0, expertNum 0, dropPad 0, no counts) writing the caller's arrays, then
  two ViewCopy steps that move nothing here (ops/l0/moe_init_routing_v2).

Status codes: the aclnn's own checks give 161001 / 161002 (see ops/permute/__init__.py); a failing l0
tiling or Slice makes the l0 call return nullptr, which the aclnn reports as 561103.

Unwritten rows: MoeInitRoutingV3 drops expert ids outside [0, 10240) and writes no expanded-x (or scale) row for
them, so the intermediates' last rows keep what the memory held. The simulator allocates the intermediates filled
with its poison pattern (layout.POISON: NaN in every float format), so those rows reach the sliced outputs as
poison instead of passing for data; the allocation is no step of the run (the real executor's AllocTensor is none).
"""
from __future__ import annotations

import numpy as np

from ascend_sim import host_cost
from ascend_sim.layout import POISON_PAIR
from tiling.status import AclnnError, InnerNullptrError

from .._framework import Composite, HostStep, KernelStep
from .._host import cast_work, view_copy_step

V3_EXPERT_NUM = 10240          # EXPERT_NUM of both aclnn files: the ids MoeInitRoutingV3 keeps are [0, 10240)
EXPERT_TOKENS_NUM_TYPE_COUNT = 1
ROW_IDX_TYPE_GATHER = 0
_I32, _I64 = np.dtype(np.int32), np.dtype(np.int64)


def _l0_fail(api: str, l0: str, message: str):
    raise InnerNullptrError(f"{api}: l0op::{l0} returns nullptr: {message}") from None


def _poison(arr: np.ndarray) -> None:
    """Fill `arr` with the two-byte poison pattern (its byte count is even for every dtype used here)."""
    raw = arr.reshape(-1).view(np.uint8)
    if raw.size % 2:
        raw[:] = POISON_PAIR & 0xFF
        return
    raw.view(np.uint16)[:] = POISON_PAIR


def _intermediate(shape: tuple, dtype) -> np.ndarray:
    """An intermediate tensor of the chain (executor->AllocTensor): device memory nothing has written yet, which
    the simulator fills with its poison pattern when it allocates it (phase one), not as a step of the run. The
    rows MoeInitRoutingV3 does not write (past the expert total count) keep it, and the Slice copies it into the
    caller's rows, as the chip copies whatever those bytes held."""
    arr = np.empty(shape, dtype=np.dtype(dtype))
    _poison(arr)
    return arr


def _slice_copy(api: str, name: str, src: np.ndarray, dst: np.ndarray) -> list[HostStep]:
    """SliceAndViewCopy: l0op::Slice (offsets 0, sizes = dst's shape) of the intermediate, then l0op::ViewCopy into
    the caller's `dst`. On the chip these are two copies of dst's bytes (the Slice kernel into a tensor of its own,
    then the ViewCopy); here the Slice writes the caller's array and the ViewCopy moves nothing, each keeping the
    modelled cost of its copy."""
    if dst.ndim != src.ndim or any(d > s for d, s in zip(dst.shape, src.shape, strict=True)):
        _l0_fail(api, "Slice", f"{name} has shape {dst.shape}, which is not a leading slice of the "
                               f"MoeInitRoutingV3 result of shape {src.shape}")
    region = src[tuple(slice(0, d) for d in dst.shape)]
    return [HostStep("l0op::Slice", lambda: np.copyto(dst, region), host_cost.move(dst.nbytes)),
            view_copy_step(dst, dst)]


def _cast_int64_to_int32(src: np.ndarray, dst: np.ndarray) -> HostStep:
    """l0op::Cast int64 -> int32 of the expert ids (low 32 bits, as the vector Cast's truncating convert)."""
    return HostStep("l0op::Cast", lambda: np.copyto(dst, src.astype(np.int32, casting="unsafe")), cast_work(src, dst))


def v3_chain(api: str, op: str, tokens, indices, permute_out, sorted_out, scale_out, quant_mode: int, soc,
             mx_scale_rule: str) -> tuple[int, Composite]:
    """(workspace_size, Composite) of the MoeInitRoutingV3 chain (V2, and V1 with int8 tokens)."""
    from ops.l0 import moe_init_routing_v3 as v3

    steps = []
    idx = indices
    if indices.dtype == _I64:
        idx = np.empty(indices.shape, dtype=_I32)
        steps.append(_cast_int64_to_int32(indices, idx))
    if idx.ndim == 1:
        idx = idx.reshape(idx.shape[0], 1)            # CreateView (N,) -> (N, 1)
    full = int(idx.size)
    if permute_out.ndim < 1:
        _l0_fail(api, "MoeInitRoutingV3", f"permute_tokens_out must have at least one dimension, got shape "
                                          f"{permute_out.shape}")
    x_full = _intermediate((full,) + permute_out.shape[1:], permute_out.dtype)
    row_full = _intermediate((full,), _I32)
    counts = np.empty((V3_EXPERT_NUM,), dtype=_I64)
    if quant_mode == -1:
        scale_full = _intermediate((full,), np.float32)
    else:
        if scale_out.ndim < 1:
            _l0_fail(api, "MoeInitRoutingV3", f"expanded_scale_out must have at least one dimension, got shape "
                                              f"{scale_out.shape}")
        scale_full = _intermediate((full,) + scale_out.shape[1:], scale_out.dtype)
    try:
        workspace, l0_exec = v3.get_workspace_size(
            tokens, idx, None, None, active_num=full, expert_capacity=0, expert_num=V3_EXPERT_NUM, drop_pad_mode=0,
            expert_tokens_num_type=EXPERT_TOKENS_NUM_TYPE_COUNT, expert_tokens_num_flag=True, quant_mode=quant_mode,
            active_expert_range=(0, V3_EXPERT_NUM), row_idx_type=ROW_IDX_TYPE_GATHER, expanded_x_out=x_full,
            expanded_row_idx_out=row_full, expert_tokens_count_or_cumsum_out=counts, expanded_scale_out=scale_full,
            soc=soc, mx_scale_rule=mx_scale_rule)
    except AclnnError as e:
        _l0_fail(api, "MoeInitRoutingV3", e.message)
    steps.append(KernelStep("l0op::MoeInitRoutingV3", l0_exec))
    steps += _slice_copy(api, "permute_tokens_out", x_full, permute_out)
    steps += _slice_copy(api, "sorted_indices_out", row_full, sorted_out)
    if quant_mode != -1:
        steps += _slice_copy(api, "expanded_scale_out", scale_full, scale_out)
    tensors = dict(tokens=tokens, indices=indices, permute_tokens_out=permute_out, sorted_indices_out=sorted_out,
                   expanded_scale_out=scale_out)
    return workspace, Composite(op, l0_exec.tiling, steps, api=api, tensors=tensors, workspace_size=workspace)


def v2_chain(api: str, op: str, tokens, indices, num_out_tokens: int, permute_out, sorted_out,
             soc) -> tuple[int, Composite]:
    """(workspace_size, Composite) of V1's MoeInitRoutingV2 chain (fp16 / bf16 / fp32 tokens)."""
    from ops.l0 import moe_init_routing_v2 as v2

    try:
        workspace, l0_exec = v2.get_workspace_size(
            tokens, indices, active_num=num_out_tokens, expert_capacity=0, expert_num=0, drop_pad_mode=0,
            expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False,
            expanded_x_out=permute_out, expanded_row_idx_out=sorted_out, soc=soc)
    except AclnnError as e:
        _l0_fail(api, "MoeInitRoutingV2", e.message)
    steps = [KernelStep("l0op::MoeInitRoutingV2", l0_exec),
             view_copy_step(permute_out, permute_out), view_copy_step(sorted_out, sorted_out)]
    tensors = dict(tokens=tokens, indices=indices, permute_tokens_out=permute_out, sorted_indices_out=sorted_out)
    return workspace, Composite(op, l0_exec.tiling, steps, api=api, tensors=tensors, workspace_size=workspace)
