"""Kernel G: the "unpermute-style" gather-and-reduce KernelMoeTokenUnpermute, shared by four operators.

source (@ 25fb6b92890d; four copies of one class, their differences are template fields here):

    moe_token_unpermute/op_kernel/moe_token_unpermute.h                       MoeTokenUnpermute, 12 keys
    moe_token_permute_grad/op_kernel/moe_token_permute_grad.h                 MoeTokenPermuteGrad (no probs)
    moe_token_permute_with_routing_map_grad/op_kernel/moe_token_unpermute.h   PWRM-grad key 0 (no probs)
    moe_token_unpermute_with_routing_map/op_kernel/
        moe_token_unpermute_with_routing_map_not_pad.h                        UWRM keys 0 / 1

For every output token t and hidden element h:

    out[t, h] = cast_out( sum_{k < K} w(t, k) * permuted[idx[t*K + k], h] )

with w = probs[t, k] (1 without probs). A term is skipped when idx >= num_out_tokens, with probs
when w == 0, and in PWRM-grad / UWRM (`skip_negative`) when idx < 0 (the -1 slots of
non-topK routing). The sum is fp32 and strictly sequential in k: the first slot initialises the
accumulator (zero-filled when that slot is skipped), later slots are added; the result is cast
with CAST_RINT. MoeTokenUnpermute and MoeTokenPermuteGrad do not skip negative indices: such a
slot is gathered from before the tensor, which the simulator reports as an OutOfBoundsError.

The stage takes (c, td, gm, tmpl): the core, GatherTilingData (the 12 struct fields), GatherGm
and GatherTemplate. fp16 / bf16 GM and UB data are uint16 bit patterns, told apart by the dtype
codes in the template, so one compilation serves bf16 and fp16. Probs move as bytes (their size
and type come from the template), so the stage compiles once for 2-byte tokens and once for fp32
tokens, whichever operator launches it and whatever its probs: `gather_phase` hands every
operator's tiling over as GatherTilingData and every input read-only.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import PipePhase
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore
from tiling.unpermute_gather import GATHER_FIELDS, gather_buffers  # noqa: F401  (re-exported for the ops)

GatherGm = namedtuple("GatherGm", ["permuted_tokens", "sorted_indices", "probs", "unpermuted_tokens"])
"""The GlobalTensors kernel G touches:
permuted_tokens (R, H) input rows; sorted_indices (N*K) int32 (row of each slot); probs (N*K) weights in
their own dtype, empty when the op has none (see gather_gm); unpermuted_tokens (N, H) output. gather_phase
hands the stage the inputs read-only and probs as bytes."""

GatherTemplate = namedtuple("GatherTemplate", ["token_t", "probs_t", "has_probs", "skip_negative", "used_core_num"])
"""Template parameters of one instantiation:
token_t: T1 as a ge dtype code (DT_BF16 / DT_FLOAT16 / DT_FLOAT);
probs_t: T3 as a ge dtype code (equal to token_t when there are no probs);
has_probs: the PROBS flag (0 / 1);
skip_negative: 1 where the kernel also skips idx < 0 (PWRM-grad, UWRM), 0 otherwise;
used_core_num: cores at or beyond it return at once (UWRM's gate: its block dim may exceed the cores the
    gather uses); the other ops launch exactly this many cores."""

GatherTilingData = namedtuple("GatherTilingData", GATHER_FIELDS)
"""MoeTokenUnpermuteTilingData: the 12 fields every operator's struct carries (see tiling.unpermute_gather)."""

# InitBuffer order of Init(); the probs buffers follow the fp32 temp buffers when those exist
TOKENS_INQUE = 0     # TQue<VECIN, 1>, buffer_num x AlignN(hidden piece, 512) tokens
INDICES_INQUE = 1    # TQue<VECIN, 1>, one chunk's indices
OUTQUE = 2           # TQue<VECOUT, 1>, one output piece (fp32 tokens: also the accumulator)
TEMP_BUFFER0 = 3     # TBuf, fp32 accumulator token_tensor0 (2-byte tokens only)
TEMP_BUFFER1 = 4     # TBuf, fp32 widened token token_tensor1 (2-byte tokens only)


@aicore
def _probs_inque(tmpl):
    """Queue index of probs_inque (temp_buffer2 is the next one)."""
    return 3 if tmpl.token_t == asc.DT_FLOAT else 5


@aicore
def _core_offsets(c, td):
    """Init(): (tokens_splited_remain of this core, first slot of its indices / probs, first element of its
    output). The first tokens_core_remain cores take one token more, appended to their remainder chunk."""
    core_len = td.tokens_core_length
    split_remain = td.tokens_splited_remain
    core_remain = td.tokens_core_remain
    i = c.block_idx
    if core_remain > 0 and i < core_remain:
        core_len += 1
        split_remain += 1
    block_length = core_len * td.top_k
    if core_remain > 0 and i >= core_remain:
        block_offset = (block_length + td.top_k) * core_remain + block_length * (i - core_remain)
        out_block_offset = ((core_len + 1) * core_remain + core_len * (i - core_remain)) * td.hidden_size
    else:
        block_offset = block_length * i
        out_block_offset = core_len * i * td.hidden_size
    return split_remain, block_offset, out_block_offset


@aicore
def _need_copy_in(c, td, tmpl, indices_local, probs_tensor, slot):
    """(needCopyIn, index, prob_value) of one slot: scalar reads of its index and prob from UB."""
    idx = asc.get_value(c, indices_local, slot)
    valid = idx < td.num_out_tokens
    if tmpl.skip_negative and idx < 0:      # IsValidInputIndex / the "-1 sentinel" test
        valid = False
    prob_value = np.float32(0.0)
    if tmpl.has_probs:
        prob_value = asc.get_value(c, probs_tensor, slot)
        valid = valid and prob_value != 0
    return valid, idx, prob_value


@aicore
def _copy_token_in(c, td, gm, token_idx, h_index, h_length):
    """CopyTokenIn: one hidden piece of permuted row `token_idx` into tokens_inque."""
    T = asc.ub_like(c, gm.permuted_tokens)
    tokens_local = asc.alloc_tensor(c, TOKENS_INQUE, T)
    offset = np.int64(token_idx) * td.hidden_size + h_index * td.hidden_splited_length
    src = asc.gm_at(gm.permuted_tokens, offset)
    if (h_length * T.itemsize) % BLOCK_BYTES == 0:
        asc.data_copy(c, tokens_local, src, h_length)
    else:
        asc.data_copy_pad(c, tokens_local, src, asc.DataCopyExtParams(1, h_length * T.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, TOKENS_INQUE, tokens_local)


@aicore
def _cal_first_token(c, gm, tmpl, token_tensor0, prob_value, h_length):
    """CalFirstToken: the accumulator := the widened piece (times its prob)."""
    T = asc.ub_like(c, gm.permuted_tokens)
    tokens_local = asc.de_que(c, TOKENS_INQUE, T)
    if tmpl.token_t != asc.DT_FLOAT:
        asc.cast(c, token_tensor0, asc.DT_FLOAT, tokens_local, tmpl.token_t, asc.CAST_NONE, h_length)
    else:
        byte_align32 = (h_length * 4 + BLOCK_BYTES - 1) & ~(BLOCK_BYTES - 1)
        # T1 is float: a UB -> UB copy of whole 32-byte blocks
        asc.data_copy(c, token_tensor0, asc.view_as(c, tokens_local, asc.ub_f32(c)), byte_align32 // 4)
    asc.free_tensor(c, TOKENS_INQUE, tokens_local)
    if tmpl.has_probs:
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.muls(c, token_tensor0, token_tensor0, prob_value, h_length)


@aicore
def _cal_token(c, gm, tmpl, token_tensor0, token_tensor1, prob_value, h_length):
    """CalToken: accumulator += the widened piece (times its prob)."""
    T = asc.ub_like(c, gm.permuted_tokens)
    tokens_local = asc.de_que(c, TOKENS_INQUE, T)
    if tmpl.token_t != asc.DT_FLOAT:
        asc.cast(c, token_tensor1, asc.DT_FLOAT, tokens_local, tmpl.token_t, asc.CAST_NONE, h_length)
        asc.free_tensor(c, TOKENS_INQUE, tokens_local)
        if tmpl.has_probs:
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.muls(c, token_tensor1, token_tensor1, prob_value, h_length)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.add(c, token_tensor0, token_tensor0, token_tensor1, h_length)
    else:
        tokens_fp32 = asc.view_as(c, tokens_local, asc.ub_f32(c))   # T1 is float: the same tensor
        if tmpl.has_probs:
            asc.muls(c, tokens_fp32, tokens_fp32, prob_value, h_length)   # in place, in the input buffer
            asc.pipe_barrier(c, asc.PIPE_V)
        asc.add(c, token_tensor0, token_tensor0, tokens_fp32, h_length)
        asc.free_tensor(c, TOKENS_INQUE, tokens_local)


@aicore
def _copy_out(c, td, tmpl, out_gm, token_tensor0, out_token_index, h_index, h_length):
    """CopyOut: cast the accumulator (CAST_RINT) into outque and write the row piece."""
    T = asc.ub_like(c, out_gm)
    if tmpl.token_t != asc.DT_FLOAT:
        temp_out_tensors = asc.alloc_tensor(c, OUTQUE, T)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.cast(c, temp_out_tensors, tmpl.token_t, token_tensor0, asc.DT_FLOAT, asc.CAST_RINT, h_length)
    else:
        temp_out_tensors = asc.view_as(c, token_tensor0, T)   # T1 is float: the accumulator is outque's buffer
    asc.en_que(c, OUTQUE, temp_out_tensors)
    temp_out_tensors = asc.de_que(c, OUTQUE, T)
    dst = asc.gm_at(out_gm, out_token_index * td.hidden_size + h_index * td.hidden_splited_length)
    if (h_length * T.itemsize) % BLOCK_BYTES == 0:
        asc.data_copy(c, dst, temp_out_tensors, h_length)
    else:
        asc.data_copy_pad(c, dst, temp_out_tensors, asc.DataCopyExtParams(1, h_length * T.itemsize, 0, 0))
    asc.free_tensor(c, OUTQUE, temp_out_tensors)


@aicore
def _cal_part_out_token(c, td, gm, tmpl, out_gm, indices_local, probs_tensor, temp0, temp1, start_token, h_index,
                        h_length, out_token_index):
    """CalPartOutToken: one hidden piece of one output token, over its K slots in order."""
    if tmpl.token_t == asc.DT_FLOAT:
        # T1 is float: accumulate straight in the output buffer
        token_tensor0 = asc.view_as(c, asc.alloc_tensor(c, OUTQUE, asc.ub_like(c, out_gm)), asc.ub_f32(c))
    else:
        token_tensor0 = temp0
    need_copy_in, token_idx, prob_value = _need_copy_in(c, td, tmpl, indices_local, probs_tensor, start_token)
    if need_copy_in:
        _copy_token_in(c, td, gm, token_idx, h_index, h_length)
        asc.pipe_barrier(c, asc.PIPE_V)
        _cal_first_token(c, gm, tmpl, token_tensor0, prob_value, h_length)
    else:
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.duplicate(c, token_tensor0, np.float32(0.0), h_length)
    for token_index in range(start_token + 1, start_token + td.top_k):
        need_copy_in, token_idx, prob_value = _need_copy_in(c, td, tmpl, indices_local, probs_tensor, token_index)
        if need_copy_in:
            _copy_token_in(c, td, gm, token_idx, h_index, h_length)
            asc.pipe_barrier(c, asc.PIPE_V)
            _cal_token(c, gm, tmpl, token_tensor0, temp1, prob_value, h_length)
    _copy_out(c, td, tmpl, out_gm, token_tensor0, out_token_index, h_index, h_length)


@aicore
def _cal_multi_out_token(c, td, gm, tmpl, indices_gm, probs_gm, out_gm, temp0, temp1, temp2, out_offset,
                         out_tokens_number):
    """CalMultiOutToken: one chunk of tokens: its indices (and probs, widened to fp32) in, then each token's
    hidden pieces (CalSingleOutToken)."""
    I = asc.ub_like(c, gm.sorted_indices)
    slots = out_tokens_number * td.top_k
    in_offset = out_offset * td.top_k
    indices_local = asc.alloc_tensor(c, INDICES_INQUE, I)
    asc.data_copy_pad(c, indices_local, asc.gm_at(indices_gm, in_offset),
                      asc.DataCopyExtParams(1, slots * I.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, INDICES_INQUE, indices_local)
    probs_tensor = temp2
    probs_inque = _probs_inque(tmpl)
    if tmpl.has_probs:
        # probs travel as bytes (one compiled stage for every T3); T3's size comes from the template
        B = asc.ub_u8(c)
        prob_bytes = 4 if tmpl.probs_t == asc.DT_FLOAT else 2
        temp_probs_tensor = asc.alloc_tensor(c, probs_inque, B)
        asc.data_copy_pad(c, temp_probs_tensor, asc.gm_at(probs_gm, in_offset * prob_bytes),
                          asc.DataCopyExtParams(1, slots * prob_bytes, 0, 0), asc.NO_PAD)
        asc.en_que(c, probs_inque, temp_probs_tensor)
        temp_probs_tensor = asc.de_que(c, probs_inque, B)
        if tmpl.probs_t != asc.DT_FLOAT:
            asc.cast(c, probs_tensor, asc.DT_FLOAT, asc.view_as(c, temp_probs_tensor, asc.ub_u16(c)), tmpl.probs_t,
                     asc.CAST_NONE, slots)
            asc.free_tensor(c, probs_inque, temp_probs_tensor)
            asc.pipe_barrier(c, asc.PIPE_V)
        else:
            probs_tensor = asc.view_as(c, temp_probs_tensor, asc.ub_f32(c))   # T3 is float: the queue buffer
    indices_local = asc.de_que(c, INDICES_INQUE, I)
    for out_token_idx in range(out_tokens_number):
        # CalSingleOutToken: the full hidden pieces, then the remainder piece
        start_token = out_token_idx * td.top_k
        for h_index in range(td.hidden_splited_num):
            _cal_part_out_token(c, td, gm, tmpl, out_gm, indices_local, probs_tensor, temp0, temp1, start_token,
                                h_index, td.hidden_splited_length, out_offset + out_token_idx)
        if td.hidden_splited_remain > 0:
            _cal_part_out_token(c, td, gm, tmpl, out_gm, indices_local, probs_tensor, temp0, temp1, start_token,
                                td.hidden_splited_num, td.hidden_splited_remain, out_offset + out_token_idx)
    asc.free_tensor(c, INDICES_INQUE, indices_local)
    if tmpl.has_probs and tmpl.probs_t == asc.DT_FLOAT:
        asc.free_tensor(c, probs_inque, probs_tensor)


@global_aicore
def gather_process(c, td, gm, tmpl):
    """KernelMoeTokenUnpermute::Init + Process on one core: its token chunks, then its remainder chunk."""
    if c.block_idx >= tmpl.used_core_num:
        return
    split_remain, block_offset, out_block_offset = _core_offsets(c, td)
    indices_gm = asc.gm_at(gm.sorted_indices, block_offset)
    probs_gm = asc.gm_at(gm.probs, block_offset * (4 if tmpl.probs_t == asc.DT_FLOAT else 2))   # bytes
    out_gm = asc.gm_at(gm.unpermuted_tokens, out_block_offset)
    F32 = asc.ub_f32(c)
    temp0 = F32[0:0]
    temp1 = F32[0:0]
    temp2 = F32[0:0]
    if tmpl.token_t != asc.DT_FLOAT:
        temp0 = asc.tbuf_get(c, TEMP_BUFFER0, F32)
        temp1 = asc.tbuf_get(c, TEMP_BUFFER1, F32)
    if tmpl.has_probs and tmpl.probs_t != asc.DT_FLOAT:
        temp2 = asc.tbuf_get(c, _probs_inque(tmpl) + 1, F32)
    for i in range(td.tokens_splited_num):
        _cal_multi_out_token(c, td, gm, tmpl, indices_gm, probs_gm, out_gm, temp0, temp1, temp2,
                             i * td.tokens_splited_length, td.tokens_splited_length)
    if split_remain > 0:
        _cal_multi_out_token(c, td, gm, tmpl, indices_gm, probs_gm, out_gm, temp0, temp1, temp2,
                             td.tokens_splited_num * td.tokens_splited_length, split_remain)


# --- host side ---------------------------------------------------------------------------------------------
def gather_tiling_data(td) -> GatherTilingData:
    """The 12 gather fields of any tiling struct (namedtuple or field dict) as GatherTilingData of Python ints:
    every operator then hands the stage the same numba type, so they share its compilation."""
    get = td.__getitem__ if isinstance(td, dict) else td.__getattribute__
    return GatherTilingData(*(int(get(name)) for name in GATHER_FIELDS))


def gather_template(token_t: int, probs_t: int | None = None, *, skip_negative: bool,
                    used_core_num: int) -> GatherTemplate:
    """GatherTemplate of one instantiation; probs_t None = no probs (PROBS false)."""
    has_probs = probs_t is not None
    return GatherTemplate(int(token_t), int(probs_t if has_probs else token_t), int(has_probs), int(skip_negative),
                          int(used_core_num))


def _read_only(g, as_bytes: bool = False):
    """GlobalTensor g as the stage receives it: read-only (and, for probs, as bytes with a byte offset), so the
    compiled stage does not depend on the caller's array flags or on the probs dtype."""
    data = g.data.view(np.uint8) if as_bytes else g.data.view()
    data.flags.writeable = False
    offset = g.offset * g.data.itemsize if as_bytes else g.offset
    return asc.GlobalTensor(data, g.id, offset)


def gather_gm(permuted_tokens, sorted_indices, probs, unpermuted_tokens) -> GatherGm:
    """GatherGm of four GlobalTensors (probs None: the op has none; it becomes an empty tensor)."""
    if probs is None:
        probs = asc.GlobalTensor(np.zeros(0, dtype=np.uint8), -1, 0)
    return GatherGm(permuted_tokens, sorted_indices, probs, unpermuted_tokens)


def _stage_gm(gm: GatherGm) -> GatherGm:
    return GatherGm(_read_only(gm.permuted_tokens), _read_only(gm.sorted_indices), _read_only(gm.probs, True),
                    gm.unpermuted_tokens)


def gather_phase(pipe: str, select, buffers) -> PipePhase:
    """Kernel G as one TPipe phase with the single stage `gather_process`.

    `select(*launch_args)` returns (td, GatherGm, GatherTemplate); td is any namedtuple (or dict) carrying the
    12 GATHER_FIELDS. `buffers` are the phase's InitBuffer names: gather_buffers(tokens_fp32, has_probs,
    probs_fp32) for the instantiation, matching tiling.unpermute_gather.gather_ub_plan(..., pipe=pipe).
    """
    def stage_args(*launch_args):
        td, gm, tmpl = select(*launch_args)
        return gather_tiling_data(td), _stage_gm(gm), GatherTemplate(*(int(v) for v in tmpl))
    return PipePhase(pipe, tuple(buffers), (gather_process,), stage_args)
