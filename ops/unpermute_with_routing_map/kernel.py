"""Kernels of MoeTokenUnpermuteWithRoutingMap, one per tilingKey of op_kernel/moe_token_unpermute_with_routing_map.cpp.

source: moe/moe_token_unpermute_with_routing_map/op_kernel/moe_token_unpermute_with_routing_map.cpp, masked_select.h,
moe_token_unpermute_with_routing_map_not_pad.h, moe_token_unpermute_with_routing_map_pad.h @ 25fb6b92890d.

    key 1     GENERAL_OP_IMPL: KernelMaskedSelectV3 of masked_select.h on TPipe sortPipe (probs masked by the
              routing map, token-major -> permuteProbs), sortPipe.Destroy(), SyncAll(); then
              KernelMoeTokenUnpermuteWithRoutingMap<T1, int32, T3, true> of *_not_pad.h (kernel G, permuteProbs
              as the weights, -1 slots skipped)          -> ops.common.masked_select + ops.common.unpermute_gather
    key 0     the same kernel G with PROBS false          -> ops.common.unpermute_gather
    key 1000  KernelMoeTokenUnpermuteWithRoutingMapPad<T> of *_pad.h: permuteProbs[p] = probs[S[p], p / capacity]
              by scalar GM reads                          -> pad_process below

The launch arguments are (td, gm, tmpl): the whole tiling struct (TilingData), the GM tensors (GmTensors)
and the template parameters (Template); each phase hands its stages only what they use.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim.check import RaceWaiver
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.kernel_api import global_aicore
from ops.common.masked_select import (
    MASK_CAST_TAIL_READ,
    masked_select_gm,
    masked_select_phase,
    masked_select_td,
    uwrm_template,
)
from ops.common.unpermute_gather import gather_buffers, gather_gm, gather_phase, gather_template
from tiling.masked_select import masked_select_ub_plan
from tiling.moe_token_unpermute_with_routing_map import (
    GATHER_PIPE,
    KEY_NO_PROBS,
    KEY_PAD,
    KEY_PROBS,
    MS_PIPE,
    PAD_PIPE,
    PAD_QUEUE,
    pad_ub_plan,
)

OP = "MoeTokenUnpermuteWithRoutingMap"

GmTensors = namedtuple("GmTensors", [
    "permuted_tokens",     # permuted_tokens (R, H)
    "sorted_indices",      # sorted_indices (L,) int32
    "routing_map",         # routing_map (N, E), 1-byte view; empty if absent
    "probs",               # probs (N, E); empty if absent
    "unpermuted_tokens",   # unpermuted_tokens (N, H), output of keys 0 / 1
    "permute_probs",       # permute_probs (L,) in the probs dtype, output of keys 1 / 1000
    "workspace",           # user workspace, int32 (masked-select per-core counts); bound at run time
])

Template = namedtuple("Template", ["token_t", "probs_t", "has_probs"])
"""DTYPE_PERMUTED_TOKENS and DTYPE_PERMUTE_PROBS as ge dtype codes (probs_t = token_t without probs)."""


# --- key 1000: moe_token_unpermute_with_routing_map_pad.h --------------------------------------------------------
PadTilingData = namedtuple("PadTilingData", [
    "num_experts", "capacity", "front_core", "loop_time_each_front_core", "num_tokens_each_front_core",
    "num_tokens_front_core_each_loop", "num_tokens_front_core_last_loop", "loop_time_each_tail_core",
    "num_tokens_each_tail_core", "num_tokens_tail_core_each_loop", "num_tokens_tail_core_last_loop"])
"""The pad fields the kernel reads (MoeTokenUnpermuteWithRoutingMapPadTilingData)."""


@global_aicore
def pad_process(c, td, sorted_indices_gm, probs_gm, permute_probs_gm):
    """KernelMoeTokenUnpermuteWithRoutingMapPad::Init + Process on one core. probs and permute_probs come as
    bits of the probs dtype (uint16 or uint32), so the stage compiles once per bit width."""
    front = c.block_idx < td.front_core
    if front:
        block_offset = td.num_tokens_each_front_core * c.block_idx
        loops = td.loop_time_each_front_core
        each = td.num_tokens_front_core_each_loop
        last = td.num_tokens_front_core_last_loop
    else:
        block_offset = td.num_tokens_each_front_core * td.front_core + \
            (c.block_idx - td.front_core) * td.num_tokens_each_tail_core
        loops = td.loop_time_each_tail_core
        each = td.num_tokens_tail_core_each_loop
        last = td.num_tokens_tail_core_last_loop
    out_gm = asc.gm_at(permute_probs_gm, block_offset)   # unpermutedTokensGM: permute_probs + blockOffset
    T = asc.ub_like(c, permute_probs_gm)
    for n in range(loops):
        loop_n = each
        if n == loops - 1 and last != 0:
            loop_n = last
        # Compute(n, loopN): the position ignores the loop index n, and so does the GM destination (correct for the
        # single loop every realistic shape has; a second loop rewrites the first loop's elements)
        local = asc.alloc_tensor(c, 0, T)
        for offset in range(loop_n):
            pos_idx = block_offset + offset
            token = asc.get_value(c, sorted_indices_gm, pos_idx)
            asc.set_value(c, local, offset,
                          asc.get_value(c, probs_gm, np.int64(token) * td.num_experts + pos_idx // td.capacity))
        asc.data_copy_pad(c, out_gm, local, asc.DataCopyExtParams(1, loop_n * T.itemsize, 0, 0))
        asc.free_tensor(c, 0, local)


def _bits(g: GlobalTensor, itemsize: int) -> GlobalTensor:
    """g seen as unsigned integers of its element width (fp16/bf16 GM is already uint16)."""
    dtype = np.uint32 if itemsize == 4 else np.uint16
    return GlobalTensor(g.data.reshape(-1).view(dtype), g.id, g.offset)


def _pad_args(td, gm, tmpl):
    f = td._asdict()
    ptd = PadTilingData(*(int(f[name]) for name in PadTilingData._fields))
    width = gm.probs.data.itemsize
    probs = _bits(gm.probs, width)
    probs.data.flags.writeable = False
    return ptd, gm.sorted_indices, probs, _bits(gm.permute_probs, width)


def pad_core_plan(block_idx, rows, td, gm, tmpl):
    """Init() sizes the queue from the core's own share: tail cores build the tail count's buffer."""
    f = td._asdict()
    if block_idx < f["front_core"]:
        return rows
    return pad_ub_plan(f, gm.probs.data.itemsize, front=False)


# --- keys 0 / 1 ------------------------------------------------------------------------------------------
def _gather_select(td, gm, tmpl):
    """(td, GatherGm, GatherTemplate) of kernel G: permuteProbs (written by the masked select) are its weights."""
    probs_t = tmpl.probs_t if tmpl.has_probs else None
    g = gather_gm(gm.permuted_tokens, gm.sorted_indices, gm.permute_probs if tmpl.has_probs else None,
                  gm.unpermuted_tokens)
    return td, g, gather_template(tmpl.token_t, probs_t, skip_negative=True, used_core_num=td.used_core_num)


def _masked_select_select(td, gm, tmpl):
    """(td, MaskedSelectGm, MaskedSelectTemplate) of masked_select.h over the token-major probs and map."""
    msgm = masked_select_gm(gm.routing_map, gm.probs, gm.permute_probs, None, gm.workspace)
    return masked_select_td(td._asdict()), msgm, uwrm_template(tmpl.probs_t)


def _ms_buffers():
    # the plan's names do not depend on the sizes
    fields = dict.fromkeys(("formertile_length", "tailtile_length", "need_core_num"), 1)
    return [b.name for b in masked_select_ub_plan(fields, elem_bytes=2, with_values=True, with_indices=False,
                                                  pipe=MS_PIPE)]


def _not_pad_kernel(key: int, tokens_fp32: bool, probs_fp32: bool) -> Kernel:
    has_probs = key == KEY_PROBS
    gather = gather_phase(GATHER_PIPE, _gather_select, gather_buffers(tokens_fp32, has_probs, probs_fp32))
    if not has_probs:
        return Kernel(OP, "KernelMoeTokenUnpermuteWithRoutingMap<PROBS=false>", (gather,))
    phases = (masked_select_phase(MS_PIPE, _masked_select_select, _ms_buffers()),
              PipePhase("sync", (), (SYNC_ALL,)),     # sortPipe.Destroy(); AscendC::SyncAll()
              gather)
    return Kernel(OP, "KernelMaskedSelectV3 + SyncAll + KernelMoeTokenUnpermuteWithRoutingMap<PROBS=true>", phases,
                  (MASK_CAST_TAIL_READ,))


# the real Pad kernel fills its out tile with SetValue and copies it out with no S -> MTE3 event, and refills it
# on the next pass with no MTE3 -> S event (moe_token_unpermute_with_routing_map_pad.h): waived in checked mode
PAD_RACES = (RaceWaiver("S", "LocalTensor::SetValue", "MTE3", "DataCopyPad(UB->GM)",
                        "the real kernel copies out the tile it filled with SetValue with no S -> MTE3 event"),
             RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "S", "LocalTensor::SetValue",
                        "the real kernel refills the tile with SetValue with no MTE3 -> S event after its copy-out"))
PAD_KERNEL = Kernel(OP, "KernelMoeTokenUnpermuteWithRoutingMapPad",
                    (PipePhase(PAD_PIPE, (PAD_QUEUE,), (pad_process,), _pad_args, pad_core_plan),), PAD_RACES)


def kernel_for(key: int, tokens_fp32: bool, probs_fp32: bool) -> Kernel:
    """The Kernel of one tilingKey and instantiation (the buffer list of kernel G depends on the dtypes)."""
    if key == KEY_PAD:
        return PAD_KERNEL
    if key not in (KEY_NO_PROBS, KEY_PROBS):
        raise KeyError(f"{OP} has no tilingKey {key}")
    return _KERNELS[(key, tokens_fp32, probs_fp32)]


_KERNELS = {(k, t, p): _not_pad_kernel(k, t, p) for k in (KEY_NO_PROBS, KEY_PROBS) for t in (False, True)
            for p in (False, True)}
