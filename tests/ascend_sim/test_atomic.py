"""SetAtomicAdd<T> / SetAtomicMax<T> / SetAtomicNone: UB->GM copies that add to GM or keep the larger value; and
the scalar AtomicAdd / AtomicExch on one GM word.

The expected GM contents are computed here from the documented rule (GM + UB as T: float adds rounded
half to even, integers wrap), in float64 / NumPy integer arithmetic, never with the simulator's code.
Many cores on many host threads add into the same GM bytes: no update may be lost.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ElementTypeError, OutOfBoundsError
from ascend_sim._jit import global_aicore
from ascend_sim.atomic import ATOMIC_STRIPE_BYTES
from ascend_sim.dtypes import DT_INT16, dt_of, gm_view
from tests.bits import assert_bits_equal
from tiling import get_soc

from .harness import run, tbuf

UB_BYTES = 4096
MODE_PAD, MODE_DATA_COPY, MODE_PAD_STRIDED = 0, 1, 2


@asc.aicore
def _set_atomic(c, p):
    if p[5] == 1:
        asc.set_atomic_add(c, p[0])
    elif p[5] == 2:
        asc.set_atomic_max(c, p[0])


@global_aicore
def add_rows(c, src, dst, p):
    """Each core copies its p[1] rows of p[2] elements in and adds (p[5] = 1: SetAtomicAdd<p[0]>), keeps the
    larger (p[5] = 2: SetAtomicMax<p[0]>) or writes them (p[5] = 0) to dst at element p[6]. p[4]: MODE_PAD one row per
    DataCopyPad, MODE_DATA_COPY one row per DataCopy, MODE_PAD_STRIDED all rows in one DataCopyPad each way, p[7] gap
    bytes between GM rows."""
    T = asc.ub_like(c, src)
    buf = asc.tbuf_get(c, 0, T)
    rows, cols = p[1], p[2]
    row_bytes = cols * T.itemsize
    if p[4] == MODE_PAD_STRIDED:
        asc.data_copy_pad(c, buf, asc.gm_at(src, c.block_idx * rows * cols),
                          asc.DataCopyExtParams(rows, row_bytes, 0, 0), asc.NO_PAD)
        _set_atomic(c, p)
        asc.data_copy_pad(c, asc.gm_at(dst, p[6]), buf, asc.DataCopyExtParams(rows, row_bytes, 0, p[7]))
        asc.set_atomic_none(c)
        return
    params = asc.DataCopyExtParams(1, row_bytes, 0, 0)
    for r in range(rows):
        asc.data_copy_pad(c, buf, asc.gm_at(src, (c.block_idx * rows + r) * cols), params, asc.NO_PAD)
        _set_atomic(c, p)
        if p[4] == MODE_DATA_COPY:
            asc.data_copy(c, asc.gm_at(dst, p[6]), buf, cols)
        else:
            asc.data_copy_pad(c, asc.gm_at(dst, p[6]), buf, params)
        asc.set_atomic_none(c)


def _launch(src, dst, *, dt, rows, cols, mode=MODE_PAD, atomic=1, dst_off=0, gap_bytes=0, block_dim=1, threads=1,
            chip=None):
    p = np.array([dt, rows, cols, 0, mode, atomic, dst_off, gap_bytes], dtype=np.int64)
    return run([add_rows], [tbuf("buf", UB_BYTES)], asc.GlobalTensor(gm_view(src), 0, 0),
               asc.GlobalTensor(gm_view(dst), 1, 0), p, block_dim=block_dim, threads=threads,
               chip=chip or get_soc("ascend910b"), gm_names=("src", "dst"))


def _expected_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b rounded once to the element type (two float16/bfloat16/float32 values sum exactly in float64 up
    to a rounding that a final rounding to <= 24 bits cannot see); integers wrap."""
    if np.issubdtype(a.dtype, np.integer):
        return (a.astype(np.int64) + b.astype(np.int64)).astype(a.dtype)   # astype wraps
    return (a.astype(np.float64) + b.astype(np.float64)).astype(a.dtype)


# --- arithmetic per type, one core --------------------------------------------------------------------------
SPECIALS = {
    np.dtype(np.float32): [np.inf, -np.inf, np.nan, 3.4e38, -0.0, 1e-45],
    np.dtype(np.float16): [np.inf, np.nan, 65504.0, -65504.0, 6e-8, -0.0],
    np.dtype(ml_dtypes.bfloat16): [np.inf, np.nan, 3.38e38, -3.38e38, 1e-40, -0.0],
}
TYPE_CASES = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "int32-wraps": np.int32,
    "int16-wraps": np.int16,
}
SLOW_TYPES = {"int16-wraps"}   # one more cold compile; int16 atomics also run in the index-add op tests (slow)


@pytest.mark.parametrize("dtype", [pytest.param(v, id=k, marks=pytest.mark.slow if k in SLOW_TYPES else ())
                                   for k, v in TYPE_CASES.items()])
@pytest.mark.parametrize("chip", ["ascend910b", "ascend950"])
def test_atomic_add_adds_as_the_element_type(dtype, chip, rng):
    """GM + UB, element by element, rounded half to even (floats) or wrapped (ints); specials and overflow. The
    950 (arch35: IsSupportAtomicAddTypeSIMD lists float, half, bfloat16, int8, int16, int32) takes the same types."""
    dtype = np.dtype(dtype)
    cols = 200
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        src = rng.integers(info.min, info.max, cols, endpoint=True).astype(dtype)
        dst = rng.integers(info.min, info.max, cols, endpoint=True).astype(dtype)
        src[:2], dst[:2] = info.max, (1, info.min)
    else:
        src = (rng.standard_normal(cols) * 100).astype(dtype)
        dst = (rng.standard_normal(cols) * 100).astype(dtype)
        specials = np.array(SPECIALS[dtype], dtype=np.float64).astype(dtype)
        src[:len(specials)] = specials
        dst[:len(specials)] = specials[::-1]
        dst[len(specials):2 * len(specials)] = specials
    want = _expected_sum(dst, src)
    _launch(src, dst, dt=dt_of(dtype), rows=1, cols=cols, chip=get_soc(chip))
    # bit-exact, the sign of zero included; NaN payloads are not specified (a NaN must still meet a NaN)
    assert_bits_equal(dst, want, nan_equal=True)


@pytest.mark.parametrize("mode", [MODE_PAD, MODE_DATA_COPY, MODE_PAD_STRIDED], ids=["DataCopyPad", "DataCopy",
                                                                                    "DataCopyPad-3-rows-gap"])
def test_every_ub_to_gm_copy_adds_while_set(mode, rng):
    """DataCopy and DataCopyPad (also multi-block with a GM gap) add while SetAtomicAdd is on."""
    rows, cols, gap = 3, 16, 24
    src = rng.integers(-1000, 1000, rows * cols).astype(np.int32)
    dst = rng.integers(-1000, 1000, 4 * cols).astype(np.int32)
    want = dst.copy()
    if mode == MODE_PAD_STRIDED:
        for r in range(rows):
            at = r * (cols + gap // 4)
            want[at: at + cols] += src[r * cols: (r + 1) * cols]
    else:
        want[:cols] += src.reshape(rows, cols).sum(axis=0)
    _launch(src, dst, dt=asc.DT_INT32, rows=rows, cols=cols, mode=mode, gap_bytes=gap)
    assert np.array_equal(dst, want)


def test_set_atomic_none_overwrites_again():
    src = np.arange(8, dtype=np.float32)
    dst = np.full(8, 100.0, dtype=np.float32)
    _launch(src, dst, dt=asc.DT_FLOAT, rows=1, cols=8, atomic=0)
    assert np.array_equal(dst, src)


# --- concurrency: many cores, many threads, one GM row --------------------------------------------------------
CONTENTION = {
    # id: (block_dim, threads, rows per core, cols, dst element offset)
    "48-cores-8-threads-same-row": (48, 8, 20, 64, 0),
    "64-cores-16-threads-row-across-stripes": (64, 16, 8, 700, ATOMIC_STRIPE_BYTES // 4 - 5),
    "7-cores-3-threads-unaligned-offset": (7, 3, 30, 33, 3),
}


@pytest.mark.parametrize("case", CONTENTION.values(), ids=CONTENTION.keys())
def test_concurrent_adds_to_the_same_bytes_lose_nothing(case):
    """Every core adds all its rows into the same GM row on parallel threads: the sum is exact (ints)."""
    block_dim, threads, rows, cols, off = case
    chip = get_soc("ascend950", aiv_num=block_dim)
    rng = np.random.default_rng(block_dim)
    src = rng.integers(-50, 50, block_dim * rows * cols).astype(np.int32)
    dst = np.zeros(off + cols + 8, dtype=np.int32)
    report = _launch(src, dst, dt=asc.DT_INT32, rows=rows, cols=cols, dst_off=off, block_dim=block_dim,
                     threads=threads, chip=chip)
    want = np.zeros_like(dst)
    want[off: off + cols] = src.reshape(-1, cols).sum(axis=0)
    assert np.array_equal(dst, want)
    assert report.threads == threads


def test_concurrent_float_adds_of_exact_values_are_thread_count_independent():
    """fp32 adds of small integers are exact in any order, so every thread count gives the same bytes."""
    block_dim, rows, cols = 32, 10, 48
    src = np.random.default_rng(5).integers(-20, 20, block_dim * rows * cols).astype(np.float32)
    want = src.reshape(-1, cols).sum(axis=0, dtype=np.float64).astype(np.float32)
    for threads in (1, 4, 12):
        dst = np.zeros(cols, dtype=np.float32)
        _launch(src, dst, dt=asc.DT_FLOAT, rows=rows, cols=cols, block_dim=block_dim, threads=threads)
        assert np.array_equal(dst, want), threads


# --- misuse ---------------------------------------------------------------------------------------------------
def test_atomic_type_must_match_the_copy():
    """SetAtomicAdd<int16_t> before a float copy is refused (no byte is added)."""
    src = np.ones(8, dtype=np.float32)
    dst = np.zeros(8, dtype=np.float32)
    with pytest.raises(ElementTypeError) as err:
        _launch(src, dst, dt=DT_INT16, rows=1, cols=8)
    assert "DataCopyPad(UB->GM)" in str(err.value)
    assert not dst.any()


def test_atomic_copy_outside_gm_is_refused():
    src = np.ones(16, dtype=np.int32)
    dst = np.zeros(16, dtype=np.int32)
    with pytest.raises(OutOfBoundsError) as err:
        _launch(src, dst, dt=asc.DT_INT32, rows=1, cols=16, dst_off=8)
    assert err.value.tensor == "dst"
    assert not dst.any()


# --- SetAtomicMax<T> ---------------------------------------------------------------------------------------------
def _expected_max(gm: np.ndarray, ub: np.ndarray) -> np.ndarray:
    """The larger of GM and UB as T; a NaN on either side wins; equal values (+0 / -0) keep GM's bits."""
    if np.issubdtype(gm.dtype, np.integer):
        return np.maximum(gm, ub)
    g, u = gm.astype(np.float64), ub.astype(np.float64)
    return np.where(np.isnan(g), gm, np.where(np.isnan(u) | (u > g), ub, gm))


@pytest.mark.parametrize("dtype", [pytest.param(v, id=k) for k, v in TYPE_CASES.items() if k not in SLOW_TYPES])
def test_atomic_max_keeps_the_larger_value(dtype, rng):
    dtype = np.dtype(dtype)
    cols = 64
    if np.issubdtype(dtype, np.integer):
        src, dst = (rng.integers(-1000, 1000, cols).astype(dtype) for _ in range(2))
    else:
        src, dst = (rng.uniform(-4, 4, cols).astype(dtype) for _ in range(2))
        specials = SPECIALS[dtype]
        src[:len(specials)] = specials
        dst[len(specials): 2 * len(specials)] = specials
        src[20], dst[20] = -0.0, 0.0          # equal: GM keeps +0
        src[21], dst[21] = 0.0, -0.0          # equal: GM keeps -0
    want = _expected_max(dst, src)
    _launch(src, dst, dt=dt_of(dtype), rows=1, cols=cols, atomic=2, chip=get_soc("ascend950"))
    assert_bits_equal(dst, want)


def test_concurrent_atomic_max_to_one_row_is_the_column_max():
    block_dim, rows, cols = 40, 6, 100
    src = np.random.default_rng(9).standard_normal(block_dim * rows * cols).astype(np.float32)
    dst = np.full(cols, -np.inf, np.float32)
    _launch(src, dst, dt=asc.DT_FLOAT, rows=rows, cols=cols, atomic=2, block_dim=block_dim, threads=8,
            chip=get_soc("ascend950", aiv_num=block_dim))
    assert np.array_equal(dst, src.reshape(-1, cols).max(axis=0))


# --- scalar AtomicAdd / AtomicExch -------------------------------------------------------------------------------
@global_aicore
def count_and_swap(c, words, olds, p):
    """Each core: p[0] times AtomicAdd(words[0], 1); then AtomicExch(words[1], block_idx + 1), the old value to
    olds[block_idx]."""
    for _ in range(p[0]):
        asc.atomic_add(c, asc.gm_at(words, 0), np.uint32(1))
    old = asc.atomic_exch(c, asc.gm_at(words, 1), np.uint32(c.block_idx + 1))
    asc.set_value(c, olds, c.block_idx, np.int64(old))


@pytest.mark.parametrize("block_dim,threads", [(1, 1), (48, 8)], ids=["one-core", "48-cores-8-threads"])
def test_scalar_atomics_lose_nothing_and_return_the_old_value(block_dim, threads):
    words = np.zeros(4, np.uint32)
    olds = np.full(block_dim, -1, np.int64)
    run([count_and_swap], [], asc.GlobalTensor(words, 0, 0), asc.GlobalTensor(olds, 1, 0),
        np.array([300], dtype=np.int64), block_dim=block_dim, threads=threads,
        chip=get_soc("ascend950", aiv_num=block_dim), gm_names=("words", "olds"))
    assert words[0] == 300 * block_dim
    # the exchanges form one chain: every value but the last was taken by exactly one core
    assert sorted(olds.tolist() + [int(words[1])]) == list(range(block_dim + 1))


def test_scalar_atomic_outside_its_tensor_faults():
    words = np.zeros(1, np.uint32)
    olds = np.zeros(1, np.int64)
    with pytest.raises(OutOfBoundsError, match="words"):
        run([count_and_swap_far], [], asc.GlobalTensor(words, 0, 0), asc.GlobalTensor(olds, 1, 0),
            np.array([1], dtype=np.int64), chip=get_soc("ascend950"), gm_names=("words", "olds"))


@global_aicore
def count_and_swap_far(c, words, olds, p):
    asc.atomic_add(c, asc.gm_at(words, 3), np.uint32(1))
