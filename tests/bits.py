"""The one bit-for-bit compare of the test suite: assert_bits_equal(got, want, where).

The simulator's results must equal their goldens bit for bit, the sign of zero and the NaN payload included, so
comparing values (==, np.array_equal, np.testing.assert_array_equal on floats) is too weak: -0.0 == +0.0, and a NaN
equals nothing. The compare here looks at the stored bits of every element of any dtype the tests use (fp64 / fp32
/ fp16, the ml_dtypes bf16, fp8 e4m3 / e5m2, e8m0, fp4 e2m1, integers, bool), and a failure says which case, how
many elements, which ones and which values (hex and decoded), rather than "False".
"""
from __future__ import annotations

import os

import numpy as np

#: how many differing elements a failure lists (the first one and up to MORE_SHOWN - 1 after it)
MORE_SHOWN = 6


def _bit_words(a: np.ndarray) -> np.ndarray:
    """One unsigned word per element holding its stored bits (itemsize 1, 2, 4 or 8 bytes); other item sizes (e.g.
    complex128) come back as rows of bytes, shape a.shape + (itemsize,)."""
    a = np.ascontiguousarray(a).reshape(a.shape)     # (ascontiguousarray makes a 0-d array 1-d)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return a.view(f"u{a.dtype.itemsize}")
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def _is_nan(a: np.ndarray) -> np.ndarray:
    """NaN elements of a (all False for integer and bool dtypes). The ml_dtypes floats report their kind as 'V',
    so anything that is not an integer or bool is widened to float64 first (exact for every float format here)."""
    if a.dtype.kind in "iub":
        return np.zeros(a.shape, bool)
    with np.errstate(invalid="ignore"):
        return np.isnan(a.astype(np.float64))


def _show(a: np.ndarray, words: np.ndarray, index: tuple) -> str:
    """One element as '0x<bits> (<value>)', the hex padded to the item size."""
    word = words[index]
    bits = "0x" + (f"{int(word):0{2 * a.dtype.itemsize}x}" if words.ndim == a.ndim
                   else bytes(word.tolist()).hex())
    value = a[index]
    if a.dtype.kind in "iubc":
        shown = str(value.item())
    else:
        try:
            shown = repr(float(value))      # float(): the ml_dtypes scalars print as float64 would
        except (TypeError, ValueError):
            shown = str(value)
    return f"{bits} ({shown})"


def _case(where: str) -> str:
    """The case a failure names: the running pytest id (its parametrisation included) and the caller's words."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    return " | ".join(part for part in (test, where) if part) or "bit compare"


def assert_bits_equal(got, want, where: str = "", *, nan_equal: bool = False, mask=None) -> None:
    """Assert that got and want hold the same bits in every element.

    got, want: numpy arrays (or scalars) of one dtype and one shape; a dtype or shape mismatch fails on its own
    before any element is compared; None (an optional output not produced) equals None only.
    where: the case, in the caller's words (operand, shape, dtype, mode, profile); the running pytest id, with its
    parametrisation, is added by itself.
    nan_equal: any NaN equals any NaN (sign and payload ignored), for outputs whose NaN payload the real operator
    leaves unspecified; a NaN never equals a number.
    mask: bool array broadcastable to the shape; only elements where it is True are compared (the indices reported
    are still those of the whole array).

    Raises AssertionError naming the case, the number of differing elements out of those compared, the first
    differing index (one per axis) with both values in hex and decoded, and the next few differing indices.
    """
    case = _case(where)
    if got is None or want is None:          # an optional output: absent on both sides or on neither
        if got is None and want is None:
            return
        raise AssertionError(f"{case}: got {'None' if got is None else 'an array'}, "
                             f"want {'None' if want is None else 'an array'}")
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype:
        raise AssertionError(f"{case}: dtype differs: got {g.dtype}, want {w.dtype} (shapes {g.shape}, {w.shape})")
    if g.shape != w.shape:
        raise AssertionError(f"{case}: shape differs: got {g.shape}, want {w.shape} ({g.dtype})")
    gw, ww = _bit_words(g), _bit_words(w)
    differ = gw != ww
    if differ.ndim > g.ndim:                 # rows of bytes: an element differs if any of its bytes does
        differ = differ.any(axis=-1)
    if nan_equal:
        differ &= ~(_is_nan(g) & _is_nan(w))
    compared = g.size
    if mask is not None:
        keep = np.broadcast_to(np.asarray(mask, bool), g.shape)
        differ &= keep
        compared = int(np.count_nonzero(keep))
    if not differ.any():
        return
    at = np.argwhere(differ)
    nan_note = ", NaNs equal" if nan_equal else ""
    lines = [f"{case}: {len(at)} of {compared} elements differ ({g.dtype}, shape {g.shape}{nan_note})"]
    for n, index in enumerate(at[:MORE_SHOWN]):
        index = tuple(int(i) for i in index)
        lines.append(f"  {'first at' if n == 0 else 'also at '} {list(index)}: got {_show(g, gw, index)}, "
                     f"want {_show(w, ww, index)}")
    if len(at) > MORE_SHOWN:
        lines.append(f"  ... and {len(at) - MORE_SHOWN} more")
    raise AssertionError("\n".join(lines))
