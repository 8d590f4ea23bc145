"""Kernels of MoeInplaceIndexAdd on Ascend 950 (op_kernel/moe_inplace_index_add.cpp, TILING_KEY_IS dispatch):

    keys 100000 / 100001 / 100027 (+100: 64-bit offsets)   MoeInplaceIndexAddSimt<float | half | bfloat16_t>  simt.py
    key 400000                                             MoeInplaceIndexAddSimd<DTYPE_VAR> ProcessAfter     simd.py

A stage compiles once per var carrier (float32, or uint16 for fp16 / bf16: the dtype reaches it as an int), and
only for int32 indices.
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel, PipePhase
from ops.common.unpermute_gather import _read_only

from . import simd, simt

OP = "MoeInplaceIndexAdd"

GmTensors = namedtuple("GmTensors", [
    "var",          # var (in / out): float32, or uint16 bits of fp16 / bf16
    "indices",      # int32 rows of var along the axis
    "updates",      # updates, var's carrier
])

Template = namedtuple("Template", ["var_t", "wide_offsets"])
"""var_t: DTYPE_VAR as a ge code; wide_offsets: COMP_T is uint64 (SIMT keys 1001xx)."""


def _args(td, gm, tmpl):
    return (td, GmTensors(gm.var, _read_only(gm.indices), _read_only(gm.updates)), Template(*(int(v) for v in tmpl)))


SIMT_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimt", (PipePhase("pipe", simt.BUFFERS, (simt.simt_process,), _args),))
SIMD_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimd", (PipePhase("pipe", simd.BUFFERS, (simd.simd_process_after,),
                                                              _args),))
