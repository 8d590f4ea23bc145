"""The two-pass masked select of the routing-map ops, with a cross-core prefix sum.

Two AscendC classes, one simulated kernel:
* masked_select_v3.h (MoeTokenPermuteWithRoutingMap, `tmpl.write_indices` true): runs over
  routingMap^T (E rows x N tokens, expert-major); writes the selected probs (if any) and, for each
  selected element, its token id (flat position mod N) or, in kGatherExternalIndex mode
  (`tmpl.gather_external`), the int32 found at the same flat position of `external_index`.
* masked_select.h (MoeTokenUnpermuteWithRoutingMap, `write_indices` false): runs over the
  token-major probs / map and writes the selected values only.

Pass 1 (`masked_select_count_stage`): each of needCoreNum cores sums its mask bytes tile by tile
(Cast uint8 -> half -> float, ReduceSumFunc, Cast to int32) and writes the sum to workspace[core].
After SyncAll, pass 2 (`masked_select_gather_stage`): every core reads the sums; its output offset
is the sum over lower cores; tile by tile it compares the half-cast mask with 1.0 (CompareScalar)
and packs the selected values / indices with GatherMask, then DataCopyPads rsvdCnt of each.
v3 also takes actualOutTokens = the sum over all cores, stores it in members(c)[M_ACTUAL_OUT_TOKENS]
(every core), and in kFull mode skips pass 2 unless it equals top_k * N (the caller then runs the
non-topK path). kGatherExternalIndex has no pass 1: it reuses the sums the kFull phase left in the
workspace, so its schedule is pass 2 alone.

Device quirk kept on purpose: pass 1 adds mask *bytes* while pass 2 selects bytes *equal to 1*. A
map byte other than 0 / 1 (an int8 map holding 2, or -1 read as 255) therefore counts its value
in pass 1 but is never selected: the cores after it start their output that many slots further
on (leaving slots unwritten, or writing past the end: an OutOfBoundsError here), and v3's
actualOutTokens is the byte sum, not the number of ones.

Stages take (c, td, gm, tmpl): td a MaskedSelectTilingData (the 12 MS_FIELDS + top_k), gm a
MaskedSelectGm built by masked_select_gm(), tmpl a MaskedSelectTemplate built by pwrm_template() or
uwrm_template(). Values move as bits: one compiled stage serves fp16, bf16 and fp32.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.check import InitWaiver
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import DT_FLOAT, DT_INT32, DT_UINT32
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math
from ops.common.moe_sort import arith_progression_support_int32
from tiling.masked_select import MS_FIELDS

MaskedSelectTilingData = namedtuple("MaskedSelectTilingData", MS_FIELDS + ("top_k",))
"""The masked-select tiling struct plus top_k (the v3 kernel's Init argument; 0 for UWRM)."""

MaskedSelectGm = namedtuple("MaskedSelectGm", [
    "mask",            # uint8 view of the bool / int8 map, flat, read-only
    "values",          # values to select, as bytes (2- or 4-byte elements), read-only; empty if none
    "out_values",      # selected values, as bytes; empty if none
    "out_indices",     # int32 index stream (sortedIndices, or the value stream in gather mode); empty for UWRM
    "workspace",       # int32 GM: per-core counts at [0, need_core_num)
    "external_index",  # int32 stream gathered in kGatherExternalIndex mode, read-only; empty otherwise
])

MaskedSelectTemplate = namedtuple("MaskedSelectTemplate", ["value_t", "has_values", "write_indices",
                                                           "gather_external"])
"""value_t: ge code of the values (T); has_values: probs given; write_indices: the v3 class (PWRM), which
also writes the index stream; gather_external: MaskedSelectMode::kGatherExternalIndex."""

M_ACTUAL_OUT_TOKENS = 16
"""members(c) slot where every core leaves actualOutTokens after pass 2 (v3 only)."""

DATA_ALIGN_ELEMS = 128     # tileLengthAlign: DATA_ALIGN 256 / sizeof(half)
# GenerateMask casts `count` mask bytes into maskCastBuf and CompareScalar reads tileLengthAlign of them: the halves
# past the count were never written (their bits are past the GatherMask's count); checked mode "init" lets it pass
MASK_CAST_TAIL_READ_V3 = InitWaiver(
    "maskCastBuf", "moe/moe_token_permute_with_routing_map/op_kernel/masked_select_v3.h:469 @ 25fb6b92890d: "
    "CompareScalar over tileLengthAlign after the Cast of count mask bytes")
MASK_CAST_TAIL_READ = InitWaiver(
    "maskCastBuf", "moe/moe_token_unpermute_with_routing_map/op_kernel/masked_select.h:382 @ 25fb6b92890d: "
    "CompareScalar over tileLengthAlign after the Cast of count mask bytes (line 368)")
ONE_BLOCK_NUM = 8          # int32 per 32-byte block
MASK_LEN = 64              # fp32 lanes of one repeat
GATHER_PARAMS = asc.GatherMaskParams(1, 1, 8, 1)   # src0BlockStride, repeatTimes, src0RepeatStride, src1RepeatStride


# --- host-side builders --------------------------------------------------------------------------------
def masked_select_td(fields: dict, top_k: int = 0) -> MaskedSelectTilingData:
    """The td the stages take, from masked_select_tiling()'s fields (and the op's topK for v3)."""
    return MaskedSelectTilingData(*(int(fields[n]) for n in MS_FIELDS), int(top_k))


def _view(g: GlobalTensor | None, dtype, readonly: bool) -> GlobalTensor:
    """g's bytes seen as `dtype` (offset converted), with a fixed writability so every caller's tensors
    type the stages alike; an absent tensor is an empty one."""
    if g is None:
        data, gid, offset = np.zeros(0, dtype=dtype), -1, 0
    else:
        flat = g.data.reshape(-1)
        byte_offset = g.offset * flat.itemsize
        if byte_offset % np.dtype(dtype).itemsize:
            raise ValueError(f"GM tensor {g.id}: offset of {byte_offset} bytes is not a whole {np.dtype(dtype)}")
        data, gid, offset = flat.view(dtype), g.id, byte_offset // np.dtype(dtype).itemsize
    if readonly and data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return GlobalTensor(data, gid, offset)


def masked_select_gm(mask: GlobalTensor, values: GlobalTensor | None, out_values: GlobalTensor | None,
                     out_indices: GlobalTensor | None, workspace: GlobalTensor,
                     external_index: GlobalTensor | None = None) -> MaskedSelectGm:
    """The MaskedSelectGm of one masked select from the caller's GlobalTensors (any carrier dtype; ids and
    element offsets kept). Inputs become read-only views, values byte views, indices int32 views."""
    return MaskedSelectGm(_view(mask, np.uint8, True), _view(values, np.uint8, True),
                          _view(out_values, np.uint8, False), _view(out_indices, np.int32, False),
                          _view(workspace, np.int32, False), _view(external_index, np.int32, True))


def pwrm_template(value_t: int, has_values: bool, gather_external: bool = False) -> MaskedSelectTemplate:
    """KernelMaskedSelectV3<T> of MoeTokenPermuteWithRoutingMap (kFull or kGatherExternalIndex)."""
    return MaskedSelectTemplate(int(value_t), bool(has_values), True, bool(gather_external))


def uwrm_template(value_t: int) -> MaskedSelectTemplate:
    """KernelMaskedSelectV3<T> of masked_select.h (MoeTokenUnpermuteWithRoutingMap key 1): values only."""
    return MaskedSelectTemplate(int(value_t), True, False, False)


# --- device code ----------------------------------------------------------------------------------------
Queues = namedtuple("Queues", ["x", "y", "mask", "index", "offset", "sum", "mask_cast", "bit_mask", "index_buf",
                               "half"])


@aicore
def _queues(tmpl):
    """InitBuffer order of the class (see tiling.masked_select.masked_select_ub_plan); -1 = not created.
    `half` lends pass 1 its half-typed staging buffer (maskHalfLocal)."""
    if tmpl.write_indices:
        k = 2 if tmpl.has_values else 0   # inQueueX / outQueueY exist only with probs
        x = 0 if tmpl.has_values else -1
        y = 1 if tmpl.has_values else -1
        return Queues(x, y, k, k + 1, k + 2, k + 3, k + 4, k + 5, k + 6, k + 1)
    # masked_select.h: inQueueX, inQueueMask, outQueueY, moveQue, offsetBuf, sumBuf, maskCastBuf, bitMaskBuf
    return Queues(0, 2, 1, -1, 4, 5, 6, 7, -1, 0)


@aicore
def _value_bytes(tmpl):
    t = tmpl.value_t
    return 4 if t == DT_FLOAT or t == DT_INT32 or t == DT_UINT32 else 2


@aicore
def _core_tiles(c, td):
    """Init: (first flat element, tiles, tile length, last tile length) of a former or tail core."""
    i = c.block_idx
    if i < td.former_num:
        return i * td.former_length, td.formertile_num, td.formertile_length, td.formerlasttile_length
    return (td.former_num * td.former_length + (i - td.former_num) * td.tail_length, td.tailtile_num,
            td.tailtile_length, td.taillasttile_length)


@aicore
def _binary_add(c, tmp_buffer, length, threshold, offset):
    """BinaryAddFunc: fold halves (32-byte aligned) until <= threshold, then fold onto `offset` elements."""
    total = length
    half = int_math.align_up(int_math.ceil_div(total, 2), ONE_BLOCK_NUM)
    while total > threshold:
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.add(c, tmp_buffer, tmp_buffer, tmp_buffer[half:], total - half)
        asc.pipe_barrier(c, asc.PIPE_V)
        total = half
        half = int_math.align_up(int_math.ceil_div(total, 2), ONE_BLOCK_NUM)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.add(c, tmp_buffer, tmp_buffer, tmp_buffer[offset:], total - offset)
    asc.pipe_barrier(c, asc.PIPE_V)


@aicore
def _reduce_sum(c, four_tiers, dst_buffer, tmp_buffer, length):
    """ReduceSumFunc: v3 has two tiers (>= 64: fold to 64, BlockReduceSum, WholeReduceSum); masked_select.h
    adds the 4096 and 512 tiers. tmp_buffer is scratch."""
    if four_tiers and length >= 4096:
        _binary_add(c, tmp_buffer, length, 8192, 4096)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 64, MASK_LEN, 1, 1, 8)   # 4096 -> 512
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 8, MASK_LEN, 1, 1, 8)    # -> 64
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, MASK_LEN, 1, 1, 8)    # -> 8
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)           # -> 1
    elif four_tiers and length >= 512:
        _binary_add(c, tmp_buffer, length, 1024, 512)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 8, MASK_LEN, 1, 1, 8)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, MASK_LEN, 1, 1, 8)
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)
    elif length >= MASK_LEN:
        _binary_add(c, tmp_buffer, length, 2 * MASK_LEN, MASK_LEN)
        asc.block_reduce_sum(c, tmp_buffer, tmp_buffer, 1, MASK_LEN, 1, 1, 8)
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, 8, 1, 1, 1, 8)
    else:
        asc.whole_reduce_sum(c, dst_buffer, tmp_buffer, length, 1, 1, 1, 8)
    asc.pipe_barrier(c, asc.PIPE_V)


@aicore
def _copy_in_mask(c, q, mask_gm, length):
    """CopyInMask: one tile of mask bytes."""
    mask_local = asc.alloc_tensor(c, q.mask, asc.ub_u8(c))
    asc.data_copy_pad(c, mask_local, mask_gm, asc.DataCopyExtParams(1, length, 0, 0), asc.NO_PAD)
    asc.en_que(c, q.mask, mask_local)


@aicore
def _compute_offset(c, tmpl, q, mask_half_local, offset_local, length):
    """ComputeOffset: add the tile's mask-byte sum (fp32, then CAST_ROUND to int32) to offsetLocal[0]."""
    mask_local = asc.de_que(c, q.mask, asc.ub_u8(c))
    sum_local = asc.tbuf_get(c, q.sum, asc.ub_f32(c))
    sum_int32 = asc.view_as(c, sum_local, asc.ub_i32(c))
    mask_cast_local = asc.tbuf_get(c, q.mask_cast, asc.ub_f32(c))
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast_u8_to_half(c, mask_half_local, mask_local, asc.CAST_NONE, length)   # Cast(maskHalfLocal, maskLocal)
    asc.free_tensor(c, q.mask, mask_local)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast(c, mask_cast_local, asc.DT_FLOAT, mask_half_local, asc.DT_FLOAT16, asc.CAST_NONE, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    _reduce_sum(c, not tmpl.write_indices, sum_local, mask_cast_local, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast_f32_to_i32(c, sum_int32, sum_local, asc.CAST_ROUND, 1)              # Cast(sumInt32, sumLocal)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.add(c, offset_local, offset_local, sum_int32, 1)


@global_aicore
def masked_select_count_stage(c, td, gm, tmpl):
    """Process up to SyncAll (pass 1): cores 0 .. needCoreNum - 1 write their mask-byte sums to workspace."""
    if c.block_idx >= td.need_core_num:
        return
    q = _queues(tmpl)
    first, tiles, tile, last_tile = _core_tiles(c, td)
    offset_local = asc.tbuf_get(c, q.offset, asc.ub_i32(c))
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.duplicate(c, offset_local, np.int32(0), ONE_BLOCK_NUM)
    asc.pipe_barrier(c, asc.PIPE_V)
    mask_half_local = asc.alloc_tensor(c, q.half, asc.ub_u16(c))
    if tmpl.write_indices and td.token_num == tile:
        # one tile per expert row: the token ids 0..N-1 are built once and serve every tile of pass 2
        index_local = asc.tbuf_get(c, q.index_buf, asc.ub_i32(c))
        asc.pipe_barrier(c, asc.PIPE_V)
        arith_progression_support_int32(c, index_local, np.int32(0), np.int32(1), td.token_num)
        asc.pipe_barrier(c, asc.PIPE_V)
    for i in range(tiles):
        length = last_tile if i == tiles - 1 else tile
        _copy_in_mask(c, q, asc.gm_at(gm.mask, first + i * tile), length)
        _compute_offset(c, tmpl, q, mask_half_local, offset_local, length)
    asc.free_tensor(c, q.half, mask_half_local)
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy_pad(c, asc.gm_at(gm.workspace, c.block_idx), offset_local, asc.DataCopyExtParams(1, 4, 0, 0))


@aicore
def _token_ids(c, td, index_local, progress, tile):
    """Compute's index vector: token id (flat position mod N) of each element of tile `progress`, from an
    arithmetic progression ending at the tile's last id, the part before a wrap past N shifted up."""
    asc.pipe_barrier(c, asc.PIPE_V)
    start_id = ((progress + 1) * tile - 1) % td.token_num
    start_index = start_id - tile + 1
    arith_progression_support_int32(c, index_local, np.int32(start_index), np.int32(1), tile)
    zero_id = (progress * tile) % td.token_num
    if zero_id - start_id != 1 - tile:
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.adds(c, index_local, index_local, np.int32(zero_id - start_index), td.token_num - zero_id)
    asc.pipe_barrier(c, asc.PIPE_V)


@aicore
def _generate_mask(c, q, mask_local, bit_mask_local, length, tile_align):
    """GenerateMask: bits of (half(mask byte) == 1.0) over the whole aligned tile (CompareScalar needs
    whole 256-byte repeats; only the first `length` bits are used)."""
    mask_cast_local = asc.tbuf_get(c, q.mask_cast, asc.ub_u16(c))
    asc.cast_u8_to_half(c, mask_cast_local, mask_local, asc.CAST_NONE, length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.compare_scalar(c, bit_mask_local, mask_cast_local, asc.DT_FLOAT16, 1.0, asc.CMP_EQ, tile_align)
    asc.pipe_barrier(c, asc.PIPE_V)


@aicore
def _copy_in(c, tmpl, q, x_gm, mask_gm, T, length):
    """CopyIn: one tile of values (with probs) and of mask bytes."""
    if tmpl.has_values:
        x_local = asc.alloc_tensor(c, q.x, T)
        asc.data_copy_pad(c, x_local, x_gm, asc.DataCopyExtParams(1, length * T.itemsize, 0, 0), asc.NO_PAD)
        asc.en_que(c, q.x, x_local)
    _copy_in_mask(c, q, mask_gm, length)


@aicore
def _compute(c, td, tmpl, q, progress, tile, tile_align, length, T, P):
    """Compute / ComputeExternalIndex: the bit mask, then GatherMask of values and of the index vector.
    Returns rsvdCnt (both gathers keep the same count)."""
    if tmpl.write_indices and not tmpl.gather_external and td.token_num != tile:
        _token_ids(c, td, asc.tbuf_get(c, q.index_buf, asc.ub_i32(c)), progress, tile)
    mask_local = asc.de_que(c, q.mask, asc.ub_u8(c))
    bit_mask_local = asc.tbuf_get(c, q.bit_mask, asc.ub_u8(c))
    _generate_mask(c, q, mask_local, bit_mask_local, length, tile_align)
    asc.free_tensor(c, q.mask, mask_local)
    rsvd_cnt = 0
    if tmpl.has_values:
        y_local = asc.alloc_tensor(c, q.y, T)
        x_local = asc.de_que(c, q.x, T)
        rsvd_cnt = asc.gather_mask(c, y_local, x_local, asc.view_as(c, bit_mask_local, P), True, length,
                                   GATHER_PARAMS)
        asc.en_que(c, q.y, y_local)
        asc.free_tensor(c, q.x, x_local)
    if tmpl.write_indices:
        index_local = asc.tbuf_get(c, q.index_buf, asc.ub_i32(c))
        index_out_local = asc.alloc_tensor(c, q.index, asc.ub_i32(c))
        rsvd_cnt = asc.gather_mask(c, index_out_local, index_local, asc.view_as(c, bit_mask_local, asc.ub_u32(c)),
                                   True, length, GATHER_PARAMS)
        asc.en_que(c, q.index, index_out_local)
    return rsvd_cnt


@aicore
def _gather_pass(c, td, gm, tmpl, T, P, x_gm, y_gm):
    """Process after SyncAll (pass 2) with values typed as T (UB view) / x_gm, y_gm; P types the pattern."""
    q = _queues(tmpl)
    need = td.need_core_num
    if not tmpl.write_indices and c.block_idx >= need:
        return                        # masked_select.h: idle cores do not even read the counts
    offset_local = asc.tbuf_get(c, q.offset, asc.ub_i32(c))
    asc.pipe_barrier(c, asc.PIPE_ALL)
    asc.data_copy_pad(c, offset_local, gm.workspace, asc.DataCopyExtParams(1, need * 4, 0, 0), asc.NO_PAD)
    asc.pipe_barrier(c, asc.PIPE_ALL)
    lower = min(c.block_idx, need)
    ind = 0
    for i in range(lower):
        ind += asc.get_value(c, offset_local, i)
    if tmpl.write_indices:
        actual_out_tokens = ind
        for i in range(lower, need):
            actual_out_tokens += asc.get_value(c, offset_local, i)
        asc.members(c)[M_ACTUAL_OUT_TOKENS] = actual_out_tokens
        if not tmpl.gather_external and actual_out_tokens != td.top_k * td.token_num:
            return                    # not every token has topK experts: the caller takes the non-aligned path
    if c.block_idx >= need:
        return
    y_global = asc.gm_at(y_gm, ind)
    index_global = asc.gm_at(gm.out_indices, ind)
    asc.pipe_barrier(c, asc.PIPE_ALL)
    first, tiles, tile, last_tile = _core_tiles(c, td)
    tile_align = int_math.align_up(tile, DATA_ALIGN_ELEMS)
    out_offset = 0
    for i in range(tiles):
        length = last_tile if i == tiles - 1 else tile
        at = first + i * tile
        if tmpl.gather_external:     # CopyInExternalIndex
            asc.sync_pipes(c, asc.V_MTE2)
            asc.data_copy_pad(c, asc.tbuf_get(c, q.index_buf, asc.ub_i32(c)), asc.gm_at(gm.external_index, at),
                              asc.DataCopyExtParams(1, length * 4, 0, 0), asc.NO_PAD)
        _copy_in(c, tmpl, q, asc.gm_at(x_gm, at), asc.gm_at(gm.mask, at), T, length)
        if tmpl.gather_external:
            asc.sync_pipes(c, asc.MTE2_V)
        rsvd_cnt = _compute(c, td, tmpl, q, i, tile, tile_align, length, T, P)
        if tmpl.write_indices:       # CopyIndex2WorkSpace
            index_local = asc.de_que(c, q.index, asc.ub_i32(c))
            asc.data_copy_pad(c, asc.gm_at(index_global, out_offset), index_local,
                              asc.DataCopyExtParams(1, rsvd_cnt * 4, 0, 0))
            asc.free_tensor(c, q.index, index_local)
        if tmpl.has_values:          # CopyOut2GM
            y_local = asc.de_que(c, q.y, T)
            asc.data_copy_pad(c, asc.gm_at(y_global, out_offset), y_local,
                              asc.DataCopyExtParams(1, rsvd_cnt * T.itemsize, 0, 0))
            asc.free_tensor(c, q.y, y_local)
        out_offset += rsvd_cnt


@aicore
def _as_u16(g):
    """A byte GlobalTensor seen with 2-byte elements (values only move, so their bits are enough)."""
    return GlobalTensor(g.data.view(np.uint16), g.id, g.offset // 2)


@aicore
def _as_u32(g):
    return GlobalTensor(g.data.view(np.uint32), g.id, g.offset // 4)


@global_aicore
def masked_select_gather_stage(c, td, gm, tmpl):
    """Process after SyncAll (pass 2), or the whole ProcessGatherExternalIndex."""
    if _value_bytes(tmpl) == 4:
        _gather_pass(c, td, gm, tmpl, asc.ub_u32(c), asc.ub_u32(c), _as_u32(gm.values), _as_u32(gm.out_values))
    else:
        _gather_pass(c, td, gm, tmpl, asc.ub_u16(c), asc.ub_u16(c), _as_u16(gm.values), _as_u16(gm.out_values))


def masked_select_phase(pipe: str, select, buffers) -> PipePhase:
    """The masked select as one TPipe phase: [pass 1, SYNC_ALL, pass 2] ([pass 2] alone in gather-external
    mode). The SyncAll after pass 2 is the caller's: the next phase's schedule starts with SYNC_ALL.

    select(*launch_args) -> (MaskedSelectTilingData, MaskedSelectGm, MaskedSelectTemplate) is also the
    stages' argument list, so they see only these tensors and compile once for every caller and dtype;
    buffers: the names of masked_select_ub_plan(...) for this pipe, in order.
    """
    def schedule(*launch_args):
        _, _, tmpl = select(*launch_args)
        if tmpl.gather_external:
            return [masked_select_gather_stage]
        return [masked_select_count_stage, SYNC_ALL, masked_select_gather_stage]

    return PipePhase(pipe, tuple(buffers), schedule, select)
