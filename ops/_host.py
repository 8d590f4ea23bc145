"""Host implementations of generic l0 operators that composite aclnn calls chain around the simulated kernels
(they come from other CANN libraries, so they are not simulated: only their results matter)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._framework import HostStep

_TILE = 32


@njit(cache=True, nogil=True)
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


def transpose_2d(src: np.ndarray, dst: np.ndarray) -> None:
    """l0op::Transpose of a 2-D tensor into a preallocated (cols, rows) array of the same dtype (bits moved
    unchanged; about 5x faster than NumPy's strided copy for the (N, E) maps and probs of a MoE layer)."""
    if src.ndim != 2 or dst.shape != src.shape[::-1] or dst.dtype.itemsize != src.dtype.itemsize \
            or src.dtype.itemsize not in _BITS or not dst.flags.c_contiguous:
        np.copyto(dst, src.T)
        return
    bits = _BITS[src.dtype.itemsize]
    _transpose_tiles(np.ascontiguousarray(src).view(bits), dst.view(bits))


# --- host steps of the composite aclnn calls -----------------------------------------------------------
def zeros_like_step(arr: np.ndarray):
    """l0op::ZerosLike into a preallocated array."""
    return HostStep("l0op::ZerosLike", lambda: arr.fill(0))


def view_copy_step(src: np.ndarray, dst: np.ndarray):
    """l0op::ViewCopy; moves nothing when the l0 operator already wrote the caller's array."""
    if src is dst:
        return HostStep("l0op::ViewCopy", lambda: None)
    return HostStep("l0op::ViewCopy", lambda: np.copyto(dst, src))


def sort_ids_as_fp32_step(ids: np.ndarray, values: np.ndarray, order: np.ndarray):
    """l0op::Sort of int32 ids viewed as fp32, ascending and stable: values (the ids' int32 bits) and the int32
    order. Non-negative ids below 0x7F800000 sort as the integers do; NaN patterns (negative ids with every
    exponent bit set) sort last, other negative ids as negative floats."""
    def run():
        perm = np.argsort(ids.view(np.float32), kind="stable")
        np.copyto(order, perm.astype(order.dtype))
        np.copyto(values, ids[perm])
    return HostStep("l0op::Sort", run)


def index_add_rows_step(var: np.ndarray, ids: np.ndarray, source: np.ndarray, bad_id):
    """l0op::MoeInplaceIndexAddAiCore (moe/3rd; its kernel is registered for ascend950 only, so it is a host
    step here): var[ids[i]] += source[i] for the slots both cover, accumulated in fp32 in slot order and
    written back in var's dtype (round half to even). The real kernel adds with atomics in a timing-dependent
    order; this stands in with one fixed order. An id outside [0, rows) calls bad_id(slot, id) -> the
    exception to raise, as the kernel's out-of-range write would fail."""
    def run():
        n = min(ids.size, source.shape[0])
        slots = ids[:n].astype(np.int64)
        bad = np.flatnonzero((slots < 0) | (slots >= var.shape[0]))
        if bad.size:
            raise bad_id(int(bad[0]), int(slots[bad[0]]))
        acc = var.astype(np.float32)
        np.add.at(acc, slots, source[:n].astype(np.float32))
        np.copyto(var, acc.astype(var.dtype))
    return HostStep("l0op::MoeInplaceIndexAddAiCore", run)
