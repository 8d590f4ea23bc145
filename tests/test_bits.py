"""tests/bits.py's assert_bits_equal: what it accepts, what it rejects, and what a failure says."""
from __future__ import annotations

import ast
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tests.bits import assert_bits_equal

# (dtype, one value, the same value's bit pattern plus one: the next representable value up)
DTYPES = {
    "fp64": np.float64, "fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16,
    "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2, "e8m0": ml_dtypes.float8_e8m0fnu,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn, "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "uint32": np.uint32,
}


def _one_ulp_apart(dtype, shape=(3, 4)):
    """An array of ones (an ordinary value in every format) and a copy whose element [1, 2] is one ulp larger."""
    want = np.ones(shape, dtype)
    got = want.copy()
    words = got.view(f"u{got.itemsize}")
    words[1, 2] += 1
    return got, want


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_equal_bits_pass(dtype):
    a = np.arange(12).reshape(3, 4).astype(np.float32).astype(dtype) if dtype != ml_dtypes.float8_e8m0fnu \
        else np.full((3, 4), 2.0, np.float32).astype(dtype)
    assert_bits_equal(a, a.copy(), "same array")


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_one_ulp_fails_and_names_the_element(dtype):
    got, want = _one_ulp_apart(dtype)
    with pytest.raises(AssertionError) as err:
        assert_bits_equal(got, want, "case A")
    text = str(err.value)
    assert "case A" in text and "1 of 12 elements differ" in text and "first at [1, 2]" in text
    width = 2 * np.dtype(dtype).itemsize
    want_word = int(want.view(f"u{want.itemsize}")[1, 2])
    assert f"got 0x{want_word + 1:0{width}x}" in text and f"want 0x{want_word:0{width}x}" in text


def test_message_shows_hex_floats_count_and_more_indices():
    want = np.zeros((4, 8), np.float32)
    got = want.copy()
    got[0, 3] = 1.5
    for j in range(8):
        got[2, j] = -2.0
    with pytest.raises(AssertionError) as err:
        assert_bits_equal(got, want, "shape (4, 8) fp32 mode 1 profile 910b")
    text = str(err.value)
    assert "shape (4, 8) fp32 mode 1 profile 910b" in text
    assert "9 of 32 elements differ (float32, shape (4, 8))" in text
    assert "first at [0, 3]: got 0x3fc00000 (1.5), want 0x00000000 (0.0)" in text
    assert "also at  [2, 0]: got 0xc0000000 (-2.0), want 0x00000000 (0.0)" in text
    assert "also at  [2, 4]" in text and "[2, 5]" not in text and "... and 3 more" in text


def test_message_names_the_running_test():
    with pytest.raises(AssertionError) as err:
        assert_bits_equal(np.ones(2, np.int32), np.zeros(2, np.int32))
    assert "test_bits.py::test_message_names_the_running_test" in str(err.value)
    assert "first at [0]: got 0x00000001 (1), want 0x00000000 (0)" in str(err.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2, np.float64], ids=["fp32", "fp16", "bf16", "e4m3", "e5m2",
                                                                            "fp64"])
def test_negative_zero_is_not_positive_zero(dtype):
    got = np.array([0.0, -0.0], np.float32).astype(dtype)
    want = np.zeros(2, dtype)
    assert np.array_equal(got, want)       # equal as values: exactly what a value compare would let through
    with pytest.raises(AssertionError, match=r"1 of 2 elements differ.*\n  first at \[1\]: got 0x80+ \(-0\.0\)"):
        assert_bits_equal(got, want, "signed zero")


def test_bf16_message_decodes_the_value():
    want = np.array([1.0, 3.0], ml_dtypes.bfloat16)
    got = want.copy()
    got.view(np.uint16)[1] += 1
    with pytest.raises(AssertionError, match=r"first at \[1\]: got 0x4041 \(3\.015625\), want 0x4040 \(3\.0\)"):
        assert_bits_equal(got, want)


def test_nan_payloads_differ_unless_nan_equal():
    want = np.array([np.nan, 1.0], np.float32)
    got = want.copy()
    got.view(np.uint32)[0] = 0xFFC00001       # another NaN: sign and payload differ
    with pytest.raises(AssertionError, match=r"first at \[0\]: got 0xffc00001 \(nan\), want 0x7fc00000 \(nan\)"):
        assert_bits_equal(got, want)
    assert_bits_equal(got, want, nan_equal=True)
    assert_bits_equal(want, want.copy())      # the same NaN bits are equal without nan_equal


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2],
                         ids=["fp32", "fp16", "bf16", "e5m2"])
def test_nan_equal_never_lets_a_number_match_a_nan(dtype):
    want = np.array([np.nan, 2.0], np.float32).astype(dtype)
    for got in (np.array([2.0, 2.0], np.float32).astype(dtype), np.array([np.nan, np.nan], np.float32).astype(dtype)):
        with pytest.raises(AssertionError, match="1 of 2 elements differ"):
            assert_bits_equal(got, want, nan_equal=True)


def test_nan_equal_still_sees_a_one_ulp_difference():
    want = np.array([np.nan, 1.0], np.float32)
    got = want.copy()
    got.view(np.uint32)[1] += 1
    with pytest.raises(AssertionError, match=r"NaNs equal.*\n  first at \[1\]"):
        assert_bits_equal(got, want, nan_equal=True)


def test_dtype_mismatch_is_its_own_message():
    a = np.zeros(4, np.float32)
    with pytest.raises(AssertionError, match=r"case: dtype differs: got int32, want float32"):
        assert_bits_equal(a.view(np.int32), a, "case")       # the same bits, but another dtype
    with pytest.raises(AssertionError, match=r"dtype differs: got bfloat16, want float16"):
        assert_bits_equal(np.zeros(4, ml_dtypes.bfloat16), np.zeros(4, np.float16))


def test_shape_mismatch_is_its_own_message():
    with pytest.raises(AssertionError, match=r"case: shape differs: got \(2, 3\), want \(3, 2\) \(float16\)"):
        assert_bits_equal(np.zeros((2, 3), np.float16), np.zeros((3, 2), np.float16), "case")
    with pytest.raises(AssertionError, match="shape differs"):
        assert_bits_equal(np.zeros(0, np.float32), np.zeros(1, np.float32))


def test_empty_arrays_are_equal():
    assert_bits_equal(np.zeros((0, 7), np.float32), np.zeros((0, 7), np.float32))


def test_bool_and_scalars():
    assert_bits_equal(np.array([True, False]), np.array([True, False]))
    with pytest.raises(AssertionError, match=r"first at \[1\]: got 0x01 \(True\), want 0x00 \(False\)"):
        assert_bits_equal(np.array([True, True]), np.array([True, False]))
    with pytest.raises(AssertionError, match=r"1 of 1 elements differ.*\n  first at \[\]: got 0x80000000 \(-0\.0\)"):
        assert_bits_equal(np.float32(-0.0), np.float32(0.0))


def test_non_contiguous_views_compare_their_own_elements():
    base = np.arange(24, dtype=np.float16).reshape(4, 6)
    other = base.copy()
    other[1, 1] = -1
    assert_bits_equal(base[:, ::2], other[:, ::2])                # column 1 is not in the view
    with pytest.raises(AssertionError, match=r"first at \[1, 0\]"):
        assert_bits_equal(base[:, 1::2], other[:, 1::2])


def test_mask_compares_only_the_chosen_elements_and_keeps_whole_array_indices():
    want = np.zeros((3, 4), np.float32)
    got = want.copy()
    got[0, 0] = 7.0
    got[2, 3] = 9.0
    rows = np.array([False, True, True])
    with pytest.raises(AssertionError, match=r"1 of 8 elements differ.*\n  first at \[2, 3\]: got 0x41100000 \(9\.0\)"):
        assert_bits_equal(got, want, mask=rows[:, None])
    assert_bits_equal(got, want, mask=np.array([False, True, True, False]))     # columns 1 and 2 only


def test_wider_items_compare_bytewise():
    want = np.array([1 + 2j, 3 - 4j], np.complex128)
    got = want.copy()
    got[1] = 3 + 4j
    with pytest.raises(AssertionError, match=r"(?s)1 of 2 elements .*got 0x0+8\w+ \(\(3\+4j\)\), want \w+ \(\(3-4j"):
        assert_bits_equal(got, want)


def test_none_equals_none_only():
    assert_bits_equal(None, None, "no probs")
    with pytest.raises(AssertionError, match="no probs: got None, want an array"):
        assert_bits_equal(None, np.zeros(2, np.float32), "no probs")
    with pytest.raises(AssertionError, match="got an array, want None"):
        assert_bits_equal(np.zeros(2, np.float32), None)


# --- no test compares bits by hand any more ---------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent
OWN = {TESTS / "bits.py", TESTS / "test_bits.py"}


def _is_bit_view(node) -> bool:
    """x.view(...) or x.view(...)[...]: an array reinterpreted to compare its bits."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "view"


def _hand_made_bit_compares(tree):
    """(line, what) of each equality test between two bit views: np.array_equal / np.testing.assert_array_equal
    of two views (unless negated: `not np.array_equal(...)` checks that a case tells two orders apart), and
    `view == view` / `view != view` fed to np.all / np.any / np.flatnonzero / np.nonzero / np.argwhere."""
    negated = {id(n.operand) for n in ast.walk(tree) if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name in ("array_equal", "assert_array_equal") and len(node.args) == 2 and \
                all(_is_bit_view(a) for a in node.args) and id(node) not in negated:
            yield node.lineno, name
        if name in ("all", "any", "flatnonzero", "nonzero", "argwhere") and node.args:
            c = node.args[0]
            if isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], (ast.Eq, ast.NotEq)) and \
                    _is_bit_view(c.left) and _is_bit_view(c.comparators[0]):
                yield node.lineno, f"{name}(view {'==' if isinstance(c.ops[0], ast.Eq) else '!='} view)"


def test_the_scan_finds_hand_made_compares():
    found = list(_hand_made_bit_compares(ast.parse(
        "assert np.array_equal(a.view(np.uint8), b.view(np.uint8))\n"
        "np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16)[0])\n"
        "bad = np.flatnonzero(a.view(np.uint8) != b.view(np.uint8))\n"
        "assert not np.array_equal(a.view(np.uint8), b.view(np.uint8))\n"          # a precondition: allowed
        "assert np.all(a.view(np.uint8) == 0x5A)\n")))                              # a fill pattern: allowed
    assert found == [(1, "array_equal"), (2, "assert_array_equal"), (3, "flatnonzero(view != view)")]


def test_every_test_file_uses_the_shared_bit_compare():
    found = [f"{path.relative_to(TESTS.parent)}:{line}: {what}"
             for path in sorted(TESTS.rglob("*.py")) if path not in OWN
             for line, what in _hand_made_bit_compares(ast.parse(path.read_text(), str(path)))]
    assert not found, "compare bits with tests.bits.assert_bits_equal:\n" + "\n".join(found)
