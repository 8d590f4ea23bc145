"""Robustness of the host tilings: every call returns a TilingResult or raises an AclnnError.

Both public tilings are fuzzed over custom chip profiles (UB sizes from 288 bytes up to the stock
sizes, 1 to 1000 vector cores), degenerate and huge shapes (zero dims, 1, odd sizes, 2**31 and 2**40
tokens / hidden), topK 0 / 1 / 512 / 513, 1 to 1024 experts and the experts limit of each UB, every
dtype, int32 / int64 indices, quant modes -1 / 2 / 3 / 9, dropAndPad both ways, probs present or absent.

A raw Python error (ZeroDivisionError, ValueError, IndexError, ...) is a bug, and so is a result that is
not self-consistent: an UB plan row with negative bytes or a zero buffer count, a negative sort loop,
hidden piece or split-D piece, pieces that do not add up to the row. A piece of 0 elements is allowed:
it is the real op's figure where the UB is short of one block and the real tiling goes on. A plan that
simply does not fit the UB is allowed too (`ub_fits` is False; the launch reports UBOverflowError).

Profiles come from tiling.get_soc, so the smallest UB is the platform's minimum (288 bytes: tiling sees
one 32-byte block).
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiling
from tiling import AclnnError, TilingError, TilingResult
from tiling import TensorDesc as T
from tiling.platform import MIN_UB_BYTES

BF16 = np.dtype(ml_dtypes.bfloat16)
INT64_MAX = 2 ** 63 - 1
UB_SIZES = (288, 300, 512, 1024, 2048, 4096, 8192, 16384, 32768, 196608, 253952)
CORE_COUNTS = (1, 2, 3, 7, 48, 64, 1000)
CHIPS = ("ascend910b", "ascend950")
PROFILES = [(chip, ub, cores) for chip in CHIPS for ub in UB_SIZES for cores in CORE_COUNTS]
STATUSES = (161001, 161002, 561002)

PERMUTE_TOKEN_DTYPES = ("bfloat16", "float16", "float32", "int8")          # the OpDef columns
OTHER_DTYPES = ("float64", "int64", "int32", "uint8", "bool", "float8_e5m2")  # tiled anyway: must not crash
QUANT_MODES = (-1, 2, 3, 9)
NUM_OUT_TOKENS = (0, -1, 1, 5, -(2 ** 63), INT64_MAX)
UWRM_DTYPES = (("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float16", "float16"),
               ("float32", "float32"), ("float16", "float32"), ("int8", "int8"), ("float64", "float64"),
               ("int64", "int64"))


def _profile(chip: str, ub: int, cores: int):
    return tiling.get_soc(chip, ub_size=max(ub, MIN_UB_BYTES), aiv_num=cores)


# --- the checks every call goes through -----------------------------------------------------------------
def _pieces_add_up(what: str, length: int, piece: int, times: int, last: int) -> None:
    assert piece >= 0, f"{what}: negative piece {piece}"
    if piece > 0 and length > 0:
        assert times >= 1 and (times - 1) * piece + last == length and 0 < last <= piece, \
            f"{what}: {times} pieces of {piece}, last {last}, do not make {length}"


def _is_int64(v) -> bool:
    return isinstance(v, (int, np.integer)) and -2 ** 63 <= v <= INT64_MAX


def _check_result(result, op: str, render: bool = False) -> None:
    assert isinstance(result, TilingResult)
    bad_rows = [row[:3] for row in result.ub_plan if not (_is_int64(row[1]) and row[1] >= 0
                                                          and _is_int64(row[2]) and row[2] >= 1)]
    assert not bad_rows, f"{op}: UB plan rows (name, bytes, count) {bad_rows}"
    bad_fields = {k: v for k, v in result.fields.items() if not _is_int64(v)}
    assert not bad_fields, f"{op}: fields that are not int64 values {bad_fields}"
    assert result.block_dim >= 1 and result.workspace_size >= 0
    assert isinstance(result.ub_fits, bool)
    if render:
        str(result)
    f = result.fields
    if op == "permute" and result.soc.is_regbase:
        # the MoeInitRoutingV3 launch of the 950 chain: a sort template (one / multi core, unquantised or MX) or
        # the empty-tensor key, with VBS loops that hold keys whenever there are keys
        assert result.tiling_key in (3000000, 10000000, 11000000, 10030000, 11030000, 10100000, 11100000)
        if result.tiling_key != 3000000:
            assert f["vbs_need_core_num"] >= 1 and f["vbs_one_loop_max_elements"] > 0
    elif op == "permute":
        total = f["n"] * f["top_k"]
        assert result.tiling_key in range(1, 9)
        multi_core = result.tiling_key % 2 == 0
        if multi_core:
            assert total > 0 and f["vbs_one_loop_max_elements"] > 0, "multi-core sort with empty loops"
            assert f["vbs_need_core_num"] >= 1 and f["vbs_per_core_loops"] >= 1
        if result.tiling_key in (3, 4, 7, 8):   # split-D
            _pieces_add_up("split-D row", f["cols"], f["index_copy_one_token_once_move"],
                           f["index_copy_one_token_move_times"], f["index_copy_one_token_last_move"])
        assert f["index_copy_token_ub"] >= 0 and f["index_copy_indices_ub"] >= 0
    else:
        assert result.tiling_key in (0, 1, 10, 11, 101, 111)
        _pieces_add_up("hidden row", f["hidden_size"], f["hidden_size_align"], f["hidden_size_loop_times"],
                       f["hidden_size_tail"])


def _call(op: str, fn, *args, render: bool = False, **kwargs) -> str:
    """'ok' or 'error'; anything else than a TilingResult or an AclnnError fails the test."""
    try:
        result = fn(*args, **kwargs)
    except AclnnError as e:
        assert e.status in STATUSES, f"{op}: unexpected status {e.status}: {e}"
        return "error"
    except Exception as e:   # noqa: BLE001 - this is what the test looks for
        pytest.fail(f"{op} raised {type(e).__name__}: {e}\n  args {args}\n  kwargs {kwargs}")
    _check_result(result, op, render)
    return "ok"


def _permute(soc, n, h, k, dtype, idx_dtype="int32", quant=-1, num_out=0, padded=False, render=False) -> str:
    def build():
        indices = T((n,), idx_dtype) if k is None else T((n, k), idx_dtype)
        return tiling.moe_token_permute(T((n, h), dtype), indices, num_out, padded, quant, soc=soc)
    return _call("permute", build, render=render)


def _uwrm(soc, n, h, e, m, dtype, probs_dtype, pad, probs, rm_dtype="int8", restore=None, render=False) -> str:
    def build():
        args = [T((n, h), dtype), T((m,), "int32"), T((m,), "int32")]
        args += [T((n, e), rm_dtype), T((m, h), dtype), T((n, e), probs_dtype)] if probs else [None] * 3
        return tiling.moe_token_unpermute_with_routing_map_grad(*args, drop_and_pad=pad, restore_shape=restore,
                                                                soc=soc)
    return _call("uwrm_grad", build, render=render)


# --- grid fuzz: every profile, every (tokens, hidden, topK), the other arguments cycled -----------------
PERMUTE_N = (0, 1, 33, 4097, 2 ** 31, 2 ** 40)
PERMUTE_H = (0, 1, 7, 7168, 100001, 2 ** 40)
PERMUTE_K = (None, 0, 1, 512, 513)


@pytest.mark.parametrize("chip,ub,cores", PROFILES, ids=[f"{c}-ub{u}-aiv{a}" for c, u, a in PROFILES])
def test_permute_grid(chip, ub, cores):
    soc = _profile(chip, ub, cores)
    dtypes = PERMUTE_TOKEN_DTYPES + OTHER_DTYPES
    outcomes = set()
    for i, (n, h, k) in enumerate(itertools.product(PERMUTE_N, PERMUTE_H, PERMUTE_K)):
        outcomes.add(_permute(soc, n, h, k, dtypes[i % len(dtypes)], ("int32", "int64")[i // 3 % 2],
                              QUANT_MODES[i // 2 % 4], NUM_OUT_TOKENS[i % 6], padded=i % 37 == 0,
                              render=i % 16 == 0))
    assert "error" in outcomes                       # topK 513 and 2**40 tokens always fail
    # on 950 the tiling is MoeInitRoutingV3's, which first keeps 64 KiB for the SIMT data cache
    if ub >= (2048 if chip != "ascend950" else 196608):
        assert "ok" in outcomes


UWRM_N = (0, 1, 33, 2 ** 31)
UWRM_H = (0, 17, 7168, 2 ** 40)
UWRM_K = (0, 1, 8, 512, 513)
UWRM_E = (1, 2, 8, 31, 64, 1024)


@pytest.mark.parametrize("chip,ub,cores", PROFILES, ids=[f"{c}-ub{u}-aiv{a}" for c, u, a in PROFILES])
def test_uwrm_grad_grid(chip, ub, cores):
    soc = _profile(chip, ub, cores)
    outcomes = set()
    for i, (n, h, k, pad, probs) in enumerate(itertools.product(UWRM_N, UWRM_H, UWRM_K, (False, True),
                                                                (False, True))):
        e = UWRM_E[i % len(UWRM_E)]
        m = e * k if pad else n * k          # pad: capacity k per expert; otherwise k slots per token
        dtype, probs_dtype = UWRM_DTYPES[i // 4 % len(UWRM_DTYPES)]
        outcomes.add(_uwrm(soc, n, h, e, m, dtype, probs_dtype, pad, probs, ("int8", "bool")[i % 2],
                           None if i % 3 else (n, h), render=i % 16 == 0))
    assert "ok" in outcomes


# --- the limits that depend on the UB, probed around the value where the tiling starts to refuse --------
def _largest_accepted(accepts, low: int, high: int) -> int:
    """Largest x in [low, high] with accepts(x), for accepts true up to some point (low - 1 if none)."""
    if not accepts(low):
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if accepts(mid) else (low, mid - 1)
    return low


@pytest.mark.parametrize("chip,ub", [(c, u) for c in CHIPS for u in (2048, 4096, 8192, 32768)]
                         + [("ascend910b", 196608), ("ascend950", 253952)])
@pytest.mark.parametrize("dtype,probs_dtype", [("bfloat16", "bfloat16"), ("bfloat16", "float32"),
                                               ("float32", "float32"), ("float64", "float64")])
def test_uwrm_grad_around_the_experts_limit(chip, ub, dtype, probs_dtype):
    """numExpertMax counts E bytes per routing-map row, the buffers take AlignUp(E, 32): just below the
    limit the room left for the hidden piece goes slightly negative (hiddenSizeTmpMax of -1 to -3
    elements, less than one 32-byte block), which the truncating AlignDown turns into a piece of 0
    elements, the real op's figure; it must never become a negative piece."""
    soc = _profile(chip, ub, 7)

    def tile(e, h=16, k=1):
        return tiling.moe_token_unpermute_with_routing_map_grad(
            T((4, h), dtype), T((4 * k,), "int32"), T((4 * k,), "int32"), T((4, e), "bool"), T((4 * k, h), dtype),
            T((4, e), probs_dtype), soc=soc)

    def passes_experts_check(e):
        try:
            tile(e)
        except TilingError as err:
            return "maximum experts_num" not in str(err)
        return True

    limit = _largest_accepted(passes_experts_check, 1, 1 << 24)
    for e in range(max(limit - 40, 1), limit + 3):
        for h in (0, 16):
            for k in (0, 1):
                _call("uwrm_grad", tile, e, h, k)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("cores", (1, 1000))
def test_permute_every_ub_size_up_to_4_kib(chip, cores):
    """Every 32-byte UB step (and odd sizes between) where sort loop, index batch and split-D piece
    change from nothing to something."""
    for ub in list(range(288, 4096, 32)) + list(range(289, 4096, 97)):
        soc = _profile(chip, ub, cores)
        for n, h, k in ((1, 1, 1), (6, 64, 2), (33, 1, 1), (2, 3000, 3), (1, 7168, 512), (40, 0, 8)):
            for quant in ((-1, 9) if chip == "ascend950" else (-1,)):
                _permute(soc, n, h, k, "bfloat16", quant=quant)


@pytest.mark.parametrize("chip", CHIPS)
def test_uwrm_grad_every_ub_size_up_to_4_kib(chip):
    for ub in list(range(288, 4096, 32)) + list(range(289, 4096, 97)):
        soc = _profile(chip, ub, 3)
        for pad, probs in ((False, False), (True, False), (False, True), (True, True)):
            for h in (0, 1, 300):
                _uwrm(soc, 6, h, 2, 12, "bfloat16", "float32" if probs else "bfloat16", pad, probs)


# --- random fuzz ----------------------------------------------------------------------------------------
_dims = st.one_of(st.sampled_from((0, 1, 2, 3, 31, 32, 33, 511, 512, 513, 4095, 4096, 2 ** 31, 2 ** 40)),
                  st.integers(0, 70000))
_profiles = st.tuples(st.sampled_from(CHIPS), st.one_of(st.sampled_from(UB_SIZES), st.integers(288, 300000)),
                      st.one_of(st.sampled_from(CORE_COUNTS), st.integers(1, 1000)))
_fuzz = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(profile=_profiles, n=_dims, h=_dims, k=st.one_of(st.none(), st.sampled_from((0, 1, 2, 8, 512, 513)),
                                                       st.integers(0, 600)),
       dtype=st.sampled_from(PERMUTE_TOKEN_DTYPES + OTHER_DTYPES), idx_dtype=st.sampled_from(("int32", "int64")),
       quant=st.sampled_from(QUANT_MODES), num_out=st.one_of(st.sampled_from(NUM_OUT_TOKENS),
                                                             st.integers(-100000, 100000)),
       extra_dims=st.lists(st.sampled_from((1, 2, 3, 2 ** 31, 2 ** 40)), max_size=2))
def test_permute_random(profile, n, h, k, dtype, idx_dtype, quant, num_out, extra_dims):
    soc = _profile(*profile)

    def build():
        indices = T((n,), idx_dtype) if k is None else T((n, k), idx_dtype)
        return tiling.moe_token_permute(T((n, h, *extra_dims), dtype), indices, num_out, False, quant, soc=soc)
    _call("permute", build, render=True)


@_fuzz
@given(profile=_profiles, n=_dims, h=_dims, e=st.one_of(st.integers(0, 1100), st.integers(0, 200000)),
       k=st.one_of(st.sampled_from((0, 1, 8, 512, 513)), st.integers(0, 600)),
       dtypes=st.sampled_from(UWRM_DTYPES), pad=st.booleans(), probs=st.booleans(),
       rm_dtype=st.sampled_from(("int8", "bool")), m_offset=st.sampled_from((0, 0, 0, 1, -1)))
def test_uwrm_grad_random(profile, n, h, e, k, dtypes, pad, probs, rm_dtype, m_offset):
    soc = _profile(*profile)
    m = max((e if pad else n) * k + m_offset, 0)
    _uwrm(soc, n, h, e, m, *dtypes, pad, probs, rm_dtype, render=True)


# --- the failures this fuzzing found, pinned ------------------------------------------------------------
def test_permute_sort_without_room_for_one_loop_is_a_tiling_error():
    """UB 1056 - 256 = 800 bytes: AlignDown((800 - 32) / 32, 32) = 0 keys per sort loop, so even one key
    takes the multi-core path, which used to reach log(0) (ValueError: math domain error); the real
    tiling would go on with 0 cores and 0 sort loops."""
    soc = _profile("ascend910b", 1056, 1)
    for n in (1, 33):
        with pytest.raises(TilingError, match=r"UB of 800 bytes has no room for one sort loop") as info:
            tiling.moe_token_permute(T((n, 4), BF16), T((n,), "int32"), soc=soc)
        assert info.value.status == 561002
    # many cores eat the UB the same way: 32000 - 1000 * 32 = 0 bytes left for the keys
    with pytest.raises(TilingError, match=r"after the per-core blocks \(1000 x 32 = 32000 bytes\)"):
        tiling.moe_token_permute(T((64, 4), BF16), T((64,), "int32"), soc=_profile("ascend910b", 32256, 1000))


@pytest.mark.parametrize("tokens,indices", [((5, 64), (5, 0)), ((0, 64), (0,)), ((0, 0), (0,))])
def test_permute_split_d_below_the_indices_buffer_is_a_tiling_error(tokens, indices):
    """UB 1280 - 256 = 1024 bytes: ubLeft = 1024 - 2048 < 0 sends even an empty row to split-D, where the
    real tiling computes a piece of AlignDown(-512, 512) / 2 = -256 elements and a copyInQueue of -512
    bytes (the plan used to carry it). Only zero keys get this far: with any key the sort fails first."""
    soc = _profile("ascend910b", 1280, 1)
    with pytest.raises(TilingError, match=r"UB of 1024 bytes leaves no room for one hidden piece after the fixed "
                                          r"buffers \(2048 bytes of indices\)") as info:
        tiling.moe_token_permute(T(tokens, BF16), T(indices, "int32"), soc=soc)
    assert info.value.status == 561002
    # 1024 + 1 block more: ubLeft = -992, AlignDown(-496, 512) = 0 -> a piece of 0, the real figure
    r = tiling.moe_token_permute(T(tokens, BF16), T(indices, "int32"), soc=_profile("ascend910b", 1312, 1))
    assert r.fields["index_copy_one_token_once_move"] == 0 and r.tiling_key in (3, 7)


def test_permute_zero_pieces_keep_the_real_figures():
    """Where the real tiling goes on with a 0 it stays: split-D pieces of 0 elements when ubLeft is below
    two 512-byte blocks, and batches of 0 tokens when two rows fit but their topK indices do not."""
    split = tiling.moe_token_permute(T((1, 64), BF16), T((1,), "int32"), soc=_profile("ascend910b", 2304, 1))
    f = split.fields      # ubLeft = 2048 - 2048 = 0 < 2 * 128 -> split-D, AlignDown(0, 512) / 2 = 0
    assert split.tiling_key == 3
    assert (f["index_copy_one_token_once_move"], f["index_copy_one_token_move_times"],
            f["index_copy_one_token_last_move"], f["index_copy_token_ub"]) == (0, 0, 64, 0)
    # stock 910B, bf16 rows of 48576 (97152 bytes): 2 rows fill ubLeft exactly, 2 * 97152 + 512 * 8 > UB
    batch = tiling.moe_token_permute(T((1, 48576), BF16), T((1, 512), "int32"), soc="ascend910b")
    assert batch.tiling_key == 1
    assert (batch.fields["index_copy_once_ub_token_nums"], batch.fields["index_copy_once_indices_token_nums"],
            batch.fields["index_copy_token_ub"]) == (0, 0, 0)


@pytest.mark.parametrize("tokens,fragment", [
    (T((), BF16), "at least 1 dim"),                                # used to be IndexError on dim(0)
    (T((1, 2 ** 40, 2 ** 40), BF16), "more than int64 can count"),  # cols used to wrap to 0 in int64
    (T((0, 2 ** 31, 2 ** 31), BF16), "bytes per dim-0 row"),        # row bytes used to be 2**63
    (None, "tokens has no shape"),                                  # used to be AttributeError
])
def test_permute_shapes_the_tiling_cannot_read(tokens, fragment):
    rows = tokens.shape[0] if tokens is not None and tokens.shape else 1
    with pytest.raises(TilingError, match=fragment):
        tiling.moe_token_permute(tokens, T((rows,), "int32"), soc="ascend910b")


def test_uwrm_grad_piece_at_the_experts_limit_is_zero_not_negative():
    """Stock 910B, bf16: numExpertMax = (196352 - 512 - 2048 - 24) / 3 = 64589 experts pass the check, but
    AlignUp(64589, 32) * 3 = 193824 > 193792 bytes remain: hiddenSizeTmpMax = -32 / 24 = -1, and the
    truncating AlignDown(-1, 16) = 0 gives a piece of 0 elements (never negative: the AlignUp excess is at
    most 31 experts, less than one 32-byte block of hidden elements)."""
    def tile(e, h=16):
        return tiling.moe_token_unpermute_with_routing_map_grad(
            T((4, h), BF16), T((4,), "int32"), T((4,), "int32"), T((4, e), "bool"), T((4, h), BF16),
            T((4, e), BF16), soc="ascend910b")
    for e, piece in ((64589, 0), (64576, 0), (64576 - 32 * 3, 0), (64576 - 32 * 4, 16)):
        # 64576: 64 / 24 = 2; -96: 352 / 24 = 14 < 16; -128: 448 / 24 = 18 -> 16
        assert tile(e).fields["hidden_size_align"] == piece, e
        assert tile(e, h=0).fields["hidden_size_align"] == 0
    with pytest.raises(TilingError, match="maximum experts_num"):
        tile(64590)


def test_uwrm_grad_tiny_ub_keeps_the_zero_piece():
    """The smallest UB, 288 bytes (tiling sees 32): after the fixed buffers no hidden element fits, pieces of 0
    elements, as the real op computes them."""
    r = tiling.moe_token_unpermute_with_routing_map_grad(T((4, 64), BF16), T((8,), "int32"), T((8,), "int32"),
                                                         soc=_profile("ascend910b", 288, 1))
    assert (r.fields["hidden_size_align"], r.fields["hidden_size_loop_times"], r.fields["hidden_size_tail"]) == \
        (0, 0, 64)
