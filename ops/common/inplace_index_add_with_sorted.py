"""MoeInplaceIndexAddWithSorted: the l0 index-add the routing-map ops use in drop-and-pad mode.

    var[sorted_indices[i]] += alpha * value[pos[i]]      (rows of dim 0, i in [0, len(sorted_indices)))

The composite aclnn calls (UnpermuteWithRoutingMap and PermuteWithRoutingMapGrad, pad path) sort the
token ids stably (values -> sorted_indices, original slots -> pos), zero `var` and launch this op on
910B / 910_93 / 950 when the output is bf16 / fp16 or the deterministic switch is on. alpha is never
passed by them (nullptr).

Kernels (op_kernel/, @ 25fb6b92890d), by tilingKey:

    moe_inplace_index_add_with_sorted_avg.h   keys 1 (float), 4 (int16), 5 (int32)   -> avg_process
    moe_inplace_index_add_with_sorted_fix.h   keys 2 (half), 3 (bf16), 6 (float)     -> fix_process

Both split the sorted ids evenly over the cores and walk them in UB windows of 1536 ids; each run of
equal ids accumulates its value rows in UB, piece by piece along the row.
* Avg: a run starts from zeros; at its end the partial sum is added to GM with SetAtomicAdd<T>. A row
  whose run crosses a core boundary receives one atomic add from each core involved, in whatever order
  the cores finish: float results then depend on that order (the real op is non-deterministic for
  key 1; so is the simulator with more than one host thread). Integer adds are exact in any order.
* Fix: a run belongs to the core where it starts (a core skips leading ids equal to the previous
  core's last id and follows its own last run into the next cores' ids), so every row is read,
  accumulated and written by one core in sorted order: deterministic. half / bf16 accumulate in fp32
  (CAST_NONE in, CAST_RINT out); alpha == 1 skips the multiply.

Stages take (c, td, gm, tmpl): the core, the tiling struct, the GM tensors (GmTensors) and the template
parameters (Template: T as a ge dtype code; fp16 and bf16 share uint16 GM/UB carriers).
"""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.check import InitWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from tiling import get_soc
from tiling.moe_inplace_index_add_with_sorted import FIELDS, UB_INDEX_NUM
from tiling.moe_inplace_index_add_with_sorted import moe_inplace_index_add_with_sorted as _tiling
from tiling.status import InnerNullptrError, ParamInvalidError, TilingError

from .._framework import Executor, IndexLink, dtype_code, gm_tensor
from .._validate import as_input, as_output, check_no_alias, flag, require

OP = "MoeInplaceIndexAddWithSorted"

# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeInplaceIndexAddWithSortedTilingData = namedtuple("MoeInplaceIndexAddWithSortedTilingData", FIELDS)
TilingData = MoeInplaceIndexAddWithSortedTilingData

GmTensors = namedtuple("GmTensors", [
    "var",              # inputGm: (N, ...) in/out, the rows added to
    "value",            # valueGm: (M, ...) the rows added
    "sorted_indices",   # indicesGm: int32, ascending row ids of var
    "pos",              # posGm: int32, row of value for each sorted id
    "alpha",            # alphaGm: one element (float for float/half/bf16 kernels, T for int kernels); may be empty
])

Template = namedtuple("Template", ["var_t"])
"""T of the kernel class as a ge dtype code (DT_FLOAT, DT_FLOAT16, DT_BF16, DT_INT16, DT_INT32)."""

BLOCK_SIZE = 32       # CeilAlignA2B(n, BLOCK_SIZE): vector instructions run over rows rounded up to 32 elements


@aicore
def _ceil_align(n):
    """CeilAlignA2B(n, BLOCK_SIZE)."""
    return (n + BLOCK_SIZE - 1) // BLOCK_SIZE * BLOCK_SIZE


@aicore
def _index_share(c, td):
    """Constructor: (UB index rounds, ids per round, ids in the last round) of this core."""
    if c.block_idx == td.used_core_num - 1:
        return td.last_ub_index_round, td.last_ub_index_count, td.last_ub_index_tail
    return td.each_ub_index_round, td.each_ub_index_count, td.each_ub_index_tail


@aicore
def _piece(td, loop):
    """(elements, element offset in the row) of row piece `loop`; the last piece is eachTail."""
    n = td.each_tail if loop == td.each_loop - 1 else td.each_num
    return n, loop * td.max_size


@aicore
def _copy_index_in(c, td, gm, queue, idx_round, count):
    """Ids of window idx_round to indexLocal[0:], their positions to indexLocal[INDEX_UB_NUM:], then MTE2 -> S."""
    index_local = asc.alloc_tensor(c, queue, asc.ub_i32(c))
    index_offset = c.block_idx * td.each_index_count + idx_round * td.each_ub_index_count
    params = asc.DataCopyExtParams(1, count * 4, 0, 0)
    asc.data_copy_pad(c, index_local, asc.gm_at(gm.sorted_indices, index_offset), params, asc.NO_PAD)
    asc.data_copy_pad(c, index_local[UB_INDEX_NUM:], asc.gm_at(gm.pos, index_offset), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_S)
    return index_local


@aicore
def _copy_value_in(c, td, gm, queue, row, loop, n):
    """CopyValueIn: piece `loop` of value row `row` into the value queue."""
    T = asc.ub_like(c, gm.var)
    value_local = asc.alloc_tensor(c, queue, T)
    _, offset = _piece(td, loop)
    asc.data_copy_pad(c, value_local, asc.gm_at(gm.value, np.int64(row) * td.updates_one_time + offset),
                      asc.DataCopyExtParams(1, n * T.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, queue, value_local)


# --- MoeInplaceIndexAddWithSortedAvg (keys 1, 4, 5) ----------------------------------------------------------
AVG_BUFFERS = ("inQueueValueAvg",      # TQue<VECIN, 1>: one value row piece
               "inQueueIndex",         # TQue<VECIN, 1>: 1536 ids + 1536 positions
               "outQueueOutAvg")       # TQue<VECOUT, 1>: the run's partial sum
IN_QUEUE_VALUE_AVG, IN_QUEUE_INDEX, OUT_QUEUE_OUT_AVG = asc.buffer_ids(AVG_BUFFERS, *AVG_BUFFERS)


@aicore
def _avg_copy_out(c, td, gm, tmpl, row, loop, n):
    """CopyOut: the partial sum of a run added to var[row] piece `loop` under SetAtomicAdd<T>."""
    T = asc.ub_like(c, gm.var)
    out_local = asc.de_que(c, OUT_QUEUE_OUT_AVG, T)
    _, offset = _piece(td, loop)
    asc.set_atomic_add(c, tmpl.var_t)
    asc.data_copy_pad(c, asc.gm_at(gm.var, np.int64(row) * td.updates_one_time + offset), out_local,
                      asc.DataCopyExtParams(1, n * T.itemsize, 0, 0))
    asc.set_atomic_none(c)
    asc.free_tensor(c, OUT_QUEUE_OUT_AVG, out_local)


@aicore
def _avg_pass(c, td, gm, tmpl, loop, alpha):
    """AvgProcess(loopIdx): every id of this core, runs of equal ids summed from zero, piece `loop`."""
    T = asc.ub_like(c, gm.var)
    rounds, count, tail = _index_share(c, td)
    n, _ = _piece(td, loop)
    n_align = _ceil_align(n)
    update_index = np.int32(-1)
    last_update_index = np.int32(-1)
    first_mov = True
    out_local = T[0:0]
    for idx_round in range(rounds):
        current = tail if idx_round == rounds - 1 else count
        index_local = _copy_index_in(c, td, gm, IN_QUEUE_INDEX, idx_round, current)
        for j in range(current):
            update_index = asc.get_value(c, index_local, j)
            sync_in = first_mov or update_index != last_update_index
            if not first_mov and update_index != last_update_index:
                asc.en_que(c, OUT_QUEUE_OUT_AVG, out_local)
                _avg_copy_out(c, td, gm, tmpl, last_update_index, loop, n)
            update_pos = asc.get_value(c, index_local, UB_INDEX_NUM + j)
            asc.sync_pipes(c, asc.S_MTE2)
            if sync_in:
                out_local = asc.alloc_tensor(c, OUT_QUEUE_OUT_AVG, T)
                asc.duplicate(c, out_local, 0, n_align)
            _copy_value_in(c, td, gm, IN_QUEUE_VALUE_AVG, update_pos, loop, n)
            # Compute
            value_local = asc.de_que(c, IN_QUEUE_VALUE_AVG, T)
            if td.enable_alpha == 1:
                asc.muls(c, value_local, value_local, alpha, n_align)
                asc.pipe_barrier(c, asc.PIPE_V)
            asc.add(c, out_local, out_local, value_local, n_align)
            asc.free_tensor(c, IN_QUEUE_VALUE_AVG, value_local)
            last_update_index = update_index
            first_mov = False
        asc.free_tensor(c, IN_QUEUE_INDEX, index_local)
    asc.en_que(c, OUT_QUEUE_OUT_AVG, out_local)
    _avg_copy_out(c, td, gm, tmpl, update_index, loop, n)


@global_aicore
def avg_process(c, td, gm, tmpl):
    """Keys 1 / 4 / 5: Init reads alpha (as T), then Process: AvgProcess for each row piece."""
    alpha = asc.get_value(c, gm.alpha, 0) if td.enable_alpha == 1 else asc.as_elem(gm.alpha.data, 0)
    for loop in range(td.each_loop):
        _avg_pass(c, td, gm, tmpl, loop, alpha)


# --- MoeInplaceIndexAddWithSortedFix (keys 2, 3, 6) ----------------------------------------------------------
FIX_BUFFERS = ("inQueueSelfFix",        # TQue<VECIN, 1>: the var row piece being accumulated
               "inQueueValueFix",       # TQue<VECIN, 1>
               "inQueueIndex",          # TQue<VECIN, 1>
               "outQueueOutFix")        # TQue<VECOUT, 1>
FIX_CAST_BUFFERS = ("calcSelfBuf",      # TBuf: fp32 accumulator (half / bf16 only)
                    "calcValueBuf")     # TBuf: fp32 value row (half / bf16 only)
IN_QUEUE_SELF_FIX, IN_QUEUE_VALUE_FIX, IN_QUEUE_INDEX_FIX, OUT_QUEUE_OUT_FIX = asc.buffer_ids(
    FIX_BUFFERS, *FIX_BUFFERS, also=(FIX_BUFFERS + FIX_CAST_BUFFERS,))
CALC_SELF_BUF, CALC_VALUE_BUF = asc.buffer_ids(FIX_BUFFERS + FIX_CAST_BUFFERS, *FIX_CAST_BUFFERS)


@aicore
def _is_cast_float(tmpl):
    """IS_CAST_FLOAT: T is half or bfloat16 (accumulate in fp32)."""
    return tmpl.var_t == asc.DT_FLOAT16 or tmpl.var_t == asc.DT_BF16


@aicore
def _fix_copy_self_in(c, td, gm, tmpl, row, loop, n):
    """CopySelfIn: var[row] piece `loop` into UB (widened into calcSelf for half / bf16); allocates outLocal.
    Returns (inputLocal, outLocal)."""
    T = asc.ub_like(c, gm.var)
    input_local = asc.alloc_tensor(c, IN_QUEUE_SELF_FIX, T)
    _, offset = _piece(td, loop)
    asc.data_copy_pad(c, input_local, asc.gm_at(gm.var, np.int64(row) * td.updates_one_time + offset),
                      asc.DataCopyExtParams(1, n * T.itemsize, 0, 0), asc.NO_PAD)
    asc.en_que(c, IN_QUEUE_SELF_FIX, input_local)
    input_local = asc.de_que(c, IN_QUEUE_SELF_FIX, T)
    if _is_cast_float(tmpl):
        calc_self_local = asc.tbuf_get(c, CALC_SELF_BUF, asc.ub_f32(c))
        asc.cast(c, calc_self_local, asc.DT_FLOAT, input_local, tmpl.var_t, asc.CAST_NONE, _ceil_align(n))
    out_local = asc.alloc_tensor(c, OUT_QUEUE_OUT_FIX, T)
    return input_local, out_local


@aicore
def _fix_compute(c, gm, tmpl, input_local, n_align, enable_alpha, alpha):
    """Compute: the dequeued value piece (times alpha) added to the accumulator (calcSelf, or inputLocal)."""
    T = asc.ub_like(c, gm.var)
    value_local = asc.de_que(c, IN_QUEUE_VALUE_FIX, T)
    if _is_cast_float(tmpl):
        calc_self_local = asc.tbuf_get(c, CALC_SELF_BUF, asc.ub_f32(c))
        calc_value_local = asc.tbuf_get(c, CALC_VALUE_BUF, asc.ub_f32(c))
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.cast(c, calc_value_local, asc.DT_FLOAT, value_local, tmpl.var_t, asc.CAST_NONE, n_align)
        if enable_alpha:
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.muls(c, calc_value_local, calc_value_local, alpha, n_align)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.free_tensor(c, IN_QUEUE_VALUE_FIX, value_local)
        asc.add(c, calc_self_local, calc_self_local, calc_value_local, n_align)
    else:
        if enable_alpha:
            asc.muls(c, value_local, value_local, alpha, n_align)
            asc.pipe_barrier(c, asc.PIPE_V)
        asc.add(c, input_local, input_local, value_local, n_align)
        asc.free_tensor(c, IN_QUEUE_VALUE_FIX, value_local)


@aicore
def _fix_copy_out(c, td, gm, tmpl, input_local, out_local, row, loop, n):
    """CopyOut: the accumulated piece (narrowed with CAST_RINT for half / bf16) overwrites var[row]."""
    T = asc.ub_like(c, gm.var)
    n_align = _ceil_align(n)
    if _is_cast_float(tmpl):
        asc.free_tensor(c, IN_QUEUE_SELF_FIX, input_local)
        asc.pipe_barrier(c, asc.PIPE_V)
        calc_self_local = asc.tbuf_get(c, CALC_SELF_BUF, asc.ub_f32(c))
        asc.cast(c, out_local, tmpl.var_t, calc_self_local, asc.DT_FLOAT, asc.CAST_RINT, n_align)
    else:
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.data_copy(c, out_local, input_local, n_align)
        asc.free_tensor(c, IN_QUEUE_SELF_FIX, input_local)
    asc.en_que(c, OUT_QUEUE_OUT_FIX, out_local)
    out_local = asc.de_que(c, OUT_QUEUE_OUT_FIX, T)
    _, offset = _piece(td, loop)
    asc.data_copy_pad(c, asc.gm_at(gm.var, np.int64(row) * td.updates_one_time + offset), out_local,
                      asc.DataCopyExtParams(1, n * T.itemsize, 0, 0))
    asc.free_tensor(c, OUT_QUEUE_OUT_FIX, out_local)


@aicore
def _fix_pass(c, td, gm, tmpl, loop, last_core_index, enable_alpha, alpha):
    """AvgProcess(loopIdx) of the Fix class: this core's ids except those continuing the previous core's
    last run; the run still open at the end is left to SameIndexProcess (or the last core's CopyOut).
    Returns the open run's (inputLocal, outLocal)."""
    T = asc.ub_like(c, gm.var)
    rounds, count, tail = _index_share(c, td)
    n, _ = _piece(td, loop)
    n_align = _ceil_align(n)
    last_update_index = np.int32(-1)
    first_mov = True
    input_local = T[0:0]
    out_local = T[0:0]
    for idx_round in range(rounds):
        current = tail if idx_round == rounds - 1 else count
        index_local = _copy_index_in(c, td, gm, IN_QUEUE_INDEX_FIX, idx_round, current)
        for j in range(current):
            update_index = asc.get_value(c, index_local, j)
            # the previous core owns the run of its last id
            if c.block_idx != 0 and update_index == last_core_index:
                continue
            sync_in = first_mov or update_index != last_update_index
            if not first_mov and update_index != last_update_index:
                _fix_copy_out(c, td, gm, tmpl, input_local, out_local, last_update_index, loop, n)
            update_pos = asc.get_value(c, index_local, UB_INDEX_NUM + j)
            asc.sync_pipes(c, asc.S_MTE2)
            if sync_in:
                input_local, out_local = _fix_copy_self_in(c, td, gm, tmpl, update_index, loop, n)
            _copy_value_in(c, td, gm, IN_QUEUE_VALUE_FIX, update_pos, loop, n)
            _fix_compute(c, gm, tmpl, input_local, n_align, enable_alpha, alpha)
            last_update_index = update_index
            first_mov = False
        asc.free_tensor(c, IN_QUEUE_INDEX_FIX, index_local)
    return input_local, out_local


@aicore
def _fix_same_index(c, td, gm, tmpl, loop, last_core_index, input_local, out_local, enable_alpha, alpha):
    """SameIndexProcess: follow this core's last run into the next cores' ids, then write it out."""
    n, _ = _piece(td, loop)
    n_align = _ceil_align(n)
    boundary = td.each_index_count * (c.block_idx + 1)
    last_index = asc.get_value(c, gm.sorted_indices, boundary - 1)
    next_index = asc.get_value(c, gm.sorted_indices, boundary)
    if_continue = last_index == next_index
    if c.block_idx != 0 and last_core_index == last_index:   # all of this core's ids belong to an earlier core
        return
    if not if_continue:
        _fix_copy_out(c, td, gm, tmpl, input_local, out_local, last_index, loop, n)
        return
    offset = 0
    while if_continue:
        indices_offset = boundary + offset
        update_pos = asc.get_value(c, gm.pos, indices_offset)
        asc.sync_pipes(c, asc.S_MTE2)
        _copy_value_in(c, td, gm, IN_QUEUE_VALUE_FIX, update_pos, loop, n)
        _fix_compute(c, gm, tmpl, input_local, n_align, enable_alpha, alpha)
        offset += 1
        indices_offset = boundary + offset
        if indices_offset >= td.indices_count:
            break
        next_index = asc.get_value(c, gm.sorted_indices, indices_offset)
        if_continue = last_index == next_index
    _fix_copy_out(c, td, gm, tmpl, input_local, out_local, last_index, loop, n)


@global_aicore
def fix_process(c, td, gm, tmpl):
    """Keys 2 / 3 / 6: Init reads alpha (float; 1.0 switches it off) and the last id, then Process: per row
    piece, this core's runs, then the last core writes the final run or the others finish theirs."""
    enable_alpha = td.enable_alpha == 1
    alpha = np.float32(0.0)
    if enable_alpha:
        alpha = asc.to_float(asc.get_value(c, gm.alpha, 0), asc.DT_FLOAT)
        if alpha == np.float32(1.0):   # the aclnn layer passes 1 when torch gives no alpha: skip the Muls
            enable_alpha = False
    final_index = asc.get_value(c, gm.sorted_indices, td.indices_count - 1)
    last_core_index = np.int32(-1)
    if c.block_idx != 0:
        last_core_index = asc.get_value(c, gm.sorted_indices, td.each_index_count * c.block_idx - 1)
    last_core = c.block_idx == td.used_core_num - 1
    for loop in range(td.each_loop):
        n, _ = _piece(td, loop)
        input_local, out_local = _fix_pass(c, td, gm, tmpl, loop, last_core_index, enable_alpha, alpha)
        if last_core:
            # the last core only walks its own ids; if its first id continues the previous core's run and
            # runs to the end, it has nothing to write
            if last_core_index != final_index:
                _fix_copy_out(c, td, gm, tmpl, input_local, out_local, final_index, loop, n)
            continue
        asc.pipe_barrier(c, asc.PIPE_ALL)
        _fix_same_index(c, td, gm, tmpl, loop, last_core_index, input_local, out_local, enable_alpha, alpha)


# --- the kernel entry: TILING_KEY_IS dispatch -----------------------------------------------------------------
# The fix template copies in dataLen elements of a var / value row piece and then computes over its 32-byte
# aligned length: Cast (half / bf16) or Add (float) read the never-written lanes past dataLen, which CopyOut never
# writes back; checked mode "init" lets those reads pass
FIX_ALIGNED_READS = (
    InitWaiver("inQueueSelfFix", "moe/3rd/moe_inplace_index_add_with_sorted/op_kernel/"
               "moe_inplace_index_add_with_sorted_fix.h:206 (Cast of CeilAlignA2B(dataLen, BLOCK_SIZE)) and :238 "
               "(Add over currentEachNumAlign, Compute at :146 / :182) @ 25fb6b92890d"),
    InitWaiver("inQueueValueFix", "moe/3rd/moe_inplace_index_add_with_sorted/op_kernel/"
               "moe_inplace_index_add_with_sorted_fix.h:225 / :238 (Cast / Add over currentEachNumAlign) "
               "@ 25fb6b92890d"))
_AVG = Kernel.single_pipe(OP, "MoeInplaceIndexAddWithSortedAvg", (avg_process,), AVG_BUFFERS)
KERNELS = {
    1: _AVG, 4: _AVG, 5: _AVG,
    2: Kernel.single_pipe(OP, "MoeInplaceIndexAddWithSortedFix<half>", (fix_process,), FIX_BUFFERS + FIX_CAST_BUFFERS,
                          FIX_ALIGNED_READS),
    3: Kernel.single_pipe(OP, "MoeInplaceIndexAddWithSortedFix<bfloat16_t>", (fix_process,),
                          FIX_BUFFERS + FIX_CAST_BUFFERS, FIX_ALIGNED_READS),
    6: Kernel.single_pipe(OP, "MoeInplaceIndexAddWithSortedFix<float>", (fix_process,), FIX_BUFFERS,
                          FIX_ALIGNED_READS),
}


# --- host side: the l0 call ------------------------------------------------------------------------------------
_VAR_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.int32),
               np.dtype(np.int16))
GM_NAMES = ("var", "updates", "sorted_values", "positions", "alpha")


def _l0_fail(message: str):
    raise InnerNullptrError(f"{OP} (l0) returned nullptr: {message}")


def _alpha_array(alpha, var_dtype: np.dtype) -> np.ndarray | None:
    """The alpha input tensor: one float32 for float / half / bf16 var, one element of var's dtype for ints."""
    if alpha is None:
        return None
    if isinstance(alpha, np.ndarray):
        if alpha.size != 1:
            raise ParamInvalidError(f"alpha must be a single number, got an array of shape {alpha.shape}")
        alpha = alpha.reshape(-1)[0]
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise ParamInvalidError(f"alpha must be a real number, got {alpha!r} ({type(alpha).__name__})")
    if np.issubdtype(var_dtype, np.integer):
        if isinstance(alpha, (float, np.floating)) and not float(alpha).is_integer():
            raise ParamInvalidError(f"alpha must be a whole number for {var_dtype} var, got {alpha!r}")
        value = int(alpha)
        info = np.iinfo(var_dtype)
        if not info.min <= value <= info.max:
            raise ParamInvalidError(f"alpha = {value} does not fit in {var_dtype} (the kernel reads it as T)")
        return np.array([value], dtype=var_dtype)
    return np.array([alpha], dtype=np.float32)


def index_add_with_sorted_executor(var, sorted_values, positions, updates, *, soc="ascend910b", alpha=None,
                                   deterministic=False) -> Executor:
    """l0op::MoeInplaceIndexAddWithSorted(var, dim 0, sorted_values, positions, updates, alpha).

    var: (N, ...) float32 / float16 / bfloat16 / int32 / int16, writeable and C-contiguous: the kernel adds
        into it in place (the callers pass zeros). updates: (M, ...) of var's dtype, equal to var beyond dim 0.
    sorted_values: (K,) int32 row ids of var, ascending (a stable sort's values); positions: (K,) int32 rows
        of updates (the sort's order). Row i of the result gets updates[positions[k]] for every k with
        sorted_values[k] == i, times alpha (a number; None = absent, the callers' case).
    deterministic: the context's deterministic switch; float32 var then runs key 6 (Fix) instead of key 1
        (atomic adds whose order is the cores' race).

    Returns an Executor whose run() launches the kernel and fills var. Anything the l0 op rejects (dtypes
    outside its OpDef, a failing tiling: empty tensors, shape mismatch) raises InnerNullptrError (561103),
    which is what the composite aclnn calls return when an l0 op gives nullptr. Ids or positions out of
    range, or a positions array shorter than the ids, end in OutOfBoundsError naming the bad element; ids
    that are not sorted give the real op's undefined result (rows written by several cores), never a crash.
    """
    soc = get_soc(soc)
    require("var", var)
    require("sorted_values", sorted_values)
    require("positions", positions)
    require("updates", updates)
    v = as_output("var", var)
    s = as_input("sorted_values", sorted_values)
    p = as_input("positions", positions)
    u = as_input("updates", updates)
    tensors = {"var": v, "updates": u, "sorted_values": s, "positions": p}
    check_no_alias({n: tensors[n] for n in GM_NAMES[1:4]}, {"var": v})
    if v.dtype not in _VAR_DTYPES:
        _l0_fail(f"var dtype {v.dtype} is not supported (float32, float16, bfloat16, int32, int16)")
    if u.dtype != v.dtype:
        _l0_fail(f"updates dtype {u.dtype} must equal var dtype {v.dtype}")
    for name, t in (("sorted_values", s), ("positions", p)):
        if t.dtype != np.int32:
            _l0_fail(f"{name} must be int32, got {t.dtype}")
        if t.ndim != 1:
            _l0_fail(f"{name} must be 1-D, got shape {t.shape}")
    if p.shape != s.shape:
        _l0_fail(f"positions (shape {p.shape}) must hold one updates row per sorted id (shape {s.shape})")
    alpha_arr = _alpha_array(alpha, v.dtype)
    try:
        result = _tiling(v, u, s, p, alpha_arr, 0, soc=soc, deterministic=flag("deterministic", deterministic))
    except TilingError as e:
        _l0_fail(e.message)
    key = result.tiling_key
    var_gm = gm_tensor(v, 0)
    alpha_carrier = var_gm.data.dtype if v.dtype.kind == "i" else np.float32   # alphaGm is T only in int kernels
    gm = GmTensors(var_gm, gm_tensor(u, 1), gm_tensor(s, 2, np.int32), gm_tensor(p, 3, np.int32),
                   gm_tensor(alpha_arr, 4, alpha_carrier))
    td = TilingData(*result.fields.values())
    tmpl = Template(dtype_code(v, 0))
    one_time = result.fields["updates_one_time"]
    links = (IndexLink("sorted_values", "var", one_time, v.shape[0] if v.ndim else 1),
             IndexLink("positions", "updates", one_time, u.shape[0] if u.ndim else 1))
    if alpha_arr is not None:
        tensors["alpha"] = alpha_arr
    return Executor(OP, result, KERNELS[key], (td, gm, tmpl), GM_NAMES, tensors=tensors, index_links=links,
                    ub_advice=_ub_advice(result))


def _ub_advice(result) -> str:
    f = result.fields
    return (f"Row pieces are max_size = {f['max_size']} elements, from the UB the tiling sees minus the 12 KiB id "
            "window and a 1 KiB reserve; a larger ub_size in a custom profile (tiling.get_soc(..., ub_size=...)) "
            "gives longer pieces.")

