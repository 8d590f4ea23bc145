"""ops.common.half_cast gives the bits of NumPy / ml_dtypes astype for every pattern class the examples and
goldens can meet (all half patterns, random float32 / float64 bits, halfway cases, strided views)."""
import ml_dtypes
import numpy as np
import pytest

from ops.common.half_cast import cast, to_f32
from tests.bits import assert_bits_equal

BF16 = np.dtype(ml_dtypes.bfloat16)
HALF = [pytest.param(np.dtype(ml_dtypes.bfloat16), id="bf16"), pytest.param(np.dtype(np.float16), id="fp16")]


def _sources():
    rng = np.random.default_rng(7)
    f32_bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f64_bits = rng.integers(0, 2 ** 64, 200_000, dtype=np.uint64).view(np.float64)
    f64_bits = f64_bits[~np.isnan(f64_bits)]
    # float64 just at / around a bfloat16 or float16 halfway point: where a float32 detour would round twice
    halfway = ((rng.integers(0, 2 ** 16, 20_000, dtype=np.uint64) << np.uint64(48)) | np.uint64(1 << 47)).view(
        np.float64)
    halfway = halfway[np.isfinite(halfway)]
    halfway16 = 1.0 + (2 * rng.integers(0, 1024, 20_000) + 1) * 2.0 ** -11
    with np.errstate(invalid="ignore"):
        near = np.concatenate([halfway, np.nextafter(halfway, np.inf), np.nextafter(halfway, -np.inf),
                               halfway16, np.nextafter(halfway16, 0), np.nextafter(halfway16, 2)])
    scaled = np.concatenate([rng.standard_normal(50_000) * s for s in (1, 1e-6, 1e-40, 6e4, 3.4e38)])
    edge = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 65519.99, 65520.0, 3.3961e38, 1e39])
    return dict(f32_bits=f32_bits, f64_bits=f64_bits, f64_halfway=near, f64_scaled=scaled,
                f32_scaled=scaled.astype(np.float32), f64_edge=edge,
                f32_strided=f32_bits[:60_000].reshape(200, 300)[:, 1::2])


SOURCES = _sources()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", list(SOURCES))
@pytest.mark.parametrize("dtype", HALF)
def test_cast_matches_astype(name, dtype):
    x = SOURCES[name]
    got = cast(x, dtype)
    assert got.dtype == dtype and got.shape == x.shape
    want = _bf16_from_f64(x) if dtype == BF16 and x.dtype == np.float64 else x.astype(dtype)
    assert_bits_equal(got, want, name)


def _bf16_from_f64(x: np.ndarray) -> np.ndarray:
    """float64 -> bfloat16 rounded once, half to even, from the formula: ml_dtypes before 0.7 rounds float64 to float32
    first, which double-rounds some subnormal halfway cases. Finite non-zero values are rounded to the grid of their
    binade (8 significant bits; bf16's subnormal grid below 2^-126), an overflow past the largest bf16 plus half its
    step goes to infinity; the result is exact in float32 and bf16, so the last casts round nothing."""
    x = np.asarray(x, np.float64)
    out = x.copy()
    ok = np.isfinite(x) & (x != 0)
    ax = np.abs(x[ok])
    _, k = np.frexp(ax)                                # ax = m * 2**k, 0.5 <= m < 1
    step = np.ldexp(1.0, np.maximum(k - 1, -126) - 7)
    rounded = np.rint(ax / step) * step               # both exact: power-of-two scaling, a float64 below 2**9
    rounded[rounded > float(ml_dtypes.finfo(BF16).max)] = np.inf
    out[ok] = np.copysign(rounded, x[ok])
    return out.astype(np.float32).astype(BF16)


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("dtype", HALF)
def test_to_f32_matches_astype_for_every_pattern(dtype, strided):
    h = np.arange(2 ** 16, dtype=np.uint16).view(dtype).reshape(256, 256)
    if strided:
        h = h[:, ::3]
    assert_bits_equal(to_f32(h), h.astype(np.float32))


@pytest.mark.parametrize("src, dtype", [(np.float32, np.int32), (np.int64, np.float32), (np.float32, np.float64)],
                         ids=["f32-to-int32", "int64-to-f32", "f32-to-f64"])
def test_other_pairs_fall_back_to_astype(src, dtype):
    x = np.arange(-5, 5, dtype=src)
    np.testing.assert_array_equal(cast(x, dtype), x.astype(dtype))
    assert cast(x, dtype).dtype == np.dtype(dtype)
