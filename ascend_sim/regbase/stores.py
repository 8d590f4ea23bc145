"""Register stores (RegTensor -> UB): DataCopy StoreDist NORM / PACK_B16 / PACK_B32 / PACK4_B32 on a
LocalTensor or a raw pointer, the unaligned store, and the UnalignReg store stream (DataCopyUnAlign +
DataCopyUnAlignPost). Bytes of inactive lanes are left as they were; each store notes its UB write
(local.note_ub_write). In checked mode every UB byte written is a PIPE_V access of CALL_VF."""
from __future__ import annotations

import numpy as np

from .. import check as chk
from .._jit import aicore
from ..faults import fault
from ..layout import CALL_R_STORE, CALL_VF, F_ELEM_TYPE, F_PARAM, N_UREGS, P_COUNT, PIPE_V, UREG_BASE, UREG_WORDS
from ..local import note_ub_write
from .registers import HALF_LANES, KIND_STORE, _b16_operands, _instr
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
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_span(c, CALL_R_STORE, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    chk.ub(c, CALL_VF, PIPE_V, a, count * isz, True)
    for i in range(count):
        t[offset + i] = src[i]
    note_ub_write(c, a + count * isz)
    return offset + count


@aicore
def reg_store_pack4(c, t, src, offset, mask):
    """DataCopy<T, StoreDist::DIST_PACK4_B32>(t + offset, src, mask): the low byte of each active 32-bit lane of
    src to consecutive bytes of the 1-byte tensor t (32-byte aligned). Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if t.itemsize != 1 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + 64
    last = 0
    for i in range(64):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    for i in range(last):
        if mask[i * 4] != 0:
            t[offset + i] = src[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


@aicore
def reg_store_pack_b16(c, t, src, offset, mask):
    """DataCopy<uint16_t, POST_MODE_UPDATE, StoreDist::DIST_PACK_B16>(addr, src, 64, mask): the low byte of each
    active 16-bit lane i of src to byte i from the 32-byte aligned address of t + offset (t a 16-bit tensor, so
    128 lanes fill 64 of its elements; bytes of inactive lanes are left as they were). Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if not _b16_operands(c, CALL_R_STORE, t, src):
        return offset + 64
    last = 0
    for i in range(128):
        if mask[i * 2] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    s = src.view(np.uint16)
    for i in range(last):
        if mask[i * 2] != 0:
            c.ub[a + i] = s[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


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


@aicore
def reg_store_pack4_span(c, t, src, offset, mask):
    """DataCopy<int8_t, POST_MODE_UPDATE, StoreDist::DIST_PACK4_B32>(addr, src, 64, mask) through a raw UB
    pointer: as reg_store_pack4, the low byte of each active 32-bit lane to consecutive bytes from the 32-byte
    aligned address t + offset (t a 1-byte tensor); the bytes up to the last active lane must stay in the UB.
    Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if t.itemsize != 1 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + 64
    last = 0
    for i in range(64):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    s = src.view(np.uint32)
    for i in range(last):
        if mask[i * 4] != 0:
            c.ub[a + i] = s[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


@aicore
def reg_store_pack_b32(c, t, src, offset, mask):
    """DataCopy<T, StoreDist::DIST_PACK_B32>(t + offset, src, mask) for a 16-bit T: the low 16 bits of each active
    32-bit lane i of src (uint16 slot 2i of a vreg_u16) to t[offset + i] (32-byte aligned address); inactive lanes
    leave their element as it was. Only the span up to the last active lane must lie in t. Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + HALF_LANES
    if t.itemsize != 2 or src.itemsize != 2:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + HALF_LANES
    last = 0
    for i in range(HALF_LANES):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last * 2, 32)
    if a < 0:
        return offset + HALF_LANES
    chk.ub(c, CALL_VF, PIPE_V, a, last * 2, True)
    for i in range(last):
        if mask[i * 4] != 0:
            t[offset + i] = src[2 * i]
    note_ub_write(c, a + last * 2)
    return offset + HALF_LANES


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
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_reach(c, CALL_R_STORE, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    w = _ureg_words(c, u)
    held = w[0:4].view(np.uint8)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, a, w[4] + w[5], w[4] + w[5])
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
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + post
    a = _ub_reach(c, CALL_R_STORE, t, offset, 0, t.itemsize)
    if a < 0:
        return offset + post
    w = _ureg_words(c, u)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, a, w[4] + w[5], w[4] + w[5])
        return offset + post
    _ureg_write_held(c, w)
    return offset + post
