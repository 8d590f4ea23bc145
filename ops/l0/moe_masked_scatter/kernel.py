"""MoeMaskedScatterImpl<T, int32_t>, keys 10 / 20 / 40 / 80.

source: moe/3rd/moe_masked_scatter/op_kernel/arch35/moe_masked_scatter.h and op_kernel/moe_masked_scatter.cpp
@ 25fb6b92890d.

    y[i] = mask[i] ? updates[(Trues before i, over the whole flat mask)] : x[i]

Every core takes normalCoreData elements (the last tailCoreData) and runs two phases:

1. prefix counts (Init's TPipe): ubFactor mask bytes at a time, CopyInMask; ComputePrefixSum (the VF
   ComputeSingleLoopPrefixSum: the piece viewed as 64 segments of `cols` bytes, each byte unpacked to an int32
   lane; per segment a running sum gathered column by column and stored transposed; then per segment its columns
   gathered back, the carry of the segments before it added and streamed out unaligned; Adds of the core's count
   so far); CopyOutMask writes the inclusive counts one element on, at prefixSumGm[offset + 1], so prefixSumGm
   ends up the exclusive count of the core; the last piece drops its last count and writes the core's total
   into maskSumGm[blockIdx] and the 0 of prefixSumGm[0]. SyncAll.
2. scatter: ComputePreCoreMaskSum (core 0: 0; core 1: maskSumGm[0]; core b: CustomReduceSum VF of the first b
   totals) then, for 4- / 8-byte T, one SIMT grid of 1024 threads straight over GM; for 1- / 2-byte T,
   ProcessLowBit: pipe.Reset(), a second buffer plan, bufferSize elements at a time copied into UB, scattered by
   a SIMT grid into yQueue, copied out.

The kernel's assert (the core's count plus the cores' before it at most updateEleNums) is not modelled as its own
fault: where it would fire, the SIMT read of updates past its last element faults (F_SIMT_OOB, the same core).
Mask bytes are summed as bytes (a bool byte other than 0 / 1 counts its value), as the unpacking load does.
Only the int32 prefix counts (keys 10 / 20 / 40 / 80) are simulated: the int64 ones need more than INT32_MAX
elements.

Workspace (the user workspace, int32): [0, blockNum) the cores' totals; then each core's normalCoreData counts.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Kernel, PipePhase
from ascend_sim.check import InitWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from ascend_sim.regbase import reg_store_unalign_post, reg_store_unalign_stream, unalign_reg

OP = "MoeMaskedScatter"
USED_THREAD_NUMS = 1024
CUSTOM_OFFSET = 32          # int32 element of tmpBuf that carries the 0 of prefixSumGm[0]
VF_LEN = 64                 # int32 lanes of a 256-byte register

BUFFERS = ("maskQueue", "tmpBuf", "prefixSumQueue")
MASK_QUEUE, TMP_BUF, PREFIX_QUEUE = range(3)
LOW_BIT_BUFFERS = ("maskQueue", "xQueue", "tmpBuf", "yQueue")
LB_MASK_QUEUE, LB_X_QUEUE, LB_TMP_BUF, LB_Y_QUEUE = range(4)

PrefixGm = namedtuple("PrefixGm", ["mask", "workspace"])
"""The flat mask (uint8) and the int32 user workspace."""

ScatterGm = namedtuple("ScatterGm", ["x", "mask", "updates", "y", "workspace"])
"""x, updates, y as unsigned carriers of T's width, the flat mask (uint8) and the int32 user workspace."""


@aicore
def _core_elements(td, c):
    return td.tail_core_data if c.block_idx == c.block_num - 1 else td.normal_core_data


@aicore
def _prefix_gm(c, td, gm):
    """prefixSumGm_: this core's counts, after the blockNum totals."""
    return asc.gm_at(gm.workspace, c.block_num + c.block_idx * td.normal_core_data)


@aicore
def single_loop_prefix_sum(c, data_len, acc, out, mask_local):
    """ComputeSingleLoopPrefixSum(dataLen, tmpAddr -> acc, prefixSumAddr -> out): inclusive int32 counts of
    mask_local[0:data_len] into acc[0:data_len], `out` the transposed running sums (the kernel passes its two
    buffers swapped against the parameter names; acc is tmpBuf, out is prefixSumLocal). Lanes past data_len
    read what the mask buffer holds there; no count before data_len depends on them."""
    rows = VF_LEN
    cols = (data_len + VF_LEN - 1) // VF_LEN
    size1 = cols // VF_LEN
    tail_size1 = cols - size1 * VF_LEN
    if tail_size1 == 0:
        size1 -= 1
        tail_size1 = VF_LEN
    if not asc.vec_scope_begin(c):
        return
    p0, preg_full, sp1, p1 = asc.mreg(c, 0), asc.mreg(c, 1), asc.mreg(c, 2), asc.mreg(c, 3)
    asc.update_mask(c, p0, 4, rows)
    mask_b = asc.vreg_u8(c, 0)
    mask_w = asc.vreg_i32(c, 0)
    m_off = 0
    a_off = 0
    for _ in range(cols):       # unpack each mask byte into an int32 lane of acc
        m_off = asc.reg_load_unpack4_b8(c, mask_b, mask_local, m_off)
        asc.reg_store(c, acc, mask_w, a_off, p0)
        a_off += VF_LEN
    tmp, sequence, index = asc.vreg_i32(c, 4), asc.vreg_u32(c, 4), asc.vreg_u32(c, 5)
    v0, v1, v2 = asc.vreg_i32(c, 1), asc.vreg_i32(c, 2), asc.vreg_i32(c, 3)
    asc.varange(c, tmp, 0)
    asc.vduplicate(c, v1, np.int32(0), p0)
    asc.vmuls(c, sequence, sequence, np.uint32(cols), p0)       # lane l: the start of segment l
    for i in range(cols):       # running sum of each segment, column i stored as row i of out
        asc.vadds(c, index, sequence, np.uint32(i), p0)
        asc.reg_gather(c, v0, acc, index, p0)
        asc.vadd(c, v2, v0, v1, p0)
        asc.vcopy(c, v1, v2, p0)
        asc.reg_store(c, out, v2, i * rows, p0)
    asc.varange(c, tmp, 0)
    asc.create_mask(c, preg_full, 4, asc.PAT_ALL)
    asc.vmuls(c, sequence, sequence, np.uint32(rows), preg_full)
    asc.update_mask(c, sp1, 4, tail_size1 - 1)
    v3, v4, vd_sque = asc.vreg_i32(c, 6), asc.vreg_i32(c, 7), asc.vreg_u32(c, 8)
    u1 = unalign_reg(c, 0)
    asc.vduplicate(c, v1, np.int32(0), preg_full)
    o_off = 0
    for i in range(rows):       # segment i: its columns back in order, plus the carry of the segments before
        main_cols = cols
        asc.vadds(c, vd_sque, sequence, np.uint32(i), preg_full)
        for j in range(size1):
            main_cols = asc.update_mask(c, p1, 4, main_cols)
            asc.vadds(c, index, vd_sque, np.uint32(j * VF_LEN * VF_LEN), p1)
            asc.reg_gather(c, v0, out, index, p1)
            asc.vadd(c, v2, v0, v1, p1)
            o_off = reg_store_unalign_stream(c, acc, v2, u1, o_off, rows)
        reg_store_unalign_post(c, acc, u1, o_off, 0)
        main_cols = asc.update_mask(c, p1, 4, main_cols)
        asc.vadds(c, index, vd_sque, np.uint32(size1 * VF_LEN * VF_LEN), p1)
        asc.reg_gather(c, v0, out, index, p1)
        asc.vadd(c, v2, v0, v1, p1)
        o_off = reg_store_unalign_stream(c, acc, v2, u1, o_off, tail_size1)
        asc.vduplicate(c, v4, np.int32(0), sp1)
        asc.vcopy(c, v2, v4, sp1, asc.MERGING)     # keep only the segment's last column: its total
        asc.vreduce_sum(c, v3, v2, p1)
        asc.vduplicate_reg(c, v1, v3, preg_full)
        reg_store_unalign_post(c, acc, u1, o_off, 0)
    asc.vec_scope_end(c)


@aicore
def _copy_in_mask(c, q, mask_gm, offset, data_len):
    mask_local = asc.alloc_tensor(c, q, asc.ub_u8(c))
    asc.data_copy_pad(c, mask_local, asc.gm_at(mask_gm, offset), asc.DataCopyExtParams(1, data_len, 0, 0),
                      asc.NO_PAD)
    asc.en_que(c, q, mask_local)


@aicore
def _compute_prefix_sum(c, data_len, cur_mask_sum):
    """ComputePrefixSum: the piece's inclusive counts plus the core's count so far; returns the new count."""
    I32 = asc.ub_i32(c)
    prefix_local = asc.alloc_tensor(c, PREFIX_QUEUE, I32)
    tmp_local = asc.tbuf_get(c, TMP_BUF, I32)
    mask_local = asc.de_que(c, MASK_QUEUE, asc.ub_u8(c))
    single_loop_prefix_sum(c, data_len, tmp_local, prefix_local, mask_local)
    asc.free_tensor(c, MASK_QUEUE, mask_local)
    asc.adds(c, prefix_local, tmp_local, np.int32(cur_mask_sum), data_len)
    asc.sync_pipes(c, asc.V_S)
    cur_mask_sum = asc.get_value(c, prefix_local, data_len - 1)
    asc.en_que(c, PREFIX_QUEUE, prefix_local)
    return cur_mask_sum


@aicore
def _copy_out_mask(c, td, gm, offset, data_len, is_last, cur_mask_sum):
    """CopyOutMask<isCopyOutMaskSum = is_last, notNeedCopyPrefixSum = (data_len == 0)>."""
    I32 = asc.ub_i32(c)
    prefix_gm = _prefix_gm(c, td, gm)
    prefix_local = asc.de_que(c, PREFIX_QUEUE, I32)
    if data_len > 0:
        asc.data_copy_pad(c, asc.gm_at(prefix_gm, 1 + offset), prefix_local,
                          asc.DataCopyExtParams(1, data_len * 4, 0, 0))
    if is_last:
        sum_local = asc.tbuf_get(c, TMP_BUF, I32)
        asc.set_value(c, sum_local, 0, np.int32(cur_mask_sum))
        asc.set_value(c, sum_local, CUSTOM_OFFSET, np.int32(0))
        asc.sync_pipes(c, asc.S_MTE3)
        asc.data_copy_pad(c, asc.gm_at(gm.workspace, c.block_idx), sum_local, asc.DataCopyExtParams(1, 4, 0, 0))
        asc.data_copy_pad(c, prefix_gm, sum_local[CUSTOM_OFFSET:], asc.DataCopyExtParams(1, 4, 0, 0))
    asc.free_tensor(c, PREFIX_QUEUE, prefix_local)


@global_aicore
def prefix_stage(c, td, gm):
    """Process() up to SyncAll: the core's exclusive counts and its total into the workspace."""
    if c.block_idx >= c.block_num:
        return
    last = c.block_idx == c.block_num - 1
    loop_size = td.tail_block_factor if last else td.block_factor
    tail_ub = td.tail_core_tail_ub_factor if last else td.tail_ub_factor
    mask_gm = asc.gm_at(gm.mask, c.block_idx * td.normal_core_data)
    cur_mask_sum = 0
    for i in range(loop_size - 1):
        offset = i * td.ub_factor
        _copy_in_mask(c, MASK_QUEUE, mask_gm, offset, td.ub_factor)
        cur_mask_sum = _compute_prefix_sum(c, td.ub_factor, cur_mask_sum)
        _copy_out_mask(c, td, gm, offset, td.ub_factor, False, cur_mask_sum)
    offset = (loop_size - 1) * td.ub_factor
    _copy_in_mask(c, MASK_QUEUE, mask_gm, offset, tail_ub)
    cur_mask_sum = _compute_prefix_sum(c, tail_ub, cur_mask_sum)
    _copy_out_mask(c, td, gm, offset, tail_ub - 1, True, cur_mask_sum)


@aicore
def _custom_reduce_sum(c, dst, src, data_len):
    """CustomReduceSum: dst[0] = the sum of src[0:data_len] (int32), one register of 64 at a time."""
    loop_size = (data_len + VF_LEN - 1) // VF_LEN
    if not asc.vec_scope_begin(c):
        return
    one_mask, p_mask = asc.mreg(c, 4), asc.mreg(c, 5)
    vsrc, vdst, tmp_sum = asc.vreg_i32(c, 9), asc.vreg_i32(c, 10), asc.vreg_i32(c, 11)
    pnum = data_len
    asc.update_mask(c, one_mask, 4, 1)
    asc.vduplicate(c, vdst, np.int32(0), one_mask)
    s_off = 0
    for _ in range(loop_size):
        pnum = asc.update_mask(c, p_mask, 4, pnum)
        # a whole-register load: past the last total it reads the next buffer's bytes, masked off below
        s_off = asc.reg_load_align(c, vsrc, src, s_off, False)
        asc.vreduce_sum(c, tmp_sum, vsrc, p_mask)
        asc.vadd(c, vdst, vdst, tmp_sum, one_mask)
    asc.reg_store(c, dst, vdst, 0, one_mask)
    asc.vec_scope_end(c)


@aicore
def _pre_core_mask_sum(c, gm, tmp_q):
    """ComputePreCoreMaskSum: the Trues of the cores before this one."""
    I32 = asc.ub_i32(c)
    tmp_local = asc.tbuf_get(c, tmp_q, I32)
    asc.data_copy_pad(c, tmp_local, gm.workspace, asc.DataCopyExtParams(1, c.block_num * 4, 0, 0), asc.NO_PAD)
    pre = 0
    if c.block_idx == 1:
        asc.sync_pipes(c, asc.MTE2_S)
        pre = asc.get_value(c, tmp_local, 0)
    elif c.block_idx != 0:
        asc.sync_pipes(c, asc.MTE2_V)
        _custom_reduce_sum(c, tmp_local, tmp_local, c.block_idx)
        asc.sync_pipes(c, asc.V_S)
        pre = asc.get_value(c, tmp_local, 0)
    return pre


@aicore
def _scatter_simt(c, x, mask, prefix, updates, y, n, pre):
    """The SIMT grid of MoeMaskedScatterSimt (x, mask, y in GM) and MoeMaskedScatterToUBSimt (x, mask, y the UB
    piece; the same body): 1024 threads striding over n elements, y[i] = updates[pre + prefix[i]] where mask[i]
    is set, else x[i]. prefix (GM) holds the exclusive counts of x's elements within the core."""
    sc = asc.simt_vf_call(c, USED_THREAD_NUMS, 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        i = asc.thread_idx(th, 0)
        while i < n:
            if asc.simt_load(c, th, mask, i) == 0:
                asc.simt_store(c, th, y, i, asc.simt_load(c, th, x, i))
            else:
                k = np.int64(asc.simt_load(c, th, prefix, i)) + pre
                asc.simt_store(c, th, y, i, asc.simt_load(c, th, updates, k))
            i += asc.thread_num(th, 0)
    asc.simt_end(c, sc)


@global_aicore
def scatter_gm_stage(c, td, gm):
    """Process() after SyncAll for 4- and 8-byte T: MoeMaskedScatterSimt over the core's GM elements."""
    if c.block_idx >= c.block_num:
        return
    cur = _core_elements(td, c)
    pre = np.int64(_pre_core_mask_sum(c, gm, TMP_BUF))
    base = c.block_idx * td.normal_core_data
    x_gm, y_gm = asc.gm_at(gm.x, base), asc.gm_at(gm.y, base)
    mask_gm, prefix_gm = asc.gm_at(gm.mask, base), _prefix_gm(c, td, gm)
    _scatter_simt(c, x_gm, mask_gm, prefix_gm, gm.updates, y_gm, cur, pre)


@aicore
def _scatter_to_ub(c, gm, prefix_gm, offset, data_len, pre):
    """MoeMaskedScatterToUB: MoeMaskedScatterToUBSimt over one piece in UB."""
    T = asc.ub_like(c, gm.x)
    x_local = asc.de_que(c, LB_X_QUEUE, T)
    mask_local = asc.de_que(c, LB_MASK_QUEUE, asc.ub_u8(c))
    y_local = asc.alloc_tensor(c, LB_Y_QUEUE, T)
    _scatter_simt(c, x_local, mask_local, asc.gm_at(prefix_gm, offset), gm.updates, y_local, data_len, pre)
    asc.en_que(c, LB_Y_QUEUE, y_local)
    asc.free_tensor(c, LB_X_QUEUE, x_local)
    asc.free_tensor(c, LB_MASK_QUEUE, mask_local)


@aicore
def _low_bit_piece(c, gm, x_gm, y_gm, mask_gm, prefix_gm, offset, data_len, pre):
    """CopyInMask, CopyInX, MoeMaskedScatterToUB, CopyOutY of one piece."""
    T = asc.ub_like(c, gm.x)
    _copy_in_mask(c, LB_MASK_QUEUE, mask_gm, offset, data_len)
    x_local = asc.alloc_tensor(c, LB_X_QUEUE, T)
    nbytes = data_len * gm.x.data.itemsize
    asc.data_copy_pad(c, x_local, asc.gm_at(x_gm, offset), asc.DataCopyExtParams(1, nbytes, 0, 0), asc.NO_PAD)
    asc.en_que(c, LB_X_QUEUE, x_local)
    _scatter_to_ub(c, gm, prefix_gm, offset, data_len, pre)
    y_local = asc.de_que(c, LB_Y_QUEUE, T)
    asc.data_copy_pad(c, asc.gm_at(y_gm, offset), y_local, asc.DataCopyExtParams(1, nbytes, 0, 0))
    asc.free_tensor(c, LB_Y_QUEUE, y_local)


@global_aicore
def low_bit_stage(c, td, gm):
    """ProcessLowBit (after pipe.Reset() and its InitBuffer calls): the scatter through UB, bufferSize at a time."""
    if c.block_idx >= c.block_num:
        return
    cur = _core_elements(td, c)
    pre = np.int64(_pre_core_mask_sum(c, gm, LB_TMP_BUF))
    base = c.block_idx * td.normal_core_data
    x_gm, y_gm = asc.gm_at(gm.x, base), asc.gm_at(gm.y, base)
    mask_gm, prefix_gm = asc.gm_at(gm.mask, base), _prefix_gm(c, td, gm)
    normal = td.buffer_size
    loops = (cur + normal - 1) // normal
    tail = cur % normal
    if tail == 0:
        tail = normal
    for i in range(loops - 1):
        _low_bit_piece(c, gm, x_gm, y_gm, mask_gm, prefix_gm, i * normal, normal, pre)
    _low_bit_piece(c, gm, x_gm, y_gm, mask_gm, prefix_gm, (loops - 1) * normal, tail, pre)


def _prefix_args(td, gm):
    return td, PrefixGm(gm.mask, gm.workspace)


# ProcessLowBit resets the TPipe and builds tmpBuf afresh, copies in the blockNum core totals and sums them with
# CustomReduceSum, whose whole-register loads read past the totals (lanes its ReduceSum mask drops)
LOW_BIT_TOTALS_LOAD = InitWaiver("tmpBuf", "moe/3rd/moe_masked_scatter/op_kernel/arch35/moe_masked_scatter.h:350-355 "
                                 "(pipe_.Reset, InitBuffer, ComputePreCoreMaskSum) and :287-306 (CustomReduceSum's "
                                 "register loads, ReduceSum under pMask) @ 25fb6b92890d")


def _kernel(value_bytes: int) -> Kernel:
    name = f"MoeMaskedScatterImpl<{value_bytes}-byte T, int32_t>"
    # the prefix phase sees only the mask and the workspace, so it compiles once for every width
    prefix = PipePhase("pipe", BUFFERS, (prefix_stage, SYNC_ALL), _prefix_args)
    if value_bytes > 2:
        # the GM scatter goes on in Init's TPipe (it reuses tmpBuf for the totals); modelled as a phase over the
        # same buffer rows, which carries nothing over from the first (tmpBuf is filled afresh by DataCopyPad)
        return Kernel(OP, name, (prefix, PipePhase("pipe", BUFFERS, (scatter_gm_stage,))))
    return Kernel(OP, name, (prefix, PipePhase("low_bit", LOW_BIT_BUFFERS, (low_bit_stage,))), (LOW_BIT_TOTALS_LOAD,))


KERNELS = {10 * b: _kernel(b) for b in (1, 2, 4, 8)}
"""TILING_KEY_IS dispatch: the int32-count keys (10 * sizeof(T))."""
