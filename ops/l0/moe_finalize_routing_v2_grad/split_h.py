"""MoeFinalizeRoutingV2GradRegBaseCutH<T1, int32, T3, IsBiasExist=false>, key 20012.

source: moe/moe_finalize_routing_v2_grad/op_kernel/arch35/moe_finalize_routing_v2_grad_regbase_cut_h.h (the
cacheIdx % 256 cache and the level1Temp / level2Temp final sum) with the VFs of moe_finalize_routing_v2_grad_regbase.h
@ 25fb6b92890d.

Slot j (one core takes a run of slots, tiling compute split) of token t = j // topK, row = expanded_row_idx[j]:

    grad_expanded_x[row] = grad_y[t] * scales[j]                      (fp32 Muls, CAST_RINT to T)
    grad_scales[j]       = sum over h of expanded_x[row, h] * grad_y[t, h]   (fp32, the order below; CAST_RINT to S)

when 0 <= row < expandedXDim0; otherwise nothing is written to grad_expanded_x (no zeroing in dropPadMode 0: the
row keeps what the caller's buffer held) and the gradient is exactly +0 (every cache entry stays +0).

The hidden row is cut into blocks of at most mainFactor (M) elements; mainBlockNum (B) is the largest power of two
with B * M <= H and the F = H - B * M elements past them are folded onto the first blocks in halves of
foldFactor = M / 2:

* overlap part: foldBlockNum pairs (half block i at i * M/2 | fold half i at B * M + i * M/2), main triple;
* fold tail: foldTailBlockNum 2 (half (fb) | M/2 fold elements, then half (fb + 1) | foldTailLen - M/2) or 1
  (half fb | foldTailLen elements, then half fb + 1 alone), the fold triple where the block is shorter than the
  main quotient;
* no-overlap part: the remaining whole blocks of M, main triple.

A fold piece is copied in by DataCopy of CeilAlign(len, 32 B) elements: up to 31 bytes past the piece, so past the
row (the next row's first elements, never used: every VF masks those lanes off). For the GM tensor's last row the
bytes past its end lie in the device allocation (rounded up to at least 32 bytes) and are undefined: the model
copies the tensor's bytes and poisons the rest of the UB block. Copy-out blockLen is static_cast<uint16_t>(len *
sizeof(T)): a block of 64 KiB or more (a custom UB of ~390 KiB or more) writes len * sizeof(T) mod 65536 bytes.

grad_scales' fp32 order: per block VfCalGradScale (Q = the triple's quotient, R = len % Q): product chunk i of the
head (64 lanes at i * 64) takes tail chunk i (at Q + i * 64) lane-wise where the tail has lanes, each chunk is
ReduceSum'd into binaryAddSum[i], the Q / 64 sums are folded in halves of 64-lane vectors k times and the first
lastNum ReduceSum'd into cache level 0 at cacheIdx % 256. Every 256 blocks level 0 (4 x 64 lanes: (x1 + x3) +
(x2 + x4), then ReduceSum) goes to level 1; level 1 likewise to level 2; the result is level0 (+ level2) + level1.
A register ReduceSum is rb.vreduce_sum: a pairwise tree over the 64 lanes, masked-off lanes +0 (the lane order of
the 950's ReduceSum is not published; this is the model's assumption, shared with the other arch35 kernels).
UpdateCache's level-2 test holds for 256 consecutive blocks from block 65536 on (it tests cacheIdx / 256, not
cacheIdx % 256), zeroing level 0 after each: followed literally (65536 blocks, never reached by the tests).

dropPadMode 1 zeroes grad_expanded_x first (InitOutputGm over the init-out split) and SyncAll()s before the pass
(the schedule has an init stage, SYNC_ALL, then the pass). The bias template (20022) is not modelled.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim import regbase as rb
from ascend_sim.check import RaceWaiver
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore
from ops.l0.moe_init_routing_v2_grad.base import to_ub_end
from tiling.moe_finalize_routing_v2_grad import SPLIT_H_FIELDS

from .base import compute_rows, init_out_rows, load_t, store_t

# named after the C++ struct (baseParams flattened); importable under its own name for numba's disk cache
MoeFinalizeRoutingV2GradSplitHTilingData = namedtuple("MoeFinalizeRoutingV2GradSplitHTilingData", SPLIT_H_FIELDS)

GRAD_Y_QUE, EXPANDED_X_QUE, GRAD_EXPANDED_X_QUE, GRAD_SCALES_QUE, CACHE_BUF, SUM_BUF = range(6)
BUFFERS = ("gradYInQueue", "expandedXInQueue", "gradExpandedXOutQueue", "gradScalesOutQueue", "bianryAddCacheBuf",
           "binaryAddSumBuf")
"""InitBuffer order of Init() without bias (tiling.moe_finalize_routing_v2_grad.ub_plan, key 20012)."""

VL_F32 = 64
CACHE_BUFF_SIZE = 256          # block sums per cache level
MAX_CACHE_DEPTH = 3
CACHE_LEVEL1_IDX = 256
CACHE_LEVEL2_IDX = 512
F32_BYTES = 4

# registers: products / loads 0..5, sums 6..7, 16-bit scratch 8 (base.load_t / store_t use 30); masks: all 0, loop 1,
# VL1 2
_XQ, _XR, _GQ, _GR, _TMP, _X3, _SUM, _SUM2, _HALF = range(9)
_M_ALL, _M_LOOP, _M_ONE = 0, 1, 2


@aicore
def _vl1(c, m):
    """CreateMask<float, MaskPattern::VL1>: lane 0 only."""
    rb.update_mask(c, m, F32_BYTES, 1)


@aicore
def _binary_add(c, cache, sums, k_loop, add_loop, last_num, pos):
    """BinaryAddVF (inside VfCalGradScale's VF): k_loop halvings of the 64-lane block-sum vectors, then ReduceSum
    of the first last_num sums into cache[pos]."""
    q = rb.vreg_f32(c, _XQ)
    r = rb.vreg_f32(c, _XR)
    s = rb.vreg_f32(c, _SUM)
    main = rb.mreg(c, _M_ALL)
    one = rb.mreg(c, _M_ONE)
    loop = rb.mreg(c, _M_LOOP)
    rb.create_mask(c, main, F32_BYTES, rb.PAT_ALL)
    _vl1(c, one)
    cur = add_loop
    for _ in range(k_loop & 0xFFFF):
        cur = cur // 2
        for j in range(cur):
            rb.reg_load(c, q, sums, j * VL_F32, rb.LOAD_NORM)
            rb.reg_load(c, r, sums, (j + cur) * VL_F32, rb.LOAD_NORM)
            rb.vadd(c, q, q, r, main)
            rb.reg_store(c, sums, q, j * VL_F32, main)
        # LocalMemBar<VEC_STORE, VEC_LOAD>: the model's stores land at once
    rb.update_mask(c, loop, F32_BYTES, last_num)
    rb.reg_load(c, s, sums, 0, rb.LOAD_NORM)
    rb.vreduce_sum(c, s, s, loop)
    rb.reg_store_first_element(c, cache, s, pos, one)


@aicore
def vf_cal_grad_scale(c, x_t, x_ub, gy_ub, quotient, k_loop, last_num, reduce_num, cache, pos, sums_buf):
    """VfCalGradScale: cache[pos] = the fp32 sum of x_ub[:reduce_num] * gy_ub[:reduce_num] (module docstring)."""
    remainder = np.uint32(reduce_num % quotient)
    remainder_loop = np.uint16((remainder + VL_F32 - 1) // VL_F32)
    remainder_general = remainder_loop - 1 if remainder_loop > 0 else 0
    quotient_loop = np.uint16((quotient + VL_F32 - 1) // VL_F32)
    add_loop = np.uint16(quotient // VL_F32 // VL_F32)
    # the raw __local_mem__ pointers: whole-register loads run past reduce_num (masked lanes) and past the buffer
    xs = to_ub_end(c, x_ub)
    gs = to_ub_end(c, gy_ub)
    if not rb.vec_scope_begin(c):
        return
    xq = rb.vreg_f32(c, _XQ)
    xr = rb.vreg_f32(c, _XR)
    gq = rb.vreg_f32(c, _GQ)
    gr = rb.vreg_f32(c, _GR)
    tmp = rb.vreg_f32(c, _TMP)
    s = rb.vreg_f32(c, _SUM)
    main = rb.mreg(c, _M_ALL)
    one = rb.mreg(c, _M_ONE)
    loop = rb.mreg(c, _M_LOOP)
    rb.create_mask(c, main, F32_BYTES, rb.PAT_ALL)
    _vl1(c, one)
    sreg = int(remainder)
    # step 1: head chunks whose tail chunk is full
    for i in range(remainder_general):
        sreg = rb.update_mask(c, loop, F32_BYTES, sreg)
        load_t(c, x_t, xs, xq, main, i * VL_F32)                  # LoadTwoTensorForDtypeT
        load_t(c, x_t, xs, xr, loop, i * VL_F32 + quotient)
        load_t(c, x_t, gs, gq, main, i * VL_F32)
        load_t(c, x_t, gs, gr, loop, i * VL_F32 + quotient)
        rb.vmul(c, xq, xq, gq, main)
        rb.vmul(c, xr, xr, gr, loop)
        rb.vadd(c, xq, xq, xr, loop)
        rb.vreduce_sum(c, s, xq, loop)
        rb.reg_store_first_element(c, sums_buf, s, i, one)
    # step 2: the head chunk of the last (partial or absent) tail chunk
    sreg = rb.update_mask(c, loop, F32_BYTES, sreg)
    base = remainder_general * VL_F32
    load_t(c, x_t, xs, xq, main, base)
    load_t(c, x_t, xs, xr, loop, base + quotient)
    load_t(c, x_t, gs, gq, main, base)
    load_t(c, x_t, gs, gr, loop, base + quotient)
    rb.vmul(c, xq, xq, gq, main)
    rb.vmul(c, xr, xr, gr, loop)
    rb.vadd(c, tmp, xq, xr, loop)
    rb.vcopy(c, xq, tmp, loop, rb.MERGING)
    rb.vreduce_sum(c, s, xq, main)
    rb.reg_store_first_element(c, sums_buf, s, remainder_general, one)
    # step 3: head chunks with no tail (from remainder_loop: with R == 0 chunk 0 is summed again, same value)
    for i in range(np.uint16(quotient_loop - remainder_loop)):
        load_t(c, x_t, xs, xq, main, (i + remainder_loop) * VL_F32)
        load_t(c, x_t, gs, gq, main, (i + remainder_loop) * VL_F32)
        rb.vmul(c, xq, xq, gq, main)
        rb.vreduce_sum(c, s, xq, main)
        rb.reg_store_first_element(c, sums_buf, s, remainder_loop + i, one)
    # LocalMemBar<VEC_STORE, VEC_LOAD>
    _binary_add(c, cache, sums_buf, k_loop, add_loop, last_num, pos)
    rb.vec_scope_end(c)


@aicore
def cache_reduce_sum(c, dst, dst_off, src, src_off, idx):
    """CacheReduceSum: dst[dst_off + idx] = ReduceSum((x1 + x3) + (x2 + x4)) of the 4 x 64 floats at src_off."""
    if not rb.vec_scope_begin(c):
        return
    x1 = rb.vreg_f32(c, _XQ)
    x2 = rb.vreg_f32(c, _XR)
    x3 = rb.vreg_f32(c, _GQ)
    x4 = rb.vreg_f32(c, _GR)
    main = rb.mreg(c, _M_ALL)
    one = rb.mreg(c, _M_ONE)
    rb.create_mask(c, main, F32_BYTES, rb.PAT_ALL)
    rb.reg_load(c, x1, src, src_off, rb.LOAD_NORM)
    rb.reg_load(c, x2, src, src_off + VL_F32, rb.LOAD_NORM)
    rb.reg_load(c, x3, src, src_off + 2 * VL_F32, rb.LOAD_NORM)
    rb.reg_load(c, x4, src, src_off + 3 * VL_F32, rb.LOAD_NORM)
    rb.vadd(c, x1, x1, x3, main)           # sum1
    rb.vadd(c, x2, x2, x4, main)           # sum2
    rb.vadd(c, x1, x1, x2, main)           # sum12
    rb.vreduce_sum(c, x1, x1, main)
    _vl1(c, one)
    rb.reg_store_first_element(c, dst, x1, dst_off + idx, one)
    rb.vec_scope_end(c)


@aicore
def update_cache(c, cache, cache_idx):
    """UpdateCache(cacheIdx) after a block: a full level 0 goes to level 1 (and is zeroed); the level-2 test is on
    cacheIdx / 256 (see the module docstring)."""
    if cache_idx % CACHE_BUFF_SIZE == 0 and cache_idx > 0:
        cache_reduce_sum(c, cache, CACHE_LEVEL1_IDX, cache, 0, cache_idx // CACHE_BUFF_SIZE - 1)
        asc.duplicate(c, cache, 0.0, CACHE_BUFF_SIZE)
    filled = cache_idx // CACHE_BUFF_SIZE
    if filled % CACHE_BUFF_SIZE == 0 and filled > 0:
        cache_reduce_sum(c, cache, CACHE_LEVEL2_IDX, cache, CACHE_LEVEL1_IDX, filled // CACHE_BUFF_SIZE - 1)
        asc.duplicate(c, cache, 0.0, CACHE_BUFF_SIZE)     # level 0 again, as the source does


@aicore
def _copy_in_piece(c, dst, src, elems, align_elems):
    """DataCopy(dst, src, CeilAlign(elems, 32 B)); past the GM tensor's end only its bytes, the rest poisoned."""
    aligned = (elems + align_elems - 1) // align_elems * align_elems
    if (src.offset + aligned) * dst.itemsize <= src.data.nbytes:
        asc.data_copy(c, dst, src, aligned)
    else:
        asc.data_copy_pad(c, dst, src, asc.DataCopyExtParams(1, elems * dst.itemsize, 0, 0),
                          asc.DataCopyPadExtParams(False, 0, aligned - elems, 0))


@aicore
def process_grad_expanded_x(c, td, gm, tmpl, gy_ub, scale, main_len, fold_len, main_out, fold_out):
    """ProcessGradExpandedX: grad_y piece * scale (fp32) cast to T, copied out as the main piece at main_out and the
    fold piece (from UB element foldFactor) at fold_out."""
    T = asc.ub_like(c, gm.grad_expanded_x)
    out = asc.alloc_tensor(c, GRAD_EXPANDED_X_QUE, T)
    count = main_len + fold_len
    loops = np.uint16((count + VL_F32 - 1) // VL_F32)
    src = to_ub_end(c, gy_ub)
    dst = to_ub_end(c, out)
    if rb.vec_scope_begin(c):
        g = rb.vreg_f32(c, _XQ)
        loop = rb.mreg(c, _M_LOOP)
        sreg = count
        for i in range(loops):
            sreg = rb.update_mask(c, loop, F32_BYTES, sreg)
            load_t(c, tmpl.x_t, src, g, loop, i * VL_F32)
            rb.vmuls(c, g, g, np.float32(scale), loop)
            store_t(c, tmpl.x_t, dst, g, loop, i * VL_F32)
        rb.vec_scope_end(c)
    asc.en_que(c, GRAD_EXPANDED_X_QUE, out)
    out = asc.de_que(c, GRAD_EXPANDED_X_QUE, T)
    isz = out.itemsize
    # DataCopyExtParams{1, static_cast<uint16_t>(len * sizeof(T1)), 0, 0, 0}
    asc.data_copy_pad(c, asc.gm_at(gm.grad_expanded_x, main_out), out,
                      asc.DataCopyExtParams(1, (main_len * isz) & 0xFFFF, 0, 0))
    if fold_len != 0:
        asc.data_copy_pad(c, asc.gm_at(gm.grad_expanded_x, fold_out), out[td.fold_factor:],
                          asc.DataCopyExtParams(1, (fold_len * isz) & 0xFFFF, 0, 0))
    asc.free_tensor(c, GRAD_EXPANDED_X_QUE, out)


@aicore
def process_block(c, td, gm, tmpl, batch, row_idx, scale, main_off, main_len, fold_off, fold_len, use_fold_triple,
                  cache, cache_idx):
    """One block of the row (the body the source repeats in its four parts): grad_y's main piece (and fold piece)
    in, grad_expanded_x out, expanded_x in, VfCalGradScale into cache[cache_idx % 256], UpdateCache. Returns the new
    cacheIdx. use_fold_triple: 0 main triple, 1 fold triple, 2 the fold triple when the block is shorter than the
    main quotient."""
    T = asc.ub_like(c, gm.grad_y)
    align = BLOCK_BYTES // T.itemsize
    gm_row = (batch // td.top_k) * td.hidden
    gy = asc.alloc_tensor(c, GRAD_Y_QUE, T)
    if fold_len == 0:
        asc.data_copy(c, gy, asc.gm_at(gm.grad_y, gm_row + main_off), main_len)
    else:
        asc.data_copy(c, gy, asc.gm_at(gm.grad_y, gm_row + main_off), td.fold_factor)
        _copy_in_piece(c, gy[td.fold_factor:], asc.gm_at(gm.grad_y, gm_row + fold_off), fold_len, align)
    asc.en_que(c, GRAD_Y_QUE, gy)
    gy = asc.de_que(c, GRAD_Y_QUE, T)
    reduce_num = main_len + fold_len
    fold_triple = use_fold_triple == 1 or (use_fold_triple == 2 and reduce_num < td.main_binary_add_quotient)
    if 0 <= row_idx < td.expanded_x_dim0:
        x_row = np.int64(row_idx) * td.hidden
        process_grad_expanded_x(c, td, gm, tmpl, gy, scale, main_len, fold_len, x_row + main_off, x_row + fold_off)
        ex = asc.alloc_tensor(c, EXPANDED_X_QUE, T)
        if fold_len == 0:
            asc.data_copy(c, ex, asc.gm_at(gm.expanded_x, x_row + main_off), main_len)
        else:
            asc.data_copy(c, ex, asc.gm_at(gm.expanded_x, x_row + main_off), td.fold_factor)
            _copy_in_piece(c, ex[td.fold_factor:], asc.gm_at(gm.expanded_x, x_row + fold_off), fold_len, align)
        asc.en_que(c, EXPANDED_X_QUE, ex)
        ex = asc.de_que(c, EXPANDED_X_QUE, T)
        # ubAddSum is a raw pointer: with Q / 64 > 256 block sums (mainFactor >= 32768 fp32, a UB of ~790 KiB)
        # they run past binaryAddSumBuf, the plan's last buffer, into UB no buffer owns (an error only past the UB)
        sums = to_ub_end(c, asc.tbuf_get(c, SUM_BUF, asc.ub_f32(c)))
        if fold_triple:
            vf_cal_grad_scale(c, tmpl.x_t, ex, gy, td.fold_binary_add_quotient, td.fold_binary_addk,
                              td.fold_binary_add_last_num, reduce_num, cache, cache_idx % CACHE_BUFF_SIZE, sums)
        else:
            vf_cal_grad_scale(c, tmpl.x_t, ex, gy, td.main_binary_add_quotient, td.main_binary_addk,
                              td.main_binary_add_last_num, reduce_num, cache, cache_idx % CACHE_BUFF_SIZE, sums)
        asc.free_tensor(c, EXPANDED_X_QUE, ex)
    cache_idx += 1
    update_cache(c, cache, cache_idx)
    asc.free_tensor(c, GRAD_Y_QUE, gy)
    return cache_idx


@aicore
def _final_sum(c, cache, gs_ub, cache_idx):
    """The end of a slot in Compute(): the cache levels reduced into gradScalesUb[0]."""
    level1_count = cache_idx // CACHE_BUFF_SIZE
    if level1_count == 0:
        cache_reduce_sum(c, gs_ub, 0, cache, 0, 0)
        return
    two_levels = level1_count >= CACHE_BUFF_SIZE
    if two_levels:
        cache_reduce_sum(c, cache, CACHE_LEVEL2_IDX, cache, CACHE_LEVEL2_IDX, 0)
        cache_reduce_sum(c, cache, CACHE_LEVEL2_IDX + 1, cache, CACHE_LEVEL1_IDX, 0)
    else:
        cache_reduce_sum(c, cache, CACHE_LEVEL2_IDX, cache, CACHE_LEVEL1_IDX, 0)
    cache_reduce_sum(c, gs_ub, 0, cache, 0, 0)
    gs = to_ub_end(c, gs_ub)
    if not rb.vec_scope_begin(c):
        return
    l2 = rb.vreg_f32(c, _XQ)
    l1 = rb.vreg_f32(c, _XR)
    l0 = rb.vreg_f32(c, _GQ)
    one = rb.mreg(c, _M_ONE)
    _vl1(c, one)
    if two_levels:
        rb.reg_load(c, l2, cache, CACHE_LEVEL2_IDX, rb.LOAD_NORM)
        # level1Temp is float 513 of the cache: a register load from an address that is not 32-byte aligned,
        # undefined on the chip, an alignment fault here (only after 65536 blocks)
        rb.reg_load(c, l1, to_ub_end(c, cache[CACHE_LEVEL2_IDX + 1:]), 0, rb.LOAD_NORM)
        rb.reg_load(c, l0, gs, 0, rb.LOAD_NORM)
        rb.vadd(c, l0, l0, l2, one)
        rb.vadd(c, l0, l0, l1, one)
    else:
        rb.reg_load(c, l1, cache, CACHE_LEVEL2_IDX, rb.LOAD_NORM)
        rb.reg_load(c, l0, gs, 0, rb.LOAD_NORM)
        rb.vadd(c, l0, l0, l1, one)
    rb.reg_store_first_element(c, gs_ub, l0, 0, one)
    rb.vec_scope_end(c)


@aicore
def process_grad_scales(c, gm, tmpl, batch):
    """ProcessGradScales: gradScalesUb[0] (fp32) to grad_scales[batch], through binaryAddSumBuf as S when 16-bit."""
    gs_ub = asc.de_que(c, GRAD_SCALES_QUE, asc.ub_f32(c))
    if tmpl.s_t == asc.DT_FLOAT:
        asc.data_copy_pad(c, asc.gm_at(gm.grad_scales_f32, batch), gs_ub, asc.DataCopyExtParams(1, 4, 0, 0))
    else:
        temp = asc.tbuf_get(c, SUM_BUF, asc.ub_u16(c))
        src = to_ub_end(c, gs_ub)
        if rb.vec_scope_begin(c):
            v = rb.vreg_f32(c, _XQ)
            h = rb.vreg_u16(c, _HALF)
            preg = rb.mreg(c, _M_LOOP)
            rb.update_mask(c, preg, F32_BYTES, 1)
            rb.reg_load(c, v, src, 0, rb.LOAD_NORM)
            if tmpl.s_t == asc.DT_BF16:
                rb.vcast_f32_to_bf16(c, h, v, asc.CAST_RINT, rb.LAYOUT_ZERO, preg)
            else:
                rb.vcast_f32_to_f16(c, h, v, asc.CAST_RINT, rb.LAYOUT_ZERO, preg)
            rb.reg_store_pack_b32(c, temp, h, 0, preg)
            rb.vec_scope_end(c)
        asc.data_copy_pad(c, asc.gm_at(gm.grad_scales_u16, batch), temp, asc.DataCopyExtParams(1, 2, 0, 0))
    asc.free_tensor(c, GRAD_SCALES_QUE, gs_ub)


@aicore
def _scale_of(c, gm, s_t, batch):
    """scalesGm_.GetValue(batch) as float (ToFloat for bf16, a static_cast for fp16)."""
    if s_t == asc.DT_FLOAT:
        return asc.get_value(c, gm.scales_f32, batch)
    return asc.to_float(asc.get_value(c, gm.scales_u16, batch), s_t)


@global_aicore
def init_output_stage(c, td, gm, tmpl):
    """InitOutputGm (dropPadMode 1, before SyncAll): this core's rows of grad_expanded_x set to 0."""
    start, end = init_out_rows(c, td)
    if end != 0 and start != end:
        asc.init_output(c, asc.gm_at(gm.grad_expanded_x, np.int64(start) * td.hidden), td.hidden * (end - start), 0)


@global_aicore
def split_h_stage(c, td, gm, tmpl):
    """Process(): PrepareComputeParams, then Compute() over this core's slots."""
    start, end = compute_rows(c, td)
    if end == 0 or start == end:
        return
    m, f = td.main_factor, td.fold_factor
    fold_base = m * td.main_block_num
    for batch in range(start, end):
        cache = asc.tbuf_get(c, CACHE_BUF, asc.ub_f32(c))
        asc.duplicate(c, cache, 0.0, CACHE_BUFF_SIZE * MAX_CACHE_DEPTH)
        row_idx = asc.get_value(c, gm.expanded_row_idx, batch)
        scale = _scale_of(c, gm, tmpl.s_t, batch)
        cache_idx = 0
        gs_ub = asc.alloc_tensor(c, GRAD_SCALES_QUE, asc.ub_f32(c))
        # OverLapPartProcess
        for i in range(td.fold_block_num):
            cache_idx = process_block(c, td, gm, tmpl, batch, row_idx, scale, i * f, f, fold_base + i * f, f, 0,
                                      cache, cache_idx)
        # FoldTailProcess
        fb = td.fold_block_num
        if td.fold_tail_block_num == 2:
            for i in range(2):
                tail = f if i == 0 else td.fold_tail_len - f
                cache_idx = process_block(c, td, gm, tmpl, batch, row_idx, scale, (fb + i) * f, f,
                                          fold_base + (fb + i) * f, tail, 2, cache, cache_idx)
        elif td.fold_tail_block_num == 1:
            cache_idx = process_block(c, td, gm, tmpl, batch, row_idx, scale, fb * f, f, fold_base + fb * f,
                                      td.fold_tail_len, 2, cache, cache_idx)
            cache_idx = process_block(c, td, gm, tmpl, batch, row_idx, scale, (fb + 1) * f, f, 0, 0, 1,
                                      cache, cache_idx)
        # NoOverLapPartProcess
        first = td.fold_block_num // 2 + (1 if td.fold_tail_block_num > 0 else 0)
        for i in range(first, td.main_block_num):
            cache_idx = process_block(c, td, gm, tmpl, batch, row_idx, scale, m * i, m, 0, 0, 0, cache, cache_idx)
        _final_sum(c, cache, gs_ub, cache_idx)
        asc.en_que(c, GRAD_SCALES_QUE, gs_ub)
        process_grad_scales(c, gm, tmpl, batch)


def _schedule(td, gm, tmpl):
    """Init(): InitOutputGm + SyncAll only in dropPadMode 1."""
    if int(tmpl.drop_pad_mode) == 1:
        return (init_output_stage, SYNC_ALL, split_h_stage)
    return (split_h_stage,)


# VfCalGradScale / ProcessGradExpandedX load whole registers (64 fp32 lanes, or 64 elements by UNPACK_B16) from
# their queue buffer: the last loads of a block run past it into the queue's other buffer, which the next block's
# copy-in refills with no V -> MTE2 event for those bytes (the queue orders only the buffer the VF DeQue'd). A race
# of the real kernel; harmless, as the lanes brought in are masked off.
TAIL_LOAD_RACES = tuple(
    RaceWaiver("V", "vector function (__VEC_SCOPE__)", "MTE2", copy,
               "the cut-H VFs' whole-register tail loads read past their block into the other buffer of the queue, "
               "which the next block's copy-in refills")
    for copy in ("DataCopy(GM->UB)", "DataCopyPad(GM->UB)"))

# ProcessGradScales with a 16-bit S: the VF casts gradScalesUb into binaryAddSumBuf (a TBuf) and DataCopyPad copies
# that TBuf out straight after __VEC_SCOPE__, with no V -> MTE3 event between them. A race of the real kernel (the
# copy may read the TBuf before the store lands); the model's stores land at once, so the cast value is copied.
SCALE_CAST_RACE = RaceWaiver("V", "vector function (__VEC_SCOPE__)", "MTE3", "DataCopyPad(UB->GM)",
                             "ProcessGradScales copies the 16-bit grad_scales out of binaryAddSumBuf right after the "
                             "VF that wrote it, with no V -> MTE3 event")

KERNEL = Kernel("MoeFinalizeRoutingV2Grad", "MoeFinalizeRoutingV2GradRegBaseCutH",
                (PipePhase("pipe", BUFFERS, _schedule),), TAIL_LOAD_RACES + (SCALE_CAST_RACE,))
"""Key 20012 (no bias)."""
