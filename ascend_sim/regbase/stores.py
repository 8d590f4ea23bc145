"""Register stores (RegTensor -> UB): DataCopy StoreDist NORM / PACK_B16 / PACK_B32 / PACK4_B32 on a
LocalTensor or a raw pointer, the unaligned store, and the UnalignReg store stream (DataCopyUnAlign +
DataCopyUnAlignPost). Bytes of inactive lanes are left as they were; each store notes its UB write
(local.note_ub_write). In checked mode every UB byte written is a PIPE_V access of CALL_VF."""
from __future__ import annotations

import numpy as np

from .. import check as chk
from .._jit import aicore
from ..faults import fault
from ..layout import (
    CALL_R_STORE,
    CALL_R_STORE_UNALIGN,
    CALL_R_STORE_UNALIGN_POST,
    CALL_VF,
    F_ELEM_TYPE,
    F_PARAM,
    N_UREGS,
    P_COUNT,
    PIPE_V,
    UREG_BASE,
    UREG_WORDS,
)
from ..local import note_ub_write
from .registers import KIND_STORE, VL, _instr
from .ub_access import _ub_reach, _ub_span

STORE_NORM = 0           # StoreDist::DIST_NORM_B8/B16/B32


@aicore
def reg_store(c, t, src, offset, mask):
    """DataCopy<T, DIST_NORM>(t + offset, src, mask): the active lanes of src to a 32-byte aligned address; the
    bytes of inactive lanes are left as they were. Only the span up to the last active lane must lie in t.
    Returns offset + lanes (POST_MODE_UPDATE)."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + lanes
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + lanes
    last = 0
    for i in range(lanes):
        if mask[i * isz] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last * isz, 32)
    if a < 0:
        return offset + lanes
    chk.ub(c, CALL_VF, PIPE_V, a, last * isz, True)
    for i in range(last):
        if mask[i * isz] != 0:
            t[offset + i] = src[i]
    note_ub_write(c, a + last * isz)
    return offset + lanes


@aicore
def reg_store_unalign(c, t, src, offset, count):
    """DataCopyUnAlign + DataCopyUnAlignPost: the first `count` lanes of src to any element address (the flush is
    implied: the bytes land at once). Returns offset + count."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE_UNALIGN, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE_UNALIGN, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE_UNALIGN, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_span(c, CALL_R_STORE_UNALIGN, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    chk.ub(c, CALL_VF, PIPE_V, a, count * isz, True)
    for i in range(count):
        t[offset + i] = src[i]
    note_ub_write(c, a + count * isz)
    return offset + count


@aicore
def reg_store_span(c, t, src, offset, mask):
    """DataCopy<T, POST_MODE_UPDATE>(addr, src, lanes, mask) through a raw UB pointer (32-byte aligned): the
    active lanes, up to the last, must stay in the UB. Returns offset + lanes."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + lanes
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + lanes
    last = 0
    for i in range(lanes):
        if mask[i * isz] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last * isz, 32)
    if a < 0:
        return offset + lanes
    chk.ub(c, CALL_VF, PIPE_V, a, last * isz, True)
    s = src.view(np.uint8)
    for i in range(last):
        if mask[i * isz] != 0:
            for k in range(isz):
                c.ub[a + i * isz + k] = s[i * isz + k]
    note_ub_write(c, a + last * isz)
    return offset + lanes


def _narrowing_store(lane_dtype, elem_dtype, t_bytes, src_bytes, span, name, doc):
    """One narrowing StoreDist (PACK_B16 / PACK_B32 / PACK4_B32) as its own device function: the low bytes of
    each active lane of the source register, seen as `lane_dtype` lanes (their width also picks the predicate
    byte of each lane), to consecutive `elem_dtype` elements from the 32-byte aligned UB address of t + offset.
    t must hold t_bytes-byte elements and src src_bytes-byte ones; `span` is _ub_span (the bytes up to the last
    active lane lie in t) or _ub_reach (a raw pointer: they lie in the UB). The widths are bound when the store is
    made, so each compiles with them as constants. Bytes of inactive lanes are left as they were. The store
    returns offset + 64 (POST_MODE_UPDATE)."""
    lane_bytes = np.dtype(lane_dtype).itemsize
    lanes = VL // lane_bytes
    elem_bytes = np.dtype(elem_dtype).itemsize
    low_bits = (1 << (8 * elem_bytes)) - 1

    def store(c, t, src, offset, mask):
        if not _instr(c, CALL_R_STORE, KIND_STORE):
            return offset + 64
        if t.itemsize != t_bytes or src.itemsize != src_bytes:
            fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
            return offset + 64
        last = 0
        for i in range(lanes):
            if mask[i * lane_bytes] != 0:
                last = i + 1
        a = span(c, CALL_R_STORE, t, offset, last * elem_bytes, 32)
        if a < 0:
            return offset + 64
        chk.ub(c, CALL_VF, PIPE_V, a, last * elem_bytes, True)
        s = src.view(lane_dtype)
        out = c.ub[a: a + last * elem_bytes].view(elem_dtype)
        for i in range(last):
            if mask[i * lane_bytes] != 0:
                out[i] = s[i] & low_bits
        note_ub_write(c, a + last * elem_bytes)
        return offset + 64
    store.__name__ = store.__qualname__ = name
    store.__doc__ = doc
    return aicore(store)


reg_store_pack4 = _narrowing_store(np.uint32, np.uint8, 1, 4, _ub_span, "reg_store_pack4", """\
DataCopy<T, StoreDist::DIST_PACK4_B32>(t + offset, src, mask): the low byte of each active 32-bit lane of src to
consecutive bytes of the 1-byte tensor t (32-byte aligned). Returns offset + 64.""")

reg_store_pack_b16 = _narrowing_store(np.uint16, np.uint8, 2, 2, _ub_reach, "reg_store_pack_b16", """\
DataCopy<uint16_t, POST_MODE_UPDATE, StoreDist::DIST_PACK_B16>(addr, src, 64, mask): the low byte of each active
16-bit lane i of src to byte i from the 32-byte aligned address of t + offset (t a 16-bit tensor, so 128 lanes fill
64 of its elements; bytes of inactive lanes are left as they were). Returns offset + 64.""")

reg_store_pack4_span = _narrowing_store(np.uint32, np.uint8, 1, 4, _ub_reach, "reg_store_pack4_span", """\
DataCopy<int8_t, POST_MODE_UPDATE, StoreDist::DIST_PACK4_B32>(addr, src, 64, mask) through a raw UB pointer: as
reg_store_pack4, the low byte of each active 32-bit lane to consecutive bytes from the 32-byte aligned address
t + offset (t a 1-byte tensor); the bytes up to the last active lane must stay in the UB. Returns offset + 64.""")

reg_store_pack_b32 = _narrowing_store(np.uint32, np.uint16, 2, 2, _ub_span, "reg_store_pack_b32", """\
DataCopy<T, StoreDist::DIST_PACK_B32>(t + offset, src, mask) for a 16-bit T: the low 16 bits of each active 32-bit
lane i of src (uint16 slot 2i of a vreg_u16) to t[offset + i] (32-byte aligned address); inactive lanes leave their
element as it was. Only the span up to the last active lane must lie in t. Returns offset + 64.""")


# UnalignReg: a store stream writes a 32-byte UB block once the stream has filled it (or passed its end) and holds
# the bytes of a block it has only begun; DataCopyUnAlignPost writes what is held. The bytes of a block the stream
# starts inside are written alone (the block's other bytes are left as they were).
@aicore
def _ureg_words(c, u):
    base = UREG_BASE + (u % N_UREGS) * UREG_WORDS
    return c.state[base: base + UREG_WORDS]


@aicore
def unalign_reg(c, u):
    """`UnalignReg u;` (u 0..3): an empty store stream. Not an instruction. Returns u."""
    w = _ureg_words(c, u)
    w[4] = -1
    w[5] = 0
    return u


@aicore
def _ureg_write_held(c, w):
    held = w[0:4].view(np.uint8)
    a = w[4]
    n = w[5]
    if n > 0:
        chk.ub(c, CALL_VF, PIPE_V, a, n, True)
        for i in range(n):
            c.ub[a + i] = held[i]
        note_ub_write(c, a + n)
    w[4] = -1
    w[5] = 0


@aicore
def reg_store_unalign_stream(c, t, src, u, offset, count):
    """DataCopyUnAlign<T, POST_MODE_UPDATE>(addr, src, ureg u, count): the first `count` lanes of src continue the
    stream of UnalignReg u at element `offset` of t (any element address; the stream must go on where it stopped,
    else F_PARAM). Bytes that complete a 32-byte block are written, the rest are held in u. Returns offset + count.
    """
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE_UNALIGN, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE_UNALIGN, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE_UNALIGN, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_reach(c, CALL_R_STORE_UNALIGN, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    w = _ureg_words(c, u)
    held = w[0:4].view(np.uint8)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE_UNALIGN, P_COUNT, a, w[4] + w[5], w[4] + w[5])
        return offset + count
    if w[5] == 0:
        w[4] = a
    s = src.view(np.uint8)
    for i in range(count * isz):
        held[w[5]] = s[i]
        w[5] += 1
        if (w[4] + w[5]) % 32 == 0:
            _ureg_write_held(c, w)
            w[4] = a + i + 1
    return offset + count


@aicore
def reg_store_unalign_post(c, t, u, offset, post):
    """DataCopyUnAlignPost(addr, ureg u, post): write the bytes u holds (the stream's tail) and empty u; the
    address must be where the stream stopped. Returns offset + post."""
    if not _instr(c, CALL_R_STORE_UNALIGN_POST, KIND_STORE):
        return offset + post
    a = _ub_reach(c, CALL_R_STORE_UNALIGN_POST, t, offset, 0, t.itemsize)
    if a < 0:
        return offset + post
    w = _ureg_words(c, u)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE_UNALIGN_POST, P_COUNT, a, w[4] + w[5], w[4] + w[5])
        return offset + post
    _ureg_write_held(c, w)
    return offset + post
