"""Kernels of MoeInplaceIndexAdd on Ascend 950 (TILING_KEY_IS dispatch).

source: moe/3rd/moe_inplace_index_add/op_kernel/moe_inplace_index_add.cpp and op_kernel/arch35/*.h @ 25fb6b92890d.

    keys 100000 / 100001 / 100027 (+100: 64-bit offsets)   MoeInplaceIndexAddSimt<float | half | bfloat16_t>  simt.py
    key 400000                                             MoeInplaceIndexAddSimd<DTYPE_VAR> ProcessAfter     simd.py
    key 200000                                             MoeInplaceIndexAddSimdSort After / Indices  simd_sort.py
    key 500000                                             MoeInplaceIndexAddSimtSort<..., CAST_MODE>     simt_sort.py
    keys 300000 / 300001 / 300002, pre or column split     MoeInplaceIndexAddDeterminsticNotQuant    deterministic.py
    keys 300000 / 300001 / 300002, id split                MoeInplaceIndexAddDeterminstic        deterministic_quant.py

A stage compiles once per var carrier (float32, or uint16 for fp16 / bf16: the dtype reaches it as an int), and
only for int32 indices.
"""
from __future__ import annotations

import functools
from collections import namedtuple

from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim.check import RaceWaiver
from ops.common.unpermute_gather import _read_only

from . import deterministic, simd, simd_sort, simt, simt_sort
from . import deterministic_quant as dq

OP = "MoeInplaceIndexAdd"

GmTensors = namedtuple("GmTensors", [
    "var",          # var (in / out): float32, or uint16 bits of fp16 / bf16
    "indices",      # int32 rows of var along the axis
    "updates",      # updates, var's carrier
])

QuantGmTensors = namedtuple("QuantGmTensors", [
    "var", "indices", "updates",        # as GmTensors
    "ws_f32",       # the workspace as float32 (scales, run sums), offset to the user workspace's first element
    "ws_i32",       # the same bytes as int32 (quantised sums, run ids)
    "ws_u32",       # the same bytes as uint32 (per-row counts)
])
"""The id split's GM: the workspace views reach back into the system workspace, where the kernel's reads at row
-1 land (deterministic_quant.py)."""

Template = namedtuple("Template", ["var_t", "wide_offsets"])
"""var_t: DTYPE_VAR as a ge code; wide_offsets: COMP_T is uint64 (SIMT keys 1001xx)."""


def _args(td, gm, tmpl):
    return (td, GmTensors(gm.var, _read_only(gm.indices), _read_only(gm.updates)), Template(*(int(v) for v in tmpl)))


def _quant_args(td, gm, tmpl):
    return (td, gm._replace(indices=_read_only(gm.indices), updates=_read_only(gm.updates)),
            Template(*(int(v) for v in tmpl)))


SIMT_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimt", (PipePhase("pipe", simt.BUFFERS, (simt.simt_process,), _args),))
SIMD_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimd", (PipePhase("pipe", simd.BUFFERS, (simd.simd_process_after,),
                                                              _args),))
# SortIndices (moe_inplace_index_add_common.h) writes the -1 pad after the sorted ids with a scalar SetValue and
# then has only PipeBarrier<PIPE_V> before ComputeUniqueIdNum's VF reads it: no S -> V event orders the two.
SORTED_PAD_RACE = RaceWaiver("S", "LocalTensor::SetValue", "V", "vector function (__VEC_SCOPE__)",
                             "SortIndices (moe_inplace_index_add_common.h) sets the pad after the sorted ids with "
                             "SetValue and only a PipeBarrier<PIPE_V> before ComputeUniqueIdNum reads it")
SIMD_SORT_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimdSort", (PipePhase("pipe", simd_sort.BUFFERS,
                                                                     (simd_sort.simd_sort_process,), _args),),
                          (SORTED_PAD_RACE,))
# CAST_MODE 0 builds no castIndicesQue_: one Kernel per buffer list, the same stage
SIMT_SORT_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimtSort", (PipePhase("pipe", simt_sort.BUFFERS,
                                                                     (simt_sort.simt_sort_process,), _args),))
SIMT_SORT_CAST_KERNEL = Kernel(OP, "MoeInplaceIndexAddSimtSort", (PipePhase("pipe", simt_sort.CAST_BUFFERS,
                                                                          (simt_sort.simt_sort_process,), _args),))
# ComputeIdxCount (moe_inplace_index_add_common.h) sets the end pad with SetValue right after the Sort wrote the
# ids beside it (no V -> S event: SortIndices has one, this copy of it does not) and has only PipeBarrier<PIPE_V>
# before ComputeUniqueIdNum's VF reads it: a WAW and a RAW across the scalar unit, both the real kernel's
IDX_COUNT_SORT_PAD_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "S", "LocalTensor::SetValue",
                                     "ComputeIdxCount (moe_inplace_index_add_common.h) sets the end pad after the "
                                     "sorted ids with SetValue and no V -> S event after the Sort")
IDX_COUNT_PAD_RACE = RaceWaiver("S", "LocalTensor::SetValue", "V", "vector function (__VEC_SCOPE__)",
                                "ComputeIdxCount (moe_inplace_index_add_common.h) sets the end pad after the sorted "
                                "ids with SetValue and only a PipeBarrier<PIPE_V> before ComputeUniqueIdNum reads it")
DETERMINISTIC_KERNEL = Kernel(OP, "MoeInplaceIndexAddDeterminsticNotQuant",
                              (PipePhase("pipe", deterministic.BUFFERS, (deterministic.deterministic_process,),
                                         _args),), (IDX_COUNT_SORT_PAD_RACE, IDX_COUNT_PAD_RACE))

# ComputeSumForSameIndex (moe_inplace_index_add_determinstic.h) writes the end pad with SetValue right after the Sort
# (no V -> S event) and has only PipeBarrier<PIPE_V> before ComputeUniqueIdNum's VF reads it: the real kernel's
QUANT_SORT_PAD_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "S", "LocalTensor::SetValue",
                                 "ComputeSumForSameIndex (moe_inplace_index_add_determinstic.h) sets the end pad "
                                 "after the sorted ids with SetValue and no V -> S event after the Sort")
QUANT_PAD_RACE = RaceWaiver("S", "LocalTensor::SetValue", "V", "vector function (__VEC_SCOPE__)",
                            "ComputeSumForSameIndex (moe_inplace_index_add_determinstic.h) sets the end pad with "
                            "SetValue and only a PipeBarrier<PIPE_V> before ComputeUniqueIdNum reads it")


# ProcessSecondStep (moe_inplace_index_add_determinstic.h lines 504-514 @ 25fb6b92890d) adds every slot's quantised
# sum into row preAxisIdx * varInAxis + id of sumQuanToIntWsGm_ with an int32 atomic copy; a slot no run filled has
# id -1, so for pre row 0 its (zero) add lands on the last row of the r-value region just before, which another
# core's CopySumAndRValueIn (line 540) may be reading in the same phase: an add of 0 that changes no bit
QUANT_ROW_MINUS_ONE_RACE = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "MTE2", "DataCopyPad(GM->UB)",
                                      "an id -1 slot's atomic add of 0 lands on the r-value row another core reads",
                                      cross_core=True)


@functools.lru_cache(maxsize=32)
def deterministic_quant_kernel(pre_axis: int, opti: bool) -> Kernel:
    """MoeInplaceIndexAddDeterminstic for `pre_axis` pre rows: Init and a SyncAll, then per pre row a TPipe for
    ProcessFirstStep and one for ProcessSecondStep, each ending in SyncAll, then ProcessThirdStep's TPipe (with
    isOpti one ProcessThirdStepOpti TPipe per pre row). Each Process*Step resets the TPipe and builds its own
    buffers, so each is its own PipePhase."""
    phases = [PipePhase("init", (), (dq.init, SYNC_ALL), _quant_args)]
    for pre in range(pre_axis):
        phases.append(PipePhase("step1", dq.STEP1_BUFFERS, ((dq.process_first_step, pre), SYNC_ALL), _quant_args))
        phases.append(PipePhase("step2", dq.STEP2_BUFFERS, ((dq.process_second_step, pre), SYNC_ALL), _quant_args))
    if opti:
        phases += [PipePhase("step3", dq.STEP3_OPTI_BUFFERS, ((dq.process_third_step_opti, pre),), _quant_args)
                   for pre in range(pre_axis)]
    else:
        phases.append(PipePhase("step3", dq.STEP3_BUFFERS, (dq.process_third_step,), _quant_args))
    return Kernel(OP, "MoeInplaceIndexAddDeterminstic", tuple(phases),
                  (QUANT_SORT_PAD_RACE, QUANT_PAD_RACE, QUANT_ROW_MINUS_ONE_RACE))
