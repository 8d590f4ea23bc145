"""Host implementations of generic l0 operators that composite aclnn calls chain around the simulated kernels
(they come from other CANN libraries, so they are not simulated: only their results matter).

Half-precision tensors (ml_dtypes bfloat16, numpy float16) are never computed in their own dtype here: NumPy
runs those through per-element scalar loops (ml_dtypes) or a slow software cast (float16), 10-30x slower than
float32. Data movement steps move their uint16 bits; arithmetic widens each half value to float32 once
(exact), computes in float32, and rounds once back to the half type with round-half-to-even, giving the bits
ml_dtypes / NumPy give for the same float32 computation (tests/ops/test_host_steps.py checks every pattern
class)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ascend_sim import host_cost
from ascend_sim.dtypes import f32_from_bits, view_f32_as_u32
from ascend_sim.kernel_api import host_jit

from ._framework import HostStep

_TILE = 32
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_HALF = (_BF16, _F16)


@host_jit
def _transpose_tiles(src, dst):
    """dst = src.T for 2-D C-contiguous arrays of one element width, in cache-sized tiles."""
    rows, cols = src.shape
    for r0 in range(0, rows, _TILE):
        r1 = min(r0 + _TILE, rows)
        for c0 in range(0, cols, _TILE):
            c1 = min(c0 + _TILE, cols)
            for c in range(c0, c1):
                out = dst[c]
                for r in range(r0, r1):
                    out[r] = src[r, c]


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_TILED_TRANSPOSE_MIN = 1 << 21
"""Elements from which the tiled transpose beats NumPy's strided copy (below it the call costs more than the
cache misses it saves: at the demo's (512, 64) NumPy is about 2x faster, at (4096, 256) they are even)."""


def _transpose_fn(src: np.ndarray, dst: np.ndarray):
    """A call doing dst = src.T (2-D, dst preallocated (cols, rows), one element width), the views and the
    method chosen up front: bits moved unchanged as unsigned ints of the element width."""
    if src.ndim != 2 or dst.shape != src.shape[::-1] or dst.dtype.itemsize != src.dtype.itemsize \
            or src.dtype.itemsize not in _BITS or not dst.flags.c_contiguous:
        return lambda: np.copyto(dst, src.T)
    bits = _BITS[src.dtype.itemsize]
    dst_bits = dst.view(bits)
    if src.size < _TILED_TRANSPOSE_MIN:
        src_bits_t = src.view(bits).T
        return lambda: np.copyto(dst_bits, src_bits_t)
    return lambda: _transpose_tiles(np.ascontiguousarray(src).view(bits), dst_bits)


def transpose_2d(src: np.ndarray, dst: np.ndarray) -> None:
    """l0op::Transpose of a 2-D tensor into a preallocated (cols, rows) array of the same dtype, its bits moved
    unchanged (as unsigned ints of the element width, never through the dtype's own copy)."""
    _transpose_fn(src, dst)()


def transpose_step(src: np.ndarray, dst: np.ndarray):
    """l0op::Transpose as a host step: transpose_2d(src, dst) with its checks and views done once, in phase one
    (at the demo's (512, 64) they cost a tenth of the copy)."""
    return HostStep("l0op::Transpose", _transpose_fn(src, dst), transpose_work(src))


def transpose_work(src: np.ndarray) -> host_cost.HostWork:
    """l0op::Transpose on the chip: every element through the vector unit's transpose, in and out once."""
    return host_cost.elementwise(src.nbytes, src.nbytes, src.size, src.dtype.itemsize)


def cast_work(src: np.ndarray, dst: np.ndarray) -> host_cost.HostWork:
    """l0op::Cast on the chip: one vector Cast per element, sized by the wider side."""
    return host_cost.elementwise(src.nbytes, dst.nbytes, src.size, max(src.dtype.itemsize, dst.dtype.itemsize),
                                 call="Cast")


def mul_work(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> host_cost.HostWork:
    """l0op::Mul of (R, H) rows by one factor a row: a widening Cast, the Mul in fp32 and (for a half-precision
    output) a rounding Cast per element."""
    passes = (1 if a.dtype.itemsize < 4 else 0) + 1 + (1 if out.dtype.itemsize < 4 else 0)
    return host_cost.elementwise(a.nbytes + w.nbytes, out.nbytes, a.size, 4, passes=passes)


def gather_work(x: np.ndarray, indices: np.ndarray, out: np.ndarray) -> host_cost.HostWork:
    """l0op::GatherV2 along axis 0 on the chip: one DMA row per output row."""
    rows = out.shape[0] if out.ndim else 0
    return host_cost.gather(rows, out.nbytes // rows if rows else 0, indices.nbytes)


def masked_scatter_work(dst: np.ndarray, mask: np.ndarray, values: np.ndarray) -> host_cost.HostWork:
    """l0op::MaskedScatter on the chip: the mask and the values read, dst written (the selects in the vector unit)."""
    return host_cost.elementwise(mask.nbytes + values.nbytes + dst.nbytes, dst.nbytes, dst.size, dst.dtype.itemsize)


# --- float32 <-> half bit conversions ---------------------------------------------------------------------
def _default_nan_bits() -> np.uint32:
    """fp32 bits of the NaN this machine's NumPy loops make from non-NaN operands (inf * 0)."""
    with np.errstate(invalid="ignore"):
        return np.multiply(np.array([np.inf], dtype=np.float32), np.float32(0.0)).view(np.uint32)[0]


_DEFAULT_NAN = _default_nan_bits()


@host_jit(error_model="numpy")
def _bf16_value(h):
    """float32 value of bfloat16 bits h (exact: bf16 is fp32's top half)."""
    return f32_from_bits(np.uint32(np.uint32(h) << np.uint32(16)))


@intrinsic
def _f16_bits_to_f32_hw(typingctx, h):
    """float32 value of float16 bits: LLVM's fpext from half (one vcvtph2ps with F16C; exact)."""
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return sig, codegen


@intrinsic
def _f32_to_f16_bits_hw(typingctx, x):
    """float16 bits of a float32 value: LLVM's fptrunc to half (one vcvtps2ph with F16C), which rounds
    half to even as IEEE 754 asks."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return sig, codegen


@host_jit(error_model="numpy")
def _f16_value(h):
    """float32 value of float16 bits h, exactly as NumPy widens it: the hardware conversion, except that a NaN
    keeps its payload unquieted (NumPy's conversion is bit manipulation; the hardware's may set the quiet bit).
    Selected, not branched, so a loop vectorises."""
    u32 = np.uint32
    h = u32(h)
    sign = u32(u32(h & u32(0x8000)) << u32(16))
    nan = f32_from_bits(u32(sign | u32(0x7F800000) | u32(u32(h & u32(0x3FF)) << u32(13))))
    return nan if u32(h & u32(0x7FFF)) > u32(0x7C00) else _f16_bits_to_f32_hw(np.uint16(h))


@host_jit(error_model="numpy")
def _widen_bits(h, fp16):
    """float32 value of one half pattern (uint16 bits, fp16 or bf16)."""
    return _f16_value(h) if fp16 else _bf16_value(h)


@host_jit(error_model="numpy")
def _nan_result(x, y, r, default_nan):
    """Bits of r = x op y (float32, + or *) with NaN results pinned to what NumPy's loops give, the x86 rule:
    the first NaN operand, made quiet, else the default NaN. LLVM treats both operations as commutative and
    may swap the operands, which changes which NaN survives when both are NaN."""
    u32 = np.uint32
    xb, yb, rb = view_f32_as_u32(x), view_f32_as_u32(y), view_f32_as_u32(r)
    x_nan = u32(xb & u32(0x7FFFFFFF)) > u32(0x7F800000)
    y_nan = u32(yb & u32(0x7FFFFFFF)) > u32(0x7F800000)
    nan = u32(xb | u32(0x400000)) if x_nan else (u32(yb | u32(0x400000)) if y_nan else u32(default_nan))
    return nan if r != r else rb


@host_jit(error_model="numpy")
def _bf16_rne(x):
    """bfloat16 bits of float32 bits x, rounded half to even as ml_dtypes rounds: a carry out of the kept
    mantissa steps into the next binade or to infinity, and every NaN becomes the quiet NaN 0x7FC0 with its
    sign (ml_dtypes drops the payload). Written without branches so a loop of it vectorises."""
    u32 = np.uint32     # each step cast back to 32 bits: numba widens to 64, which halves the SIMD lanes
    x = u32(x)
    rounded = u32(u32(u32(x + u32(0x7FFF)) + u32(u32(x >> u32(16)) & u32(1))) >> u32(16))
    nan = u32(u32(u32(x >> u32(16)) & u32(0x8000)) | u32(0x7FC0))
    return np.uint16(nan if u32(x & u32(0x7FFFFFFF)) > u32(0x7F800000) else rounded)


@host_jit(error_model="numpy")
def _f16_rne(x):
    """float16 bits of float32 bits x as NumPy's float32 -> float16 cast gives them: the hardware conversion
    (round half to even, overflow to infinity, subnormals exact), except that a NaN keeps its sign and top 10
    payload bits as they are (bumped to 1 if those are all zero, so it stays a NaN) where the hardware would
    set the quiet bit. Selected, not branched, so a loop vectorises."""
    u32 = np.uint32
    x = u32(x)
    payload = u32(u32(x >> u32(13)) & u32(0x3FF))
    nan = u32(u32(u32(x >> u32(16)) & u32(0x8000)) | u32(0x7C00) | (payload if payload != u32(0) else u32(1)))
    return np.uint16(nan) if u32(x & u32(0x7FFFFFFF)) > u32(0x7F800000) else _f32_to_f16_bits_hw(f32_from_bits(x))


@host_jit(error_model="numpy")
def _round_bits(x, fp16):
    return _f16_rne(x) if fp16 else _bf16_rne(x)


@host_jit(error_model="numpy")
def _widen_array(h, fp16, out):
    """out[i] = float32 bits of half pattern h[i]; h (n,) uint16, out (n,) uint32."""
    if fp16:
        for i in range(h.size):
            out[i] = view_f32_as_u32(_f16_value(h[i]))
    else:
        for i in range(h.size):
            out[i] = np.uint32(np.uint32(h[i]) << np.uint32(16))


@host_jit(error_model="numpy")
def _round_array(x, fp16, out):
    """out[i] = half bits of float32 bits x[i], rounded half to even; x (n,) uint32, out (n,) uint16."""
    if fp16:
        for i in range(x.size):
            out[i] = _f16_rne(x[i])
    else:
        for i in range(x.size):
            out[i] = _bf16_rne(x[i])


@host_jit(error_model="numpy")
def _mul_nan_row(src, a_fp16, wi, dst, out_fp16, keep_f32, default_nan):
    """One row of the Mul whose factor wi is NaN: every product is NaN, and which NaN depends on the operand
    order (pinned to NumPy's); rare, so one generic loop. dst: uint32 float32 bits (keep_f32) or uint16 half
    bits (fp16 if out_fp16 else bf16)."""
    for j in range(src.size):
        v = _widen_bits(src[j], a_fp16)
        bits = _nan_result(v, wi, v * wi, default_nan)
        dst[j] = bits if keep_f32 else _round_bits(bits, out_fp16)


# One compiled function per dtype combination (and per source kind of the index add), so a run compiles only
# the loops its dtypes use: each vectorised loop costs seconds of cold compile time.
@host_jit(error_model="numpy")
def _mul_rows_bf16(a, w, out, default_nan):
    """out[i, j] = bf16(a[i, j] * w[i]): a, out (R, H) uint16 bf16 bits, w (R,) float32; the product formed
    in float32 and rounded once, half to even."""
    for i in range(a.shape[0]):
        wi, src, dst = w[i], a[i], out[i]
        if wi != wi:
            _mul_nan_row(src, False, wi, dst, False, False, default_nan)
            continue
        for j in range(src.size):
            dst[j] = _bf16_rne(view_f32_as_u32(_bf16_value(src[j]) * wi))


@host_jit(error_model="numpy")
def _mul_rows_f16(a, w, out, default_nan):
    """_mul_rows_bf16 for float16 bits."""
    for i in range(a.shape[0]):
        wi, src, dst = w[i], a[i], out[i]
        if wi != wi:
            _mul_nan_row(src, True, wi, dst, True, False, default_nan)
            continue
        for j in range(src.size):
            dst[j] = _f16_rne(view_f32_as_u32(_f16_value(src[j]) * wi))


@host_jit(error_model="numpy")
def _mul_rows_bf16_to_f32(a, w, out, default_nan):
    """out[i, j] = a[i, j] * w[i] in float32: a (R, H) uint16 bf16 bits, w (R,) float32, out (R, H) uint32
    (the products' float32 bits)."""
    for i in range(a.shape[0]):
        wi, src, dst = w[i], a[i], out[i]
        if wi != wi:
            _mul_nan_row(src, False, wi, dst, False, True, default_nan)
            continue
        for j in range(src.size):
            dst[j] = view_f32_as_u32(_bf16_value(src[j]) * wi)


@host_jit(error_model="numpy")
def _index_add_rows_f32(acc, slots, src, default_nan):
    """acc[slots[i]] += src[i], i ascending, in float32: acc (V, H) and src (n, H) float32, slots (n,) int64
    (in range)."""
    for i in range(slots.size):
        dst, row = acc[slots[i]], src[i]
        for j in range(row.size):
            s, x = dst[j], row[j]
            dst[j] = f32_from_bits(_nan_result(s, x, s + x, default_nan))


@host_jit(error_model="numpy")
def _index_add_rows_half(acc, slots, src, fp16, default_nan):
    """_index_add_rows_f32 with src (n, H) uint16 half bits (fp16 or bf16), each widened exactly."""
    for i in range(slots.size):
        dst, row = acc[slots[i]], src[i]
        if fp16:
            for j in range(row.size):
                s, x = dst[j], _f16_value(row[j])
                dst[j] = f32_from_bits(_nan_result(s, x, s + x, default_nan))
        else:
            for j in range(row.size):
                s, x = dst[j], _bf16_value(row[j])
                dst[j] = f32_from_bits(_nan_result(s, x, s + x, default_nan))


def _flat(a: np.ndarray, bits) -> np.ndarray:
    return a.reshape(-1).view(bits)


def widen_half(src: np.ndarray, out: np.ndarray) -> None:
    """out (float32, src's shape, C-contiguous) = src (bfloat16 or float16, C-contiguous) widened exactly."""
    _widen_array(_flat(src, np.uint16), src.dtype == _F16, _flat(out, np.uint32))


def round_to_half(src: np.ndarray, out: np.ndarray) -> None:
    """l0op::Cast to a half type: out (bfloat16 or float16) = src (float32, out's shape) rounded half to even,
    the bits np.copyto(out, src.astype(out.dtype)) gives."""
    if src.dtype != _F32 or out.dtype not in _HALF or src.shape != out.shape or not _contiguous(src, out):
        np.copyto(out, src.astype(out.dtype))
        return
    _round_array(_flat(src, np.uint32), out.dtype == _F16, _flat(out, np.uint16))


def _contiguous(*arrays) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


_MUL_KERNELS = {(_BF16, _BF16): (_mul_rows_bf16, np.uint16), (_F16, _F16): (_mul_rows_f16, np.uint16),
                (_BF16, _F32): (_mul_rows_bf16_to_f32, np.uint32)}
"""(tokens dtype, output dtype) -> the compiled Mul and the bits its output is passed as: the pairs the
operators' dtype rules allow (the rest go through NumPy)."""


def mul_rows(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """l0op::Mul of a (R, H) by w[:, None] ((R,) of a's dtype, or float32) into out (R, H): each product in
    float32, stored as float32 or rounded once (half to even) to out's half dtype. Bit for bit the result of
    (a.astype(float32) * w.astype(float32)[:, None]).astype(out.dtype), without the half-precision passes."""
    w32 = np.ascontiguousarray(w, dtype=_F32) if w.dtype != _F32 else w       # (R,): the cast costs nothing
    if a.dtype == _F32 and out.dtype == _F32:
        np.multiply(a, w32[:, None], out=out)
    elif a.ndim == 2 and out.shape == a.shape and w32.shape == a.shape[:1] and _contiguous(a, out, w32) \
            and (a.dtype, out.dtype) in _MUL_KERNELS:
        kernel, out_bits = _MUL_KERNELS[a.dtype, out.dtype]
        kernel(a.view(np.uint16), w32, out.view(out_bits), _DEFAULT_NAN)
    else:
        np.copyto(out, (a.astype(_F32) * w32[:, None]).astype(out.dtype))


def gather_rows(x: np.ndarray, indices: np.ndarray, out: np.ndarray) -> None:
    """l0op::GatherV2 along axis 0: out[i] = x[indices[i]] (indices may count from the end, as np.take's),
    its bits moved unchanged. An index outside [-rows, rows) raises np.take's own IndexError."""
    rows = x.shape[0]
    in_range = indices.size == 0 or (rows > 0 and int(indices.min()) >= -rows and int(indices.max()) < rows)
    if not in_range or x.dtype != out.dtype or x.dtype.itemsize not in _BITS:
        np.take(x, indices, axis=0, out=out)
        return
    bits = _BITS[x.dtype.itemsize]
    # every index is in range, so 'wrap' only maps the negative ones as 'raise' would, without the buffered
    # copy of the whole output that mode 'raise' makes
    np.take(x.view(bits), indices, axis=0, out=out.view(bits), mode="wrap")


def masked_scatter_rows(dst: np.ndarray, mask: np.ndarray, values: np.ndarray) -> None:
    """l0op::MaskedScatter: dst[mask] = values (values holds exactly mask's count of ones, in row-major
    order), bits moved unchanged when both have one dtype."""
    if dst.dtype == values.dtype and dst.dtype.itemsize in _BITS and mask.shape == dst.shape \
            and dst.flags.c_contiguous and values.ndim == 1:
        where = np.flatnonzero(mask)
        if where.size == values.size:
            # a flat index assignment: 1-3x faster than NumPy's boolean-mask assignment, same elements
            bits = _BITS[dst.dtype.itemsize]
            dst.reshape(-1).view(bits)[where] = values.view(bits)
            return
    dst[mask] = values


def nonzero_mask(src: np.ndarray, out: np.ndarray) -> None:
    """l0op::Cast of a routing map to bool: out = src != 0. A bool map is compared as its bytes: NumPy
    compares bool with the integer 0 by casting the map to int64 first (7x slower)."""
    np.not_equal(src.view(np.uint8) if src.dtype == np.bool_ else src, 0, out=out)


# --- host steps of the composite aclnn calls -----------------------------------------------------------
def _zero_bits(arr: np.ndarray) -> None:
    # the zero of every dtype here (ints, bool, IEEE floats and their half types) is the all-zero pattern
    if arr.dtype.itemsize in _BITS:
        arr.view(_BITS[arr.dtype.itemsize]).fill(0)
    else:
        arr.fill(0)


def zeros_like_step(arr: np.ndarray):
    """l0op::ZerosLike into a preallocated array."""
    return HostStep("l0op::ZerosLike", lambda: _zero_bits(arr),
                    host_cost.fill(arr.nbytes, arr.size, arr.dtype.itemsize))


def view_copy_step(src: np.ndarray, dst: np.ndarray):
    """l0op::ViewCopy; moves nothing here when the l0 operator already wrote the caller's array. On the chip the l0
    result is a tensor of its own that the ViewCopy copies into the caller's, so its modelled estimate is the copy
    of dst's bytes either way."""
    work = host_cost.move(dst.nbytes)
    if src is dst:
        return HostStep("l0op::ViewCopy", lambda: None, work)
    return HostStep("l0op::ViewCopy", lambda: np.copyto(dst, src), work)


def sort_ids_as_fp32_step(ids: np.ndarray, values: np.ndarray, order: np.ndarray):
    """l0op::Sort of int32 ids viewed as fp32, ascending and stable: values (the ids' int32 bits) and the int32
    order. Non-negative ids below 0x7F800000 sort as the integers do; NaN patterns (negative ids with every
    exponent bit set) sort last, other negative ids as negative floats."""
    def run():
        if ids.size and int(ids.min()) >= 0 and int(ids.max()) <= 0xFFFF:
            # the usual token ids: as fp32 bits these order as the integers do, and a stable sort of 16-bit
            # keys is NumPy's radix sort (8x faster than its fp32 timsort); equal keys keep their order either way
            perm = np.argsort(ids.astype(np.uint16), kind="stable")
        else:
            perm = np.argsort(ids.view(np.float32), kind="stable")
        np.copyto(order, perm.astype(order.dtype))
        np.copyto(values, ids[perm])
    return HostStep("l0op::Sort", run, host_cost.sort(ids.size, ids.dtype.itemsize))


def index_add_rows_step(var: np.ndarray, ids: np.ndarray, source: np.ndarray, bad_id):
    """l0op::MoeInplaceIndexAddAiCore where it is not simulated (910B / 910_93: InplaceIndexAdd of another
    library; 950: the MoeInplaceIndexAdd templates ops.l0.moe_inplace_index_add does not model): var[ids[i]] +=
    source[i] for the slots both cover, accumulated in fp32 in slot order and written back in var's dtype (round half to
    even). The real kernel adds with atomics in a timing-dependent
    order; this stands in with one fixed order. An id outside [0, rows) calls bad_id(slot, id) -> the
    exception to raise, as the kernel's out-of-range write would fail."""
    def run():
        n = min(ids.size, source.shape[0])
        slots = ids[:n].astype(np.int64)
        bad = np.flatnonzero((slots < 0) | (slots >= var.shape[0]))
        if bad.size:
            raise bad_id(int(bad[0]), int(slots[bad[0]]))
        if not _index_add_fast(var, slots, source[:n]):
            acc = var.astype(np.float32)
            np.add.at(acc, slots, source[:n].astype(np.float32))
            np.copyto(var, acc.astype(var.dtype))
    rows = min(ids.size, source.shape[0] if source.ndim else 0)
    row_elems = int(np.prod(var.shape[1:], dtype=np.int64)) if var.ndim else 1
    work = host_cost.index_add(rows, row_elems, var.dtype.itemsize, ids.dtype.itemsize * rows)
    return HostStep("l0op::MoeInplaceIndexAddAiCore", run, work)


def _index_add_fast(var: np.ndarray, slots: np.ndarray, source: np.ndarray) -> bool:
    """index_add_rows_step's accumulation for float32 / half var and source of one row shape (False: not
    handled, nothing written). The same float32 additions in the same order as np.add.at, so the same bits."""
    if var.dtype not in _HALF + (_F32,) or source.dtype not in _HALF + (_F32,) or var.ndim == 0 \
            or var.shape[1:] != source.shape[1:] or not _contiguous(var, source):
        return False
    cols = int(np.prod(var.shape[1:], dtype=np.int64))
    rows, n = var.shape[0], source.shape[0]
    if var.dtype == _F32:
        acc = var.reshape(rows, cols)      # no copy: the ids were checked, nothing can fail half way
    else:
        acc = np.empty((rows, cols), dtype=_F32)
        widen_half(var, acc)
    if source.dtype == _F32:
        _index_add_rows_f32(acc, slots, source.reshape(n, cols), _DEFAULT_NAN)
    else:
        _index_add_rows_half(acc, slots, source.reshape(n, cols).view(np.uint16), source.dtype == _F16, _DEFAULT_NAN)
    if var.dtype != _F32:
        round_to_half(acc, var)
    return True
