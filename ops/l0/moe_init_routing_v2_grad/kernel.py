"""Kernels of MoeInitRoutingV2Grad on Ascend 950 (the arch35 entry).

source: moe/moe_init_routing_v2_grad/op_kernel/moe_init_routing_v2_grad_apt.cpp @ 25fb6b92890d.

    keys 20000x  MoeInitRoutingV2GradSplitHCompute<T, Mode>     split_h.py
    keys 30000x  MoeInitRoutingV2GradFullLoadCompute<T, Mode>   full_load.py
    keys 40000x  MoeInitRoutingV2GradCompute<T, Mode>           arch35.py

x = 1 / 2 / 3 is Mode 0 (dropless) / DROP_PAD_MODE / ACTIVE_MODE. Every key is one TPipe and one stage (Init +
Process); T and Mode reach the stage as ints of the template tuple, so each stage compiles once per element width
(2-byte or fp32 rows), not per dtype or mode.
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel, PipePhase
from ascend_sim.check import InitWaiver, RaceWaiver
from ops.common.unpermute_gather import _read_only

from . import arch35, full_load, split_h

OP = "MoeInitRoutingV2Grad"

GmTensors = namedtuple("GmTensors", [
    "grad_expanded_x",      # (R, H) or (E, C, H) gradient rows (uint16 carrier for fp16 / bf16, float32)
    "expanded_row_idx",     # (N * topK,) int32: the row of every slot
    "grad_x",               # (N, H) output, the gradient's carrier
])

Template = namedtuple("Template", ["t", "mode"])
"""t: DTYPE_GRAD_EXPANDED_X as a ge code (fp16 and bf16 differ only in the casts); mode: the Mode argument."""

_STAGES = {
    200000: ("MoeInitRoutingV2GradSplitHCompute", split_h.BUFFERS, split_h.split_h_process),
    300000: ("MoeInitRoutingV2GradFullLoadCompute", full_load.BUFFERS, full_load.full_load_process),
    400000: ("MoeInitRoutingV2GradCompute", arch35.BUFFERS, arch35.arch35_process),
}


# SequenceReduceSum's tail loads (LoadOneTensorForDtypeT: a whole-register DataCopy, the mask only on the Adds) read
# up to a register's width past their row, so the last row of one inputQueue buffer reads the first bytes of the
# other buffer, which the next CopyIn's DataCopyPad refills with no V -> MTE2 event for those bytes (the queue orders
# only the buffer the VF DeQue'd). A race of the real kernel; harmless, as the lanes read are never added.
TAIL_LOAD_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "MTE2", "DataCopyPad(GM->UB)",
                            "SequenceReduceSum's unmasked tail loads read past their row into the other inputQueue "
                            "buffer, which the next CopyIn refills")
# the same loads read past the rows DataCopyPad wrote: bytes nothing wrote, in lanes the Adds' mask drops
TAIL_LOAD_UNWRITTEN = InitWaiver("inputQueue", "moe/moe_init_routing_v2_grad/op_kernel/arch35/"
                                 "moe_init_routing_v2_grad_base.h:163-167 @ 25fb6b92890d (LoadOneTensorForDtypeT in "
                                 "SequenceReduceSum: whole-register loads, the mask only on the Adds)")


def _args(td, gm, tmpl):
    """The stage's arguments: the inputs read-only, the template as ints."""
    return (td, GmTensors(_read_only(gm.grad_expanded_x), _read_only(gm.expanded_row_idx), gm.grad_x),
            Template(*(int(v) for v in tmpl)))


KERNELS = {template: Kernel(OP, name, (PipePhase("pipe", buffers, (stage,), _args),),
                             (TAIL_LOAD_RACE, TAIL_LOAD_UNWRITTEN))
           for template, (name, buffers, stage) in _STAGES.items()}
"""KERNELS[tilingKey // 100000 * 100000]: the kernel of a template (the mode is a template argument)."""
