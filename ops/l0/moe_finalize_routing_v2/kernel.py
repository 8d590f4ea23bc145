"""Kernel entry of MoeFinalizeRoutingV2 on Ascend 950: the tiling key picks the template (10000 H full load, 20000
split H, 30000 row-K-H full load, 40000 K-H full load), the drop-pad mode (tens digit) and the scales' type S (units: 0
fp32 or none, 1 fp16, 2 bf16); T is expanded_x's type.

Each template is one TPipe whose InitBuffer calls depend on the inputs present (scales) and, for K-H full load, on
k == 1: one Kernel per (template, scales present, k == 1) with the buffers of tiling.moe_finalize_routing_v2's
ub_plan. The stages take (c, td, gm, tmpl); the tokens are carriers (uint16 for fp16 / bf16, float32) and the
scales come as both views of their bytes, so a stage compiles once per token carrier.

source: moe/moe_finalize_routing_v2/op_kernel/moe_finalize_routing_v2_apt.cpp @ 25fb6b92890d
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel, PipePhase
from ascend_sim.check import RaceWaiver

from . import h_full_load, h_partial_load, k_h_full_load, row_k_h_full_load

OP = "MoeFinalizeRoutingV2"

GmTensors = namedtuple("GmTensors", [
    "expanded_x",           # (R * H) tokens, carrier of T
    "expanded_row_idx",     # (row * k) int32
    "scales_u16",           # (row * k) scales as uint16 (the carrier of fp16 / bf16 S); empty when absent
    "scales_f32",           # the same GM bytes as float32 (the carrier of fp32 S)
    "y",                    # (row * H) output, carrier of T
])

Template = namedtuple("Template", ["x_t", "s_t", "has_scales", "drop_pad_mode"])
"""DTYPE_EXPANDED_X and S as ge codes (S = DT_FLOAT without scales), scales present (0 / 1), dropPadMode."""

_STAGES = {10000: (h_full_load.h_full_load_stage, "MoeFinalizeRoutingV2HFullLoad"),
           20000: (h_partial_load.h_partial_load_stage, "MoeFinalizeRoutingV2HPartialLoad"),
           30000: (row_k_h_full_load.row_k_h_full_load_stage, "MoeFinalizeRoutingV2RowKHFullLoad"),
           40000: (k_h_full_load.k_h_full_load_stage, "MoeFinalizeRoutingV2KHFullLoad")}


def _buffers(template: int, has_scales: bool, k1: bool) -> tuple[str, ...]:
    if template == 10000:
        return h_full_load.BUFFERS_SCALES if has_scales else h_full_load.BUFFERS
    if template == 20000:
        return h_partial_load.BUFFERS
    if template == 30000:
        return row_k_h_full_load.BUFFERS_SCALES if has_scales else row_k_h_full_load.BUFFERS
    if k1:
        return k_h_full_load.BUFFERS_K1_SCALES if has_scales else k_h_full_load.BUFFERS_K1
    return k_h_full_load.BUFFERS_SCALES if has_scales else k_h_full_load.BUFFERS


# k_h_full_load.h ProcessExpandedXBiasAndScale: token r's scales are packed with SetValue (S) while the VF of token
# r - 1 (V) may still read r - 1's scales; the bytes differ but share a 32-byte block (checked mode tracks blocks)
# and the kernel orders nothing between the two (its S_V event comes after the packing).
SCALES_PACK_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "S", "LocalTensor::SetValue",
                              "K-H full load packs the next token's scales next to the ones the previous VF reads")
# k_h_full_load.h ProcessYWithInputK4 packs a 16-token batch's scales with SetValue (S) and its VFs (V) read them
# with no S_V event in between; ProcessYWithInputK1 writes each token's scale back onto itself (S) before its VF
# reads it, likewise without an S_V event (only the expandedXQue EnQue / DeQue, an MTE2 -> V wait).
SCALES_UNSYNCED_RACE = RaceWaiver("S", "LocalTensor::SetValue", "V", "vector function (__VEC_SCOPE__)",
                                  "K-H full load (k == 1, and k <= 4 batched) has no S_V event between the scales' "
                                  "SetValue and the VF that reads them")


def _kernel(template: int, has_scales: bool, k1: bool) -> Kernel:
    stage, name = _STAGES[template]
    waivers = ()
    if template == 40000 and has_scales:
        waivers = (SCALES_UNSYNCED_RACE,) if k1 else (SCALES_PACK_RACE, SCALES_UNSYNCED_RACE)
    return Kernel(OP, name, (PipePhase("pipe", _buffers(template, has_scales, k1), (stage,)),), waivers)


KERNELS = {(t, s, k1): _kernel(t, s, k1) for t in _STAGES for s in (False, True) for k1 in (False, True)}
"""By (template key, scales present, k == 1); k == 1 changes the buffers of K-H full load only."""


def kernel_for(tiling_key: int, has_scales: bool, k: int) -> Kernel:
    return KERNELS[(tiling_key // 10000 * 10000, has_scales, k == 1)]
