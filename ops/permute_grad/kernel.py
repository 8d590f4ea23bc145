"""Kernels of MoeTokenPermuteGrad ([M26] op_kernel/moe_token_permute_grad.{cpp,h}).

    keys 0 / 2 / 4 (bf16 / fp16 / fp32)   KernelMoeTokenUnpermute<T, int32_t, T, PROBS=false>: kernel G
                                          (ops.common.unpermute_gather), the same two compilations every
                                          kernel-G operator uses; negative indices are not skipped.

Ascend 950 has no MoeTokenPermuteGrad kernel: the aclnn calls l0 MoeInitRoutingV2Grad (arch35,
moe_init_routing_v2_grad_apt.cpp, ACTIVE mode with activeNum = rows of the gradient). Its three templates
(full-load, split-H, regbase) give the same results, and they differ from kernel G's:

* a slot whose index is < 0 or >= activeNum contributes a zero row (kernel G: only >= is skipped);
* the fp32 sum starts from +0.0 and runs over chunks of `k_chunk` slots (all K in one chunk unless the
  regbase template is chosen); inside a chunk the slots go in groups of four, added pairwise,
  s += ((x0 + x1) + (x2 + x3)), and the 1..3 slots left at the chunk's end are added one by one;
* the result is cast with CAST_RINT, as in kernel G. A zero row's sign never matters (s cannot be -0.0).

`arch35_gather_process` is that sum on kernel G's tiling, buffers and loop nest (the simulator's stand-in
for the l0 kernel; compiled only when a 950 profile runs). Kernel G holds two fp32 vectors per hidden
piece, and the pairwise sum needs four, so each piece is processed in two halves of at most
AlignUp(hidden_splited_length, 512) / 2 elements:

    2-byte tokens: s = temp_buffer0[:half], w = temp_buffer0[half:], p = temp_buffer1[:half],
                   q = temp_buffer1[half:] (w is the widening scratch)
    fp32 tokens:   s = outque[:half], p = outque[half:], the right pair summed in place in its
                   tokens_inque buffer (two buffers held at once; buffer_num is at least 2)

A zero row added to a partial sum leaves it unchanged (up to a zero's sign, which cannot reach s), so a
skipped slot is left out of its pair instead of being loaded as zeros.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, PipePhase
from ascend_sim._jit import aicore, global_aicore
from tiling.moe_token_permute_grad import PIPE

from ..common.unpermute_gather import (INDICES_INQUE, OUTQUE, TEMP_BUFFER0, TEMP_BUFFER1, TOKENS_INQUE, GatherGm,
                                       _core_offsets, _read_only, gather_buffers, gather_gm, gather_phase,
                                       gather_tiling_data)

OP = "MoeTokenPermuteGrad"
L0_950 = "MoeInitRoutingV2Grad"
BLOCK_SIZE = 32

GmTensors = namedtuple("GmTensors", [
    "permuted_output_grad",   # (R, H) gradient rows in their carrier dtype
    "sorted_indices",         # (N * topK,) int32: the permuted row of every slot
    "input_grad",             # (N, H) output
])

Arch35Template = namedtuple("Arch35Template", ["token_t", "k_chunk", "used_core_num"])
"""token_t: T as a ge dtype code; k_chunk: slots summed per chunk (kUbFactor of the regbase template, topK
otherwise); used_core_num: block dim (cores beyond it return)."""


# --- Ascend 950: MoeInitRoutingV2Grad's sum on kernel G's buffers ------------------------------------------
@aicore
def _slot_valid(c, td, indices_local, slot):
    """IsInvalidRowIdx<ACTIVE_MODE> negated: (valid, row) of one slot."""
    idx = asc.get_value(c, indices_local, slot)
    return idx >= 0 and idx < td.num_out_tokens, idx


@aicore
def _row_in(c, td, gm, row, elem_offset, length):
    """One part of permuted row `row` into a tokens_inque buffer (DataCopy when whole blocks, else DataCopyPad)."""
    T = asc.ub_like(c, gm.permuted_tokens)
    local = asc.alloc_tensor(c, TOKENS_INQUE, T)
    src = asc.gm_at(gm.permuted_tokens, np.int64(row) * td.hidden_size + elem_offset)
    if (length * T.itemsize) % BLOCK_SIZE == 0:
        asc.data_copy(c, local, src, length)
    else:
        asc.data_copy_pad(c, local, src, asc.DataCopyExtParams(1, length * T.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, TOKENS_INQUE, local)
    return asc.de_que(c, TOKENS_INQUE, T)


@aicore
def _widen_in(c, td, gm, tmpl, row, elem_offset, length, dst):
    """2-byte tokens: load a row part and Cast it to fp32 into dst (CAST_NONE, exact)."""
    local = _row_in(c, td, gm, row, elem_offset, length)
    asc.cast(c, dst, asc.DT_FLOAT, local, tmpl.token_t, asc.CAST_NONE, length)
    asc.free_tensor(c, TOKENS_INQUE, local)


@aicore
def _pair16(c, td, gm, tmpl, indices_local, slot, elem_offset, length, dst, w):
    """dst := x[slot] + x[slot + 1] over the valid ones (2-byte tokens); returns how many were valid."""
    v0, r0 = _slot_valid(c, td, indices_local, slot)
    v1, r1 = _slot_valid(c, td, indices_local, slot + 1)
    if v0:
        _widen_in(c, td, gm, tmpl, r0, elem_offset, length, dst)
    if v1:
        _widen_in(c, td, gm, tmpl, r1, elem_offset, length, w if v0 else dst)
        if v0:
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.add(c, dst, dst, w, length)
    return int(v0) + int(v1)


@aicore
def _part16(c, td, gm, tmpl, indices_local, temp0, temp1, half, start, elem_offset, length):
    """The fp32 sum of one part of one output token (2-byte tokens) into temp0[:half]."""
    s = temp0[0:half]
    w = temp0[half:]
    p = temp1[0:half]
    q = temp1[half:]
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.duplicate(c, s, np.float32(0.0), length)
    k0 = 0
    while k0 < td.top_k:
        k1 = min(k0 + tmpl.k_chunk, td.top_k)
        j = k0
        while j + 3 < k1:
            nl = _pair16(c, td, gm, tmpl, indices_local, start + j, elem_offset, length, p, w)
            nr = _pair16(c, td, gm, tmpl, indices_local, start + j + 2, elem_offset, length, q, w)
            asc.pipe_barrier(c, asc.PIPE_V)
            if nl > 0 and nr > 0:
                asc.add(c, p, p, q, length)
                asc.pipe_barrier(c, asc.PIPE_V)
                asc.add(c, s, s, p, length)
            elif nl > 0:
                asc.add(c, s, s, p, length)
            elif nr > 0:
                asc.add(c, s, s, q, length)
            j += 4
        while j < k1:
            v, r = _slot_valid(c, td, indices_local, start + j)
            if v:
                _widen_in(c, td, gm, tmpl, r, elem_offset, length, w)
                asc.pipe_barrier(c, asc.PIPE_V)
                asc.add(c, s, s, w, length)
            j += 1
        k0 = k1
    return s


@aicore
def _pair32_into(c, td, gm, indices_local, slot, elem_offset, length, dst):
    """fp32 tokens, left pair: dst := x[slot] + x[slot + 1] over the valid ones; returns how many."""
    F32 = asc.ub_f32(c)
    v0, r0 = _slot_valid(c, td, indices_local, slot)
    v1, r1 = _slot_valid(c, td, indices_local, slot + 1)
    if v0 and v1:
        a = _row_in(c, td, gm, r0, elem_offset, length)
        b = _row_in(c, td, gm, r1, elem_offset, length)
        asc.add(c, dst, asc.view_as(c, a, F32), asc.view_as(c, b, F32), length)
        asc.free_tensor(c, TOKENS_INQUE, a)
        asc.free_tensor(c, TOKENS_INQUE, b)
    elif v0 or v1:
        a = _row_in(c, td, gm, r0 if v0 else r1, elem_offset, length)
        # a UB -> UB copy of whole 32-byte blocks, as kernel G's CalFirstToken does
        asc.data_copy(c, dst, asc.view_as(c, a, F32), ((length * 4 + BLOCK_SIZE - 1) // BLOCK_SIZE * BLOCK_SIZE) // 4)
        asc.free_tensor(c, TOKENS_INQUE, a)
    return int(v0) + int(v1)


@aicore
def _part32(c, td, gm, tmpl, indices_local, out_f32, half, start, elem_offset, length):
    """The fp32 sum of one part of one output token (fp32 tokens) into out_f32[:half] (the outque buffer)."""
    F32 = asc.ub_f32(c)
    s = out_f32[0:half]
    p = out_f32[half:]
    asc.duplicate(c, s, np.float32(0.0), length)
    k0 = 0
    while k0 < td.top_k:
        k1 = min(k0 + tmpl.k_chunk, td.top_k)
        j = k0
        while j + 3 < k1:
            nl = _pair32_into(c, td, gm, indices_local, start + j, elem_offset, length, p)
            v2, r2 = _slot_valid(c, td, indices_local, start + j + 2)
            v3, r3 = _slot_valid(c, td, indices_local, start + j + 3)
            asc.pipe_barrier(c, asc.PIPE_V)
            if v2 or v3:
                # the right pair is summed in place in its own tokens_inque buffer
                cc = _row_in(c, td, gm, r2 if v2 else r3, elem_offset, length)
                cf = asc.view_as(c, cc, F32)
                if v2 and v3:
                    d = _row_in(c, td, gm, r3, elem_offset, length)
                    asc.add(c, cf, cf, asc.view_as(c, d, F32), length)
                    asc.free_tensor(c, TOKENS_INQUE, d)
                    asc.pipe_barrier(c, asc.PIPE_V)
                if nl > 0:
                    asc.add(c, p, p, cf, length)
                    asc.pipe_barrier(c, asc.PIPE_V)
                    asc.add(c, s, s, p, length)
                else:
                    asc.add(c, s, s, cf, length)
                asc.free_tensor(c, TOKENS_INQUE, cc)
            elif nl > 0:
                asc.add(c, s, s, p, length)
            j += 4
        while j < k1:
            v, r = _slot_valid(c, td, indices_local, start + j)
            if v:
                x = _row_in(c, td, gm, r, elem_offset, length)
                asc.pipe_barrier(c, asc.PIPE_V)
                asc.add(c, s, s, asc.view_as(c, x, F32), length)
                asc.free_tensor(c, TOKENS_INQUE, x)
            j += 1
        k0 = k1


@aicore
def _arch35_part(c, td, gm, tmpl, out_gm, indices_local, temp0, temp1, start, elem_offset, length, out_token):
    """One part (at most half a hidden piece) of one output token: sum, cast (CAST_RINT), copy out."""
    T = asc.ub_like(c, out_gm)
    half = ((td.hidden_splited_length + 511) // 512 * 512) // 2
    out_local = asc.alloc_tensor(c, OUTQUE, T)
    if tmpl.token_t == asc.DT_FLOAT:
        _part32(c, td, gm, tmpl, indices_local, asc.view_as(c, out_local, asc.ub_f32(c)), half, start, elem_offset,
                length)
    else:
        s = _part16(c, td, gm, tmpl, indices_local, temp0, temp1, half, start, elem_offset, length)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.cast(c, out_local, tmpl.token_t, s, asc.DT_FLOAT, asc.CAST_RINT, length)
    asc.en_que(c, OUTQUE, out_local)
    out_local = asc.de_que(c, OUTQUE, T)
    dst = asc.gm_at(out_gm, np.int64(out_token) * td.hidden_size + elem_offset)
    if (length * T.itemsize) % BLOCK_SIZE == 0:
        asc.data_copy(c, dst, out_local, length)
    else:
        asc.data_copy_pad(c, dst, out_local, asc.DataCopyExtParams(1, length * T.itemsize, 0, 0))
    asc.free_tensor(c, OUTQUE, out_local)


@aicore
def _arch35_piece(c, td, gm, tmpl, out_gm, indices_local, temp0, temp1, start, h_index, h_length, out_token):
    """One hidden piece of one output token, in halves (see the module docstring)."""
    half = ((td.hidden_splited_length + 511) // 512 * 512) // 2
    base = h_index * td.hidden_splited_length
    off = 0
    while off < h_length:
        length = min(half, h_length - off)
        _arch35_part(c, td, gm, tmpl, out_gm, indices_local, temp0, temp1, start, base + off, length, out_token)
        off += length


@aicore
def _arch35_chunk(c, td, gm, tmpl, indices_gm, out_gm, temp0, temp1, out_offset, out_tokens_number):
    """One chunk of tokens: its indices in, then every token's hidden pieces."""
    I = asc.ub_like(c, gm.sorted_indices)
    slots = out_tokens_number * td.top_k
    indices_local = asc.alloc_tensor(c, INDICES_INQUE, I)
    asc.data_copy_pad(c, indices_local, asc.gm_at(indices_gm, out_offset * td.top_k),
                      asc.DataCopyExtParams(1, slots * I.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, INDICES_INQUE, indices_local)
    indices_local = asc.de_que(c, INDICES_INQUE, I)
    for t in range(out_tokens_number):
        start = t * td.top_k
        for h_index in range(td.hidden_splited_num):
            _arch35_piece(c, td, gm, tmpl, out_gm, indices_local, temp0, temp1, start, h_index,
                          td.hidden_splited_length, out_offset + t)
        if td.hidden_splited_remain > 0:
            _arch35_piece(c, td, gm, tmpl, out_gm, indices_local, temp0, temp1, start, td.hidden_splited_num,
                          td.hidden_splited_remain, out_offset + t)
    asc.free_tensor(c, INDICES_INQUE, indices_local)


@global_aicore
def arch35_gather_process(c, td, gm, tmpl):
    """Kernel G's Init + Process with MoeInitRoutingV2Grad's (arch35) summation, on one core."""
    if c.block_idx >= tmpl.used_core_num:
        return
    split_remain, block_offset, out_block_offset = _core_offsets(c, td)
    indices_gm = asc.gm_at(gm.sorted_indices, block_offset)
    out_gm = asc.gm_at(gm.unpermuted_tokens, out_block_offset)
    F32 = asc.ub_f32(c)
    temp0 = F32[0:0]
    temp1 = F32[0:0]
    if tmpl.token_t != asc.DT_FLOAT:
        temp0 = asc.tbuf_get(c, TEMP_BUFFER0, F32)
        temp1 = asc.tbuf_get(c, TEMP_BUFFER1, F32)
    for i in range(td.tokens_splited_num):
        _arch35_chunk(c, td, gm, tmpl, indices_gm, out_gm, temp0, temp1, i * td.tokens_splited_length,
                      td.tokens_splited_length)
    if split_remain > 0:
        _arch35_chunk(c, td, gm, tmpl, indices_gm, out_gm, temp0, temp1,
                      td.tokens_splited_num * td.tokens_splited_length, split_remain)


# --- host side ----------------------------------------------------------------------------------------------
def _gather_select(td, gm, tmpl):
    """Kernel G's (td, GatherGm, GatherTemplate): no probs."""
    return td, gather_gm(gm.permuted_output_grad, gm.sorted_indices, None, gm.input_grad), tmpl


def _arch35_args(td, gm, tmpl):
    """What the 950 stage receives: the 12 fields, read-only inputs, the template as ints."""
    g = gather_gm(gm.permuted_output_grad, gm.sorted_indices, None, gm.input_grad)
    return (gather_tiling_data(td),
            GatherGm(_read_only(g.permuted_tokens), _read_only(g.sorted_indices), _read_only(g.probs, True),
                     g.unpermuted_tokens),
            Arch35Template(*(int(v) for v in tmpl)))


KERNELS = {
    tokens_fp32: Kernel(OP, "KernelMoeTokenUnpermute",
                        (gather_phase(PIPE, _gather_select, gather_buffers(tokens_fp32, False, False)),))
    for tokens_fp32 in (False, True)
}
"""KERNELS[tokens are fp32]: kernel G (keys 0 / 2 share the 2-byte compilation, key 4 the fp32 one)."""

ARCH35_KERNELS = {
    tokens_fp32: Kernel(L0_950, "MoeInitRoutingV2GradCompute (simulated on kernel G's buffers)",
                        (PipePhase(PIPE, gather_buffers(tokens_fp32, False, False), (arch35_gather_process,),
                                   _arch35_args),))
    for tokens_fp32 in (False, True)
}
"""ARCH35_KERNELS[tokens are fp32]: the Ascend 950 path (see the module docstring)."""
