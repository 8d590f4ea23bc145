"""What the MoeInplaceIndexAdd sort-template tests share: the window score of IndexStatisticInt32 written from its
formula, and the order bound of atomic adds.

Score: every id, shifted right by lastDimShift (ceil(log2(512 / (afterAxis * 4))) for rows under 512 bytes), is
FNV-1a hashed (xor 0x811C9DC5, times 0x01000193, uint32); the low byte of each hash goes into a 256-bin histogram,
all four bytes for the window's last len % 256 ids; score = the fullest bin (uint16, read as int16) / len in fp32.

Bound: the exact sum (float64) of var and every update that lands on an element lies within
((1 + u)**k - 1) * sum |terms| of the result, k = 2 * adds (each update is rounded at most twice on its way: in a
run's fp32 sum, u32 <= u, and in the T rounding of the run sum or of an atomic add), u the unit roundoff of T.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.bits import assert_bits_equal

from ...sum_bound import U_FP32, assert_within_sum_bound

UNIT_ROUNDOFF = {np.dtype(np.float32): 2.0 ** -24, np.dtype(np.float16): 2.0 ** -11,
                 np.dtype(ml_dtypes.bfloat16): 2.0 ** -8}


def window_score(ids: np.ndarray, after: int) -> np.float32:
    """maxScore of a window of int32 ids for rows of `after` columns."""
    row_bytes = after * 4
    shift = 0
    if row_bytes < 512:
        q = 512 // row_bytes
        shift = q.bit_length() - 1 if q & (q - 1) == 0 else q.bit_length()
    h = ((ids.astype(np.uint32) >> np.uint32(shift)) ^ np.uint32(0x811C9DC5)) * np.uint32(0x01000193)
    main = len(ids) // 256 * 256
    hist = np.bincount((h[:main] & 0xFF).astype(np.int64), minlength=256)
    for b in range(4):
        hist += np.bincount(((h[main:] >> np.uint32(8 * b)) & 0xFF).astype(np.int64), minlength=256)
    return np.float32(np.int16(np.uint16(hist.max() & 0xFFFF))) / np.float32(len(ids))


def check_within_bound(got, var, idx, upd):
    """got: the kernel's var; var: var before; idx: (M,) rows along axis 1 of var (P, N, H) / axis 0 of (N, H);
    upd: (P, M, H) / (M, H). Ids outside [0, N) add nothing. Untouched rows keep their bits."""
    got3, var3, upd3 = (a.reshape((1,) + a.shape) if a.ndim == 2 else a for a in (got, var, upd))
    ok = (idx >= 0) & (idx < var3.shape[1])
    exact = var3.astype(np.float64)
    magnitude = np.abs(exact)
    adds = np.zeros(var3.shape[1], np.int64)
    np.add.at(exact, (slice(None), idx[ok]), upd3[:, ok].astype(np.float64))
    np.add.at(magnitude, (slice(None), idx[ok]), np.abs(upd3[:, ok].astype(np.float64)))
    np.add.at(adds, idx[ok], 1)
    k = 2 * adds[None, :, None].astype(np.float64)
    bound = ((1 + UNIT_ROUNDOFF[var.dtype]) ** k - 1) * magnitude
    err = np.abs(got3.astype(np.float64) - exact)
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}"
    untouched = adds == 0
    assert_bits_equal(got3, var3, "rows no index names keep their bits", mask=untouched[None, :, None])


def check_formula(got, var, idx, upd):
    """The formula check of an (N, H) index-add result, sharing no code with add_windows or the kernel: every element
    against var + the float64 sum of the updates landing on it (tests/sum_bound.py). With n updates on a row, each
    term meets at most n fp32 additions (u = 2^-24) for fp32 var; for 16-bit var each addition is rounded to T and a
    run sum once more on its way into T, so m = 2n with u the unit roundoff of T."""
    ok = (idx >= 0) & (idx < var.shape[0])
    exact = var.astype(np.float64)
    magnitude = np.abs(exact)
    adds = np.zeros(var.shape[0], np.int64)
    np.add.at(exact, idx[ok], upd[ok].astype(np.float64))
    np.add.at(magnitude, idx[ok], np.abs(upd[ok].astype(np.float64)))
    np.add.at(adds, idx[ok], 1)
    if var.dtype == np.dtype(np.float32):
        m, u = adds, U_FP32
    else:
        m, u = 2 * adds, UNIT_ROUNDOFF[var.dtype]
    assert_within_sum_bound(got, exact, magnitude, m[:, None], var.dtype, u=u,
                            what="index_add vs the exact float64 sums")


def add_windows(var, idx, upd, windows, sort_floor):
    """The SIMD-sort kernels' sequence of roundings on (N, H) var, windows in the given order (first slot, length):
    a window whose score passes 0.01 and whose length passes sort_floor is cut into runs of equal ids (ascending),
    each summed in fp32 from +0 in slot order, rounded to T and added to var in T; any other window adds its slots
    one by one in T. Returns (result, number of windows that sorted)."""
    dt = var.dtype
    out = var.astype(np.float32)
    sorted_windows = 0
    for first, n in windows:
        ids, rows = idx[first:first + n], upd[first:first + n].astype(np.float32)
        if window_score(ids, var.shape[1]) > np.float32(0.01) and n > sort_floor:
            sorted_windows += 1
            for v in np.unique(ids):
                s = np.zeros(var.shape[1], np.float32)
                for r in rows[ids == v]:          # slot order within the run
                    s = s + r
                out[v] = (out[v] + s.astype(dt).astype(np.float32)).astype(dt).astype(np.float32)
        else:
            for v, r in zip(ids, rows):
                out[v] = (out[v] + r).astype(dt).astype(np.float32)
    return out.astype(dt), sorted_windows
