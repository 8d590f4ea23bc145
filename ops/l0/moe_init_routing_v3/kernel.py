"""Kernels of MoeInitRoutingV3 on Ascend 950 that the simulator models: the sort chain with GATHER row indices,
dropless, unquantised or MX-quantising, and the empty-tensor branch.

source: moe/moe_init_routing_v3/op_kernel/moe_init_routing_v3_apt.cpp and the headers it includes from
moe/moe_init_routing_v3/op_kernel/arch35/ @ 25fb6b92890d

    10000000  MoeSortOneCore   -> ExpertTokensCount -> RowIdxGather -> MoeGatherOut<DTYPE_X>
    11000000  MoeSortMultiCore -> ExpertTokensCount -> RowIdxGather -> MoeGatherOut<DTYPE_X>
    10030000  MoeSortOneCore   -> ... -> MoeGatherOutMxfp8Quant<DTYPE_X, DTYPE_EXPANDED_X, false>
    11030000  MoeSortMultiCore -> ... -> MoeGatherOutMxfp8Quant (gather_mxfp8_quant.py)
    10100000  MoeSortOneCore   -> ... -> MoeV3GatherMxfp4Quant (gather_mxfp4_quant.py)
    11100000  MoeSortMultiCore -> ... -> MoeV3GatherMxfp4Quant
    3000000   EMPTY_TENSOR: core 0 zeroes expanded_row_idx / expanded_scale (n * k > 0) and the expert counts

Each arrow is a new TPipe (sortPipe, histogramPipe, rowIdxPipe, gatherPipe); RowIdxGather ends in SyncAll.
Stages take (c, td, gm[, tmpl]): the core, the MoeInitRoutingV3Arch35TilingData fields (one flat namedtuple,
tiling field names), the GM tensors a stage uses and, for the gather, the Template.

WORKSPACE LAYOUT (the user workspace, after the 16 MiB system workspace; A = Align(n * k, 4 B) = n * k rounded up
to a multiple of 8, E = actualExpertNum; offsets in int32 / float32 elements). RowIdxGather, MoeGatherOut and
the MXFP4 gather read the sorted row ids and the total count from here (the MXFP8 gather, GATHER row ids, reads
expanded_row_idx instead), through the helpers named below (all importable from this module):

    [0, A)                      sortedExpertIdx: the sorted expert ids (dropped slots last; ids below expertStart
                                as INT32_MAX)                                            sort.py, offset 0
    [A, 2A)                     expandDstToSrcRow: the flat slot of each sorted position  sort.sorted_idx_offset
    [2A, 2A + E)                expertCountTemp: int32 tokens per active expert (atomic adds of the count
                                cores; zeroed by the sort's Init on core 0)              sort.count_temp_offset
    2A + Align(E, 4 B)          the expert total count (one int32, dropless only)
                                                                   expert_tokens_count.total_count_offset
    [2A + E, 4A + E)            multi-core sort ping-pong list 0 ((score, row) pairs, float32; unaligned start)
    [4A + E, 6A + E)            multi-core sort ping-pong list 1                          sort._workspace_list

The ping-pong areas overlap the total count's int32 (it is written after the sort has finished with them). The
tiling's workspace size (n * k * 4 * 2 * 3 + coreNum * 32 * 2 + n * k * 4 + 2 * Align(E, 4 B) * 4 bytes) holds
the furthest byte, (6A + E) * 4.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, PipePhase
from ascend_sim.check import InitWaiver, OverlapWaiver, RaceWaiver
from ascend_sim.kernel_api import global_aicore

from .expert_tokens_count import CountGm, count_phase, total_count_offset  # noqa: F401  (workspace layout)
from .gather_mxfp4_quant import mxfp4_gather_phase
from .gather_mxfp8_quant import GatherMxGm, MxTemplate, mxfp8_gather_phase
from .gather_out import GatherGm, active_count, gather_phase
from .row_idx_gather import PIPE as ROW_IDX_PIPE
from .row_idx_gather import RowIdxGm, init_buffer_rows, row_idx_gather_phase
from .sort import V3SortGm, count_temp_offset, sort_phase, sorted_idx_offset  # noqa: F401  (workspace layout)

OP = "MoeInitRoutingV3"

KEY_SORT_ONE_CORE_GATHER = 10000000
KEY_SORT_MULTI_CORE_GATHER = 11000000
KEY_EMPTY_TENSOR = 3000000
KEY_SORT_ONE_CORE_MXFP8_GATHER = 10030000
KEY_SORT_MULTI_CORE_MXFP8_GATHER = 11030000
KEY_SORT_ONE_CORE_MXFP4_GATHER = 10100000
KEY_SORT_MULTI_CORE_MXFP4_GATHER = 11100000
MX_KEYS = (KEY_SORT_ONE_CORE_MXFP8_GATHER, KEY_SORT_MULTI_CORE_MXFP8_GATHER, KEY_SORT_ONE_CORE_MXFP4_GATHER,
           KEY_SORT_MULTI_CORE_MXFP4_GATHER)

GmTensors = namedtuple("GmTensors", [
    "x",                 # (n, cols) tokens, as unsigned integers of their width (uint8 / uint16 / uint32)
    "expert_idx",        # (n * k) int32 expert ids
    "scale",             # (n) float32 scale input, empty without one
    "expanded_x",        # (n * k, cols) output, x's unsigned view
    "expanded_row_idx",  # (n * k) int32 output
    "expert_tokens_count",   # (actualExpertNum) int64 output (count mode)
    "expanded_scale",    # (n * k) float32 output (the scale rows; empty when the caller passes none); the MX
                         # keys' E8M0 codes as uint8
    "workspace",         # user workspace as int32 (see WORKSPACE LAYOUT)
    "workspace_f32",     # the same bytes as float32 (the multi-core sort's lists)
])

Template = namedtuple("Template", ["x_bytes", "mx_x", "x_t", "round_scale"])
"""sizeof(DTYPE_X) (the unquantised gather only moves bits, so the element width is all of DTYPE_X it depends
on), whether DTYPE_X is an MX element type (fp8 e4m3fn / e5m2, fp4x2 e2m1: the empty branch's isMXFPXNoQuant),
and for the MX keys DTYPE_X's ge code (fp16 / bf16; 0 elsewhere) and the MXFP8 scale rule (1 round-scale)."""


def _sort_args(td, gm, tmpl):
    return td, V3SortGm(gm.expert_idx, gm.workspace, gm.workspace_f32)


def _count_args(td, gm, tmpl):
    return td, CountGm(gm.workspace, gm.expanded_row_idx, gm.expert_tokens_count)


def _row_idx_args(td, gm, tmpl):
    return td, RowIdxGm(gm.workspace, gm.expanded_row_idx)


def _active(td, gm, tmpl):
    """The expert total count the sort chain will leave: ids in [expertStart, expertEnd)."""
    return active_count(gm.expert_idx.data, td.expert_start, td.expert_end)


def launch_plan(plan: tuple, td) -> tuple:
    """The tiling's UB plan plus RowIdxGather's rowIdxPipe rows when the plan does not list them (core 0's rows for
    a count of n * k; each core's own rows follow the run's count, see row_idx_gather_phase)."""
    if td.n * td.k == 0 or any(b.pipe == ROW_IDX_PIPE for b in plan):
        return plan
    return tuple(plan) + init_buffer_rows(td, 0, td.n * td.k)


def _gather_args(td, gm, tmpl):
    return td, GatherGm(gm.x, gm.scale, gm.workspace, gm.expanded_x, gm.expanded_scale), tmpl


# ExpertTokensCount::expertCountCompute (arch35/moe_v3_expert_tokens_count.h): the S -> MTE3 SetFlag / WaitFlag
# comes before `expertTotalCountLocal.SetValue(0, ...)`; the total count's only ordering towards its DataCopyPad
# is then the EnQue / DeQue of a VECOUT queue (a V -> MTE3 event), so the scalar write races with the copy-out
TOTAL_COUNT_RACE = RaceWaiver("S", "LocalTensor::SetValue", "MTE3", "DataCopyPad(UB->GM)",
                              "the real ExpertTokensCount writes the total count with SetValue after its S -> MTE3 "
                              "event; only the VECOUT queue's V -> MTE3 event orders it before the copy-out")
# MoeMrgsort / MoeMrgsortOut CopyIn: DataCopy of Align(GetSortLen(lengths[i]), sizeof(float)) floats reads a list
# window up to 32 bytes past the last list's end, into workspace no core wrote (only `lengths[i]` pairs are merged)
MRGSORT_ALIGNED_READ = InitWaiver("workspace", "moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_mrgsort.h:116 and "
                                  "moe_v3_mrgsort_out.h:133 @ 25fb6b92890d: CopyIn's aligned DataCopy of a list window",
                                  tail=32)
# SortCompute / UBSortCompute's VF loads whole registers of keys (the mask only on the stores): the last register
# reads past the keys the DataCopyPad wrote, in lanes it never stores
KEY_TAIL_LOAD = InitWaiver("sortDataCopyInQueue", "moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_sort_one_core.h:75 "
                           "and moe_v3_sort_multi_core.h:115 @ 25fb6b92890d (unmasked MicroAPI::DataCopy of the keys)")


# ExpertTokensCount fills each core's slice of expandedRowIdx with -1 (arch35/moe_v3_expert_tokens_count.h lines
# 175-177 @ 25fb6b92890d), then after a SyncAll RowIdxGather's SIMT threads on every core store row ids at any
# position (arch35/moe_v3_row_idx_gather.h lines 112-131): bytes one core filled are overwritten by another
ROW_IDX_FILL_OVERLAP = OverlapWaiver("InitOutput", "asc_vf_call (SIMT)",
                                     "RowIdxGather's SIMT scatter overwrites the -1 fill of another core's slice")


def sort_chain(multi_core: bool) -> tuple[PipePhase, ...]:
    """Steps 1-3 of every sort template with GATHER row indices, dropless: the sort, ExpertTokensCount and
    RowIdxGather. A kernel appends its gather (step 5) and declares TOTAL_COUNT_RACE among its waivers; its launch
    args are (td, gm, tmpl) with a gm that has the GmTensors fields expert_idx, expanded_row_idx,
    expert_tokens_count, workspace and workspace_f32."""
    return (sort_phase(multi_core, _sort_args), count_phase(_count_args),
            row_idx_gather_phase(_row_idx_args, _active))


def _mx_gather_args(td, gm, tmpl):
    return (td, GatherMxGm(gm.x, gm.expanded_row_idx, gm.expanded_x, gm.expanded_scale, gm.workspace),
            MxTemplate(tmpl.x_t, td.quant_mode, tmpl.round_scale))


_GATHERS = {  # step 5 of the sort templates: (class name, phase)
    "none": ("MoeGatherOut", lambda: gather_phase(_gather_args)),
    "mxfp8": ("MoeGatherOutMxfp8Quant", lambda: mxfp8_gather_phase(_mx_gather_args)),
    "mxfp4": ("MoeV3GatherMxfp4Quant", lambda: mxfp4_gather_phase(_mx_gather_args)),
}


def _kernel(multi_core: bool, gather: str = "none") -> Kernel:
    sort_name = "MoeSortMultiCore" if multi_core else "MoeSortOneCore"
    name, phase = _GATHERS[gather]
    return Kernel(OP, f"{sort_name} + ExpertTokensCount + RowIdxGather + {name}",
                  sort_chain(multi_core) + (phase(),),
                  waivers=(TOTAL_COUNT_RACE, ROW_IDX_FILL_OVERLAP, KEY_TAIL_LOAD)
                  + ((MRGSORT_ALIGNED_READ,) if multi_core else ()))


# --- EMPTY_TENSOR -------------------------------------------------------------------------------------------
EmptyGm = namedtuple("EmptyGm", ["expanded_row_idx", "expert_tokens_count", "expanded_scale"])


@global_aicore
def empty_tensor_stage(c, td, gm, tmpl):
    """The EMPTY_TENSOR branch on core 0: with n * k > 0 (cols == 0) zero expanded_row_idx and, for x of no MX
    element type under quant mode -1, 1, 8 or 13, the float expanded_scale (n * k, or expertNum * capacity with
    drop-pad outside mode 8) with InitGlobalMemory; then Duplicate<int32> zeros over Align(count, 8 B) * 2 words
    of zeroBuf and DataCopyPad them to expert_tokens_count. (Without an expanded_scale tensor from the caller its
    zeroing is skipped: the real op always has one.)"""
    if c.block_idx != 0:
        return
    rows = td.n * td.k
    if td.n > 0 and td.k > 0:
        asc.init_output(c, gm.expanded_row_idx, rows, np.int32(0))      # InitGlobalMemory
        q = td.quant_mode
        if tmpl.mx_x == 0 and (q == -1 or q == 1 or q == 13 or q == 8):
            scale_elements = rows
            if td.drop_pad_mode == 1 and q != 8:
                scale_elements = td.expert_num * td.expert_capacity
            if scale_elements > 0 and gm.expanded_scale.data.size > 0:
                asc.init_output(c, gm.expanded_scale, scale_elements, np.float32(0.0))
    if td.expert_tokens_num_flag:
        count = td.expert_num * 2 if td.expert_tokens_num_type == 2 else td.actual_expert_num
        zero_local = asc.tbuf_get(c, 0, asc.ub_i32(c))
        # (sic) the branch has no V -> MTE3 event between the Duplicate and the DataCopyPad
        asc.duplicate(c, zero_local, np.int32(0), (count * 8 + 31) // 32 * 32 // 8 * 2)
        asc.data_copy_pad(c, asc.gm_as_i32(gm.expert_tokens_count), zero_local,
                          asc.DataCopyExtParams(1, count * 8, 0, 0))


def _empty_args(td, gm, tmpl):
    return td, EmptyGm(gm.expanded_row_idx, gm.expert_tokens_count, gm.expanded_scale), tmpl


# moe_init_routing_v3_apt.cpp, the EMPTY_TENSOR branch: Duplicate<int32_t>(zeroLocal...) is followed directly by
# DataCopyPad(expertTokensCountGm, zeroLocal, ...) with no V -> MTE3 event
EMPTY_ZEROS_RACE = RaceWaiver("V", "Duplicate", "MTE3", "DataCopyPad(UB->GM)",
                              "the real EMPTY_TENSOR branch copies the zeros out with no V -> MTE3 event after the "
                              "Duplicate")
EMPTY_KERNEL = Kernel(OP, "EMPTY_TENSOR", (PipePhase("pipe", ("zeroBuf",), (empty_tensor_stage,), _empty_args),),
                      waivers=(EMPTY_ZEROS_RACE,))

KERNELS = {KEY_SORT_ONE_CORE_GATHER: _kernel(False), KEY_SORT_MULTI_CORE_GATHER: _kernel(True),
           KEY_SORT_ONE_CORE_MXFP8_GATHER: _kernel(False, "mxfp8"),
           KEY_SORT_MULTI_CORE_MXFP8_GATHER: _kernel(True, "mxfp8"),
           KEY_SORT_ONE_CORE_MXFP4_GATHER: _kernel(False, "mxfp4"),
           KEY_SORT_MULTI_CORE_MXFP4_GATHER: _kernel(True, "mxfp4"), KEY_EMPTY_TENSOR: EMPTY_KERNEL}
"""TILING_KEY_IS dispatch: the keys with a simulated kernel."""
