"""l0op::MoeMaskedScatter on Ascend 950 (ops.l0.moe_masked_scatter): bit for bit against the formula

    y = x; the k-th True of mask, in row-major order, takes updates[k]

over masks all False / all True / random / a lone True in the last element, every dtype of the OpDef (one kernel
per width: 1, 2, 4, 8 bytes), one core, many cores with a tail core, and a custom 40 KiB 4-core profile whose
kernel UB (7936 bytes) cuts each core into several prefix pieces and low-bit scatter pieces. Checked mode is clean;
too few updates end in an OutOfBoundsError naming updates, never a write outside y.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops.l0 import moe_masked_scatter as l0
from tests.bits import assert_bits_equal
from tiling import get_soc

STOCK = get_soc("ascend950")
SMALL = get_soc("ascend950", ub_size=40960, aiv_num=4)
DTYPES = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16, "fp16": np.float16,
          "bf16": ml_dtypes.bfloat16, "int32": np.int32, "fp32": np.float32, "int64": np.int64, "fp64": np.float64}


def _golden(x, mask, updates):
    """The formula, element by element in row-major order."""
    y = x.reshape(-1).copy()
    flat_mask, flat_updates = mask.reshape(-1), updates.reshape(-1)
    k = 0
    for i in range(flat_mask.size):
        if flat_mask[i]:
            y[i] = flat_updates[k]
            k += 1
    return y.reshape(x.shape)


def _values(rng, shape, dtype):
    bits = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    if np.dtype(dtype) == np.bool_:
        bits &= 1       # canonical bools (the kernel copies bytes, any value would do)
    return bits.view(dtype).reshape(shape)


def _mask(rng, shape, kind):
    if kind == "all-false":
        return np.zeros(shape, bool)
    if kind == "all-true":
        return np.ones(shape, bool)
    if kind == "last-only":
        m = np.zeros(shape, bool)
        m.reshape(-1)[-1] = True
        return m
    return rng.random(shape) < 0.4


def _run(x, mask, updates, soc, check=None):
    y = np.empty_like(x)
    size, executor = l0.get_workspace_size(x, mask, updates, y_out=y, soc=soc)
    l0.run(np.zeros(size, np.uint8), size, executor, check=check)
    return y, executor


def _check(shape, dtype, kind, soc, *, extra=3, seed=0, check=None):
    rng = np.random.default_rng(seed)
    x = _values(rng, shape, dtype)
    mask = _mask(rng, shape, kind)
    updates = _values(rng, (int(mask.sum()) + extra,), dtype)
    y, executor = _run(x, mask, updates, soc, check)
    want = _golden(x, mask, updates)
    assert_bits_equal(y, want, f"key {executor.tiling.tiling_key}")
    return executor


# id: shape, profile, cores launched (1024 elements a core at least)
SHAPES = {
    "3x5-one-core": ((3, 5), STOCK, 1),
    "7x1000-tail-core-stock": ((7, 1000), STOCK, 7),
    "3x3337-small-ub-4-cores": ((3, 3337), SMALL, 4),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_random_mask_every_dtype(shape, dtype):
    dims, soc, cores = SHAPES[shape]
    executor = _check(dims, DTYPES[dtype], "random", soc)
    assert executor.tiling.block_dim == cores
    assert executor.tiling.tiling_key == 10 * np.dtype(DTYPES[dtype]).itemsize


@pytest.mark.parametrize("kind", ["all-false", "all-true", "last-only"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_mask_extremes(shape, dtype, kind):
    dims, soc, _ = SHAPES[shape]
    _check(dims, DTYPES[dtype], kind, soc, extra=0)


def test_small_ub_cuts_cores_into_pieces():
    """2500 elements a core in 768-byte prefix pieces (4 per core) and 960-element fp16 scatter pieces (3)."""
    executor = _check((10000,), np.float16, "random", SMALL, seed=4)
    f = executor.tiling.fields
    assert (f["block_factor"], f["tail_ub_factor"], f["buffer_size"]) == (4, 196, 960)


def test_64_cores_stock_workspace_counts():
    """64 cores of 4096: core b's totals reach across every core before it (CustomReduceSum over up to 63)."""
    executor = _check((64, 4096), np.float32, "random", STOCK, seed=6)
    assert executor.tiling.block_dim == 64


@pytest.mark.parametrize("dtype", ["int8", "bf16", "fp32", "int64"])
def test_checked_mode_is_clean(dtype):
    _check((3, 3337), DTYPES[dtype], "random", SMALL, seed=2, check="race")


def test_too_few_updates_is_an_out_of_bounds_read_of_updates():
    rng = np.random.default_rng(1)
    x = _values(rng, (40, 50), np.float32)
    mask = _mask(rng, (40, 50), "random")
    updates = _values(rng, (int(mask.sum()) - 1,), np.float32)
    with pytest.raises(OutOfBoundsError, match="updates"):
        _run(x, mask, updates, STOCK)


def test_empty_x_launches_nothing():
    x = np.zeros((0, 4), np.float32)
    y, executor = _run(x, np.zeros((0, 4), bool), np.zeros(0, np.float32), STOCK)
    assert executor.tiling.block_dim == 0 and executor.report is None


def test_friendly_call():
    x = np.arange(6, dtype=np.int16).reshape(2, 3)
    mask = np.array([[True, False, True], [False, False, True]])
    y = l0.moe_masked_scatter(x, mask, np.array([10, 20, 30, 40], np.int16))
    assert y.tolist() == [[10, 1, 20], [3, 4, 30]]
