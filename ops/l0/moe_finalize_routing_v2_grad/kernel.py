"""Kernel entry of MoeFinalizeRoutingV2Grad on Ascend 950 (op_kernel/moe_finalize_routing_v2_grad_apt.cpp): the tiling
key picks the template (tiling.moe_finalize_routing_v2_grad):

source: moe/moe_finalize_routing_v2_grad/op_kernel/moe_finalize_routing_v2_grad_apt.cpp @ 25fb6b92890d.

    10001 without scales, not cut H     10002 without scales, cut H (hiddenPrePart-element pieces)
    20011 / 20021 with scales, not cut H (without / with bias)
    20012 / 20022 with scales, cut H (main / fold blocks)

T is grad_y's type (= expanded_x's and grad_expanded_x's), S the scales' type (= grad_scales'). The stages take
(c, td, gm, tmpl); the tokens are carriers (uint16 for fp16 / bf16, float32) and the scales come as both views of
their bytes, so a stage compiles once per token carrier.

Interface shared by the template modules (without_scale.py, not_split_h.py, split_h.py): each exports its stage
function(s) and the BUFFERS tuple(s) of its InitBuffer calls (names as tiling.moe_finalize_routing_v2_grad.ub_plan);
this module builds one Kernel per template from them (KERNELS by tiling key, kernel_for).
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim.check import InitWaiver, RaceWaiver

from . import not_split_h, split_h, without_scale
from .base import init_out_not_cut_h_stage

OP = "MoeFinalizeRoutingV2Grad"

GmTensors = namedtuple("GmTensors", [
    "grad_y",               # (row * H) incoming gradient, carrier of T
    "expanded_row_idx",     # (row * k) int32
    "expanded_x",           # (expandedXDim0 * H) forward tokens, carrier of T; empty without scales
    "scales_u16",           # (row * k) scales as uint16 (the carrier of fp16 / bf16 S); empty when absent
    "scales_f32",           # the same GM bytes as float32 (the carrier of fp32 S)
    "grad_expanded_x",      # (expandedXDim0 * H) output, carrier of T
    "grad_scales_u16",      # (row * k) output as uint16 (fp16 / bf16 S); empty without scales
    "grad_scales_f32",      # the same GM bytes as float32 (fp32 S)
])
"""By GM id in the kernel's argument order, expert_idx and bias left out (the family never passes them)."""

Template = namedtuple("Template", ["x_t", "s_t", "has_scales", "drop_pad_mode"])
"""DTYPE_GRAD_Y and DTYPE_SCALES as ge codes (S = DT_FLOAT without scales), scales present (0 / 1), dropPadMode."""


# --- the kernels by tiling key ------------------------------------------------------------------------------------
DROP_PAD_MODE = 1        # dropPadMode 1: Init zeroes grad_expanded_x and meets the other cores at SyncAll


def _schedule(init_stage, process_stage):
    """Init (dropPadMode 1: the output zeroing, then SyncAll) and Process, as the launch's Template says."""
    def schedule(td, gm, tmpl):
        if tmpl.drop_pad_mode == DROP_PAD_MODE:
            return (init_stage, SYNC_ALL, process_stage)
        return (process_stage,)
    return schedule


# without_scale_(not_)cut_h.h CopyOut: grad_y's piece arrives in a VECIN queue (EnQue / DeQue order MTE2 -> V only)
# and leaves it by DataCopyPad on MTE3, and the slot's index is read with GetValue (S), with no MTE2 -> MTE3 / S
# event: races of the real kernel (in practice covered by the DataCopyPad latency), let pass at these two pairs.
WITHOUT_SCALE_RACES = (
    RaceWaiver("MTE2", "DataCopyPad(GM->UB)", "MTE3", "DataCopyPad(UB->GM)",
               "the without-scale CopyOut copies a VECIN queue's grad_y piece out on MTE3 with no MTE2 -> MTE3 event"),
    RaceWaiver("MTE2", "DataCopyPad(GM->UB)", "S", "LocalTensor::GetValue",
               "the without-scale CopyOut reads the slot's index with GetValue with no MTE2 -> S event"),
)

# regbase_not_cut_h.h CalcGradExpandedXVF / CalcGradScaleVF: LoadOneTensorForDtypeT reads whole registers (256 bytes
# fp32, 128 bytes b16) whatever lanes the mask keeps, so the last chunk of a row reads past its hAlign buffer into the
# queue's other buffer, which the next CopyIn refills on MTE2 with no event for those bytes. A race of the real
# kernel; harmless, the lanes read are masked off.
TAIL_LOAD_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "MTE2", "DataCopyPad(GM->UB)",
                            "CalcGradScaleVF's whole-register loads read past their row into the other queue "
                            "buffer, which the next CopyIn refills")
# the same loads read the row's bytes past what DataCopyPad wrote (masked-off lanes): bytes nothing wrote
TAIL_LOADS_UNWRITTEN = tuple(
    InitWaiver(buffer,
               "moe/moe_finalize_routing_v2_grad/op_kernel/arch35/moe_finalize_routing_v2_grad_regbase_not_cut_h"
               ".h:317 and :365-369 @ 25fb6b92890d (LoadOneTensorForDtypeT: whole-register loads, lanes masked off)")
    for buffer in ("gradYInQueue", "expandedXInQueue"))


def _kernel(name, buffers, init_stage, process_stage, waivers=()) -> Kernel:
    return Kernel(OP, name, (PipePhase("pipe", buffers, _schedule(init_stage, process_stage)),), waivers)


KERNELS = {
    10001: _kernel("MoeFinalizeRoutingV2GradWithoutScaleNotCutH", without_scale.BUFFERS, init_out_not_cut_h_stage,
                   without_scale.not_cut_h_process, WITHOUT_SCALE_RACES),
    10002: _kernel("MoeFinalizeRoutingV2GradWithoutScaleCutH", without_scale.BUFFERS,
                   without_scale.init_out_cut_h_stage, without_scale.cut_h_process, WITHOUT_SCALE_RACES),
    20011: _kernel("MoeFinalizeRoutingV2GradRegbaseNotCutH", not_split_h.BUFFERS_SUM, init_out_not_cut_h_stage,
                   not_split_h.not_cut_h_process, (TAIL_LOAD_RACE,) + TAIL_LOADS_UNWRITTEN),
    20012: split_h.KERNEL,
}
"""By tiling key; 20011 without binaryAddSumBuf (H < 64) is KERNELS_SMALL_H[20011]. The bias keys (20021 / 20022)
are never launched by the family."""

KERNELS_SMALL_H = {
    20011: _kernel("MoeFinalizeRoutingV2GradRegbaseNotCutH", not_split_h.BUFFERS, init_out_not_cut_h_stage,
                   not_split_h.not_cut_h_process, (TAIL_LOAD_RACE,) + TAIL_LOADS_UNWRITTEN),
}


def kernel_for(tiling_key: int, fields: dict) -> Kernel:
    """The kernel of a tiling: by key, and for 20011 by whether its Init creates binaryAddSumBuf."""
    if tiling_key in KERNELS_SMALL_H and fields["binary_add_quotient"] // not_split_h.VL_F32 == 0:
        return KERNELS_SMALL_H[tiling_key]
    return KERNELS[tiling_key]
