"""Bulk byte moves for numba code: llvm.memcpy on array data.

numba compiles this to the C library's memcpy, which is what lets a simulated
DataCopy run near memory bandwidth. Offsets and lengths are in bytes; callers check
bounds first.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _byte_ptr(context, builder, arr_type, arr_value, byte_offset):
    arr = context.make_array(arr_type)(context, builder, arr_value)
    base = builder.bitcast(arr.data, cgutils.voidptr_t)
    return builder.gep(base, [byte_offset])


@intrinsic
def memcpy_bytes(typingctx, dst, dst_off_bytes, src, src_off_bytes, n_bytes):
    """Copy n_bytes from src (at a byte offset) to dst (at a byte offset); no overlap."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d = _byte_ptr(context, builder, signature.args[0], args[0], args[1])
        s = _byte_ptr(context, builder, signature.args[2], args[2], args[3])
        cgutils.raw_memcpy(builder, d, s, args[4], 1)
        return context.get_dummy_value()

    return sig, codegen



@intrinsic
def data_address(typingctx, arr):
    """Address of an array's first element as an int64: `arr.ctypes.data` without building a ctypes
    object (which would hold a reference to the array)."""
    sig = types.int64(arr)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.ptrtoint(a.data, context.get_value_type(types.int64))

    return sig, codegen


@intrinsic
def store_i64(typingctx, address, index, value):
    """*(int64*)address[index] = value: a store into a host buffer known by its address (the timeline's
    trace). An address in the core state instead of one more array in Core keeps Core small: a fifth
    array field makes every AscendC call several times slower (LLVM no longer keeps Core in registers)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        ptr = builder.inttoptr(args[0], i64.as_pointer())
        builder.store(args[2], builder.gep(ptr, [args[1]]))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def load_i64(typingctx, address, index):
    """*(int64*)address[index]: the load matching store_i64."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        ptr = builder.inttoptr(args[0], i64.as_pointer())
        return builder.load(builder.gep(ptr, [args[1]]))

    return sig, codegen


def _borrowed(context, builder, ty, value):
    """`value` with every array in it (also inside tuples) turned into a view that owns nothing."""
    if isinstance(ty, types.Array):
        arr = context.make_array(ty)(context, builder, value=value)
        arr.meminfo = cgutils.get_null_value(arr.meminfo.type)
        arr.parent = cgutils.get_null_value(arr.parent.type)
        return arr._getvalue()
    if isinstance(ty, types.BaseTuple):
        for i, item_ty in enumerate(ty.types):
            item = builder.extract_value(value, i)
            value = builder.insert_value(value, _borrowed(context, builder, item_ty, item), i)
    return value


@intrinsic
def borrow(typingctx, args):
    """The same arrays / tuples of arrays with null meminfo: non-owning views.

    Every array numba passes between inlined device functions is reference counted, and the
    count is an atomic read-modify-write; with owners null the counting reduces to a null
    test. Safe while the caller keeps the real arrays alive, as the launcher does for the
    duration of a stage.
    """
    sig = args(args)

    def codegen(context, builder, signature, llargs):
        return _borrowed(context, builder, signature.args[0], llargs[0])

    return sig, codegen


STREAM_MIN_BYTES = 4096   # below this a plain memcpy is faster than streaming stores plus a fence


@intrinsic
def stream_bytes(typingctx, dst, dst_off_bytes, src, src_off_bytes, n_bytes):
    """Copy n_bytes like memcpy_bytes, but write dst with non-temporal (streaming) stores.

    A DMA write to GM does not pass through the AI core's caches; on the CPU the same bytes
    written with ordinary stores first pull every destination line into the cache (read for
    ownership), doubling the memory traffic of a scatter of large rows. Streaming stores skip
    that read. The head up to 32-byte alignment and the tail go through memcpy; a fence at
    the end orders the streaming stores before anything the caller does next.
    """
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d = _byte_ptr(context, builder, signature.args[0], args[0], args[1])
        s = _byte_ptr(context, builder, signature.args[2], args[2], args[3])
        n = args[4]
        i64 = ir.IntType(64)
        vec_t = ir.VectorType(i64, 4)
        d_addr = builder.ptrtoint(d, i64)
        mis = builder.and_(builder.sub(ir.Constant(i64, 32), builder.and_(d_addr, ir.Constant(i64, 31))),
                           ir.Constant(i64, 31))
        head = builder.select(builder.icmp_signed("<", n, mis), n, mis)
        cgutils.raw_memcpy(builder, d, s, head, 1)
        rest = builder.sub(n, head)
        blocks = builder.sdiv(rest, ir.Constant(i64, 32))
        d_body = builder.gep(d, [head])
        s_body = builder.gep(s, [head])
        with cgutils.for_range(builder, blocks) as loop:
            off = builder.mul(loop.index, ir.Constant(i64, 32))
            src_v = builder.bitcast(builder.gep(s_body, [off]), vec_t.as_pointer())
            dst_v = builder.bitcast(builder.gep(d_body, [off]), vec_t.as_pointer())
            value = builder.load(src_v, align=1)
            store = builder.store(value, dst_v, align=32)
            store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        done = builder.mul(blocks, ir.Constant(i64, 32))
        cgutils.raw_memcpy(builder, builder.gep(d_body, [done]), builder.gep(s_body, [done]),
                           builder.sub(rest, done), 1)
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def call_by_address(typingctx, fn_address, args):
    """Call the C function `void f(int64, ...)` at `fn_address` with the integers of the tuple `args`.

    The callee is compiled once on its own (a numba cfunc) and the caller holds no copy of its code: LLVM cannot
    inline through an address that is only known at run time, and the caller stays cacheable on disk because
    the address is data (in the core state), not a constant baked into it."""
    if not isinstance(args, types.BaseTuple) or not all(isinstance(t, (types.Integer, types.Boolean))
                                                          for t in args.types):
        return None
    sig = types.void(types.int64, args)

    def codegen(context, builder, signature, llargs):
        i64 = ir.IntType(64)
        values = [context.cast(builder, builder.extract_value(llargs[1], k), ty, types.int64)
                  for k, ty in enumerate(signature.args[1].types)]
        fn_type = ir.FunctionType(ir.VoidType(), [i64] * len(values))
        builder.call(builder.inttoptr(llargs[0], fn_type.as_pointer()), values)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def i64_pointer(typingctx, address):
    """The int64 `address` as an int64* (for numba.carray over a host buffer known by its address)."""
    sig = types.CPointer(types.int64)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.IntType(64).as_pointer())

    return sig, codegen


@intrinsic
def ub_view(typingctx, base, like, byte_offset, n_elems):
    """A 1-D C-contiguous view of `n_elems` elements starting `byte_offset` bytes into `base`'s data, of the
    element type of `like` (an array, or a numpy scalar class such as np.float32); it owns nothing (as borrow).

    What `T[a:b]` and `ub.view(dtype)` build, without their clamping and reference counting: a LocalTensor
    made by the queues costs a few instructions instead of a slice's fifty. Callers pass ranges inside base."""
    if isinstance(like, types.Array):
        dtype = like.dtype
    elif isinstance(like, types.NumberClass):
        dtype = like.instance_type
    else:
        return None
    result = types.Array(dtype, 1, "C")
    sig = result(base, like, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, args[0])
        out = context.make_array(result)(context, builder)
        item_ty = context.get_data_type(dtype)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(item_ty))
        start = builder.gep(builder.bitcast(src.data, cgutils.voidptr_t), [args[2]])
        context.populate_array(out, data=builder.bitcast(start, item_ty.as_pointer()), shape=[args[3]],
                               strides=[itemsize], itemsize=itemsize, meminfo=None)
        return out._getvalue()

    return sig, codegen
