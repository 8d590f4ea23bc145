"""Bulk byte moves for numba code: llvm.memcpy on array data.

numba compiles this to the C library's memcpy, which is what lets a simulated
DataCopy run near memory bandwidth. Offsets and lengths are in bytes; callers check
bounds first.
"""
from __future__ import annotations

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

