"""Kernels of MoeInitRoutingV2 on Ascend 950 (the __NPU_ARCH__ == 3510 branch of the entry).

source: moe/moe_init_routing_v2/op_kernel/moe_init_routing_v2.cpp and op_kernel/arch35/*.h @ 25fb6b92890d.

Each dropless key without expert-token counts runs three steps:

1. sortPipe: MoeV2SortOneCore<T> (keys 10001 / 11001) or MoeV2SortMultiCore<T> (10002 / 11002), T the expert id
   type: the sorted ids and expandDstToSrcRow into the workspace (sort.py).
2. MoeV2SrcToDstOpSimt: no TPipe of its own; a SIMT call inverts the permutation into expandedRowIdx
   (src_to_dst.py). With scatterMode 0 the entry calls Process() (the call, then SyncAll unless coreNum is 1); with
   scatterMode 1 it calls ProcessWithoutSync(), since the scatter reads expandDstToSrcRow, not expandedRowIdx.
3. gatherPipe: MoeV2ScatterOutBatchRow<T> when the tiling set scatterMode, followed by an unconditional SyncAll
   before gatherPipe.Destroy(); else MoeV2GatherOutSimt<T> with no barrier after it (gather_out.py).

Keys 1x001 / 1x002 differ only in the expert-token-count TPipe (MoeV2ExpertTokenOutRegBase / Simt), which runs only
with expertTokensCountOrCumsumFlag > 0; drop-pad keys (10011 / 11011 / ...) and that pipe are not modelled (the l0
entry refuses them). Stages take (c, td, gm): the core, the tiling struct and the GM tensors of their step only, so
the sort compiles once per id type and the copy once per token element width.
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim.check import InitWaiver, RaceWaiver

from . import sort
from .gather_out import GATHER_BUFFERS, SCATTER_BUFFERS, GatherGm, gather_out_stage, scatter_out_stage
from .src_to_dst import SrcToDstGm, src_to_dst_stage

OP = "MoeInitRoutingV2"

GmTensors = namedtuple("GmTensors", [
    "x",                    # (N, H) tokens (uint16 carrier for fp16 / bf16, float32)
    "expert_idx",           # (N * K) expert ids, int32 or int64
    "expanded_x",           # (activeRows, H) output, x's carrier
    "expanded_row_idx",     # (N * K) int32 output: the output row of each flat slot
    "ws_i32",               # user workspace as int32 (sorted ids, expandDstToSrcRow)
    "ws_f32",               # the same bytes as float32 (the sort's ping-pong lists)
])

Template = namedtuple("Template", ["x_t", "expert_idx_t", "scatter_mode"])
"""DTYPE_X and DTYPE_EXPERT_IDX (ge codes) and the gather template the tiling chose (scatterMode)."""


def _sort_args(td, gm, tmpl):
    return td, sort.SortGm(gm.expert_idx, gm.ws_i32, gm.ws_f32)


def _src_to_dst_args(td, gm, tmpl):
    return td, SrcToDstGm(gm.ws_i32, gm.expanded_row_idx)


def _gather_args(td, gm, tmpl):
    return td, GatherGm(gm.x, gm.expanded_row_idx, gm.expanded_x, gm.ws_i32)


def _src_to_dst_schedule(td, gm, tmpl):
    """Process() = ProcessWithoutSync() + SyncAll (skipped for coreNum 1); scatterMode 1 takes ProcessWithoutSync()."""
    if tmpl.scatter_mode:
        return [src_to_dst_stage]
    return [src_to_dst_stage] + ([SYNC_ALL] if td.core_num != 1 else [])


def _gather_core_plan(block_idx, rows, td, gm, tmpl):
    """MoeV2GatherOutSimt::Init sizes its index queue from the core's perLoopRows (the last core has its own)."""
    last = block_idx == td.gather_out_need_core_num - 1
    loop_rows = td.gather_out_last_core_per_loop_rows if last else td.gather_out_per_core_per_loop_rows
    nbytes = (loop_rows * 4 + 31) // 32 * 32
    return tuple(r._replace(bytes=nbytes) if r.name == "expandedRowIdxIndexCopyInQueue" else r for r in rows)


# ScatterOutOneBlock fills outputRowsQueue (a VECOUT TQue of two buffers) with DataCopyPad GM->UB on MTE2 right after
# AllocTensor; the queue's free event orders MTE3 -> V, not MTE3 -> MTE2, so the copy-in may overwrite the buffer the
# copy-out two blocks earlier still reads. The real kernel has no MTE3 -> MTE2 event there: a race on the chip,
# waived for the scatter kernels only
SCATTER_ROWS_REUSE_RACE = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "MTE2", "DataCopyPad(GM->UB)",
                                     "MoeV2ScatterOutBatchRow refills an outputRowsQueue buffer (MTE2) with no "
                                     "MTE3 -> MTE2 event after its earlier copy-out")


# MoeV2Mrgsort / MoeV2MrgsortOut CopyIn: DataCopy of Align(GetSortLen(lengths[i]), sizeof(float)) floats reads a list
# window up to 32 bytes past the last list's end, into workspace no core wrote (only `lengths[i]` pairs are merged)
MRGSORT_ALIGNED_READ = InitWaiver("workspace", "moe/moe_init_routing_v2/op_kernel/arch35/moe_v2_mrgsort.h:114 and "
                                  "moe_v2_mrgsort_out.h:131 @ 25fb6b92890d: CopyIn's aligned DataCopy of a list window",
                                  tail=32)


def _kernel(key: int, scatter_mode: int) -> Kernel:
    multi_core = key % 10 == 2
    sort_name = "MoeV2SortMultiCore" if multi_core else "MoeV2SortOneCore"
    if scatter_mode:
        # scatterOpBatchRow.Process(); AscendC::SyncAll(); (not guarded by coreNum)
        gather = PipePhase("gatherPipe", SCATTER_BUFFERS, (scatter_out_stage, SYNC_ALL), _gather_args)
        gather_name = "MoeV2ScatterOutBatchRow"
    else:
        gather = PipePhase("gatherPipe", GATHER_BUFFERS, (gather_out_stage,), _gather_args,
                           core_plan=_gather_core_plan)
        gather_name = "MoeV2GatherOutSimt"
    return Kernel(OP, f"{sort_name} + MoeV2SrcToDstOpSimt + {gather_name}",
                  (sort.sort_phase(multi_core, _sort_args),
                   PipePhase("srcToDst", (), _src_to_dst_schedule, _src_to_dst_args),
                   gather), waivers=((SCATTER_ROWS_REUSE_RACE,) if scatter_mode else ())
                  + ((MRGSORT_ALIGNED_READ,) if multi_core else ()))


KEYS = (10001, 10002, 11001, 11002)
KERNELS = {(key, mode): _kernel(key, mode) for key in KEYS for mode in (0, 1)}
"""The dropless kernels without expert-token counts, by (tilingKey, scatterMode)."""
