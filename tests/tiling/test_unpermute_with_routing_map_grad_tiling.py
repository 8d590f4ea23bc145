"""MoeTokenUnpermuteWithRoutingMapGrad tiling: the real op's host UT figures, and every failure it has."""
from __future__ import annotations

import ml_dtypes
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad

BF16, F16, F32 = ml_dtypes.bfloat16, "float16", "float32"
# the UTs use socVersion Ascend910B with coreNum 40 and ub_size 196608
UT_SOC = get_soc("ascend910b", aiv_num=40)


def _inputs(n, h, e, m, dtype=BF16, probs_dtype=None, probs=True, rm="int8"):
    args = [T((n, h), dtype), T((m,), "int32"), T((m,), "int32"), T((n, e), rm), T((m, h), dtype)]
    args.append(T((n, e), probs_dtype or dtype) if probs else None)
    return args


UT_CASES = {
    # test name in tests/ut/op_host: (inputs, drop_and_pad, key, tiling data)
    "test_tiling_prob_not_none_bf16_tilingkey_1": (
        _inputs(30, 64, 64, 30), False, 1, "30 1 0 64 64 30 30 10 1 0 1 0 64 1 0 64 0 1 16 64 196352"),
    "test_tiling_prob_not_none_bf16_tilingkey_11": (
        _inputs(30, 64, 64, 30), True, 11, "30 0 0 64 64 30 30 10 0 0 1 0 64 1 8 64 1 1 0 0 196352"),
    "test_tiling_prob_none_bf16_tilingkey_0": (
        _inputs(30, 64, 64, 30, probs=False), False, 0, "30 1 0 0 64 30 30 10 0 0 1 0 64 1 0 64 1 1 0 0 196352"),
    "test_tilingkey_101": (
        _inputs(30, 8, 8, 30, probs_dtype=F32), False, 101, "30 1 0 8 8 30 30 10 1 0 1 0 16 1 0 8 0 1 16 32 196352"),
    "test_tilingkey_111": (
        _inputs(30, 8, 8, 30, probs_dtype=F32), True, 111, "30 0 3 8 8 30 30 10 0 0 1 0 16 1 8 8 1 1 0 0 196352"),
}


@pytest.mark.parametrize("case", UT_CASES)
def test_host_ut_figures(case):
    inputs, pad, key, data = UT_CASES[case]
    result = tiling_uwrm_grad(*inputs, drop_and_pad=pad, soc=UT_SOC)
    assert result.tiling_key == key
    assert list(result.fields.values()) == [int(v) for v in data.split()]
    assert result.workspace_size == 16 * 1024 * 1024
    assert result.block_dim == 40 and result.schedule_mode == 1


def test_host_ut_tiling_data_accessor():
    """moe_token_unpermute_with_routing_map_grad_tiling_data_accessor: the struct's 21 int64 fields, in the
    order the UT sets them to 1..21 (the order the kernel reads the raw tiling buffer in)."""
    from tiling.moe_token_unpermute_with_routing_map_grad import FIELDS
    struct = ("tokensNum topK capacity numExpert hiddenSize numOutTokens formerCoreNum tailCoreNum tokenNumEachCore "
              "tokenNumTailCore rowIdMapEachCore rowIdMapTailCore hiddenSizeAlign hiddenSizeLoopTimes "
              "hiddenSizeLoopTimesAlign hiddenSizeTail inputReserveNum indicesReserveNum indicesReserveNumAlign "
              "numExpertAlign totalUbSize").split()
    snake = ["".join("_" + ch.lower() if ch.isupper() else ch for ch in name) for name in struct]
    assert list(FIELDS) == snake and len(FIELDS) == 21


@pytest.mark.parametrize("pad,probs,key,data", [
    # the UT's key-1 / 11 / 0 inputs on the stock 950 profile: 64 vector cores, GetCoreMemSize(UB) 253696
    (False, True, 1, "30 1 0 64 64 30 30 34 1 0 1 0 64 1 0 64 0 1 16 64 253696"),
    (True, True, 11, "30 0 0 64 64 30 30 34 0 0 1 0 64 1 8 64 1 1 0 0 253696"),
    (False, False, 0, "30 1 0 0 64 30 30 34 0 0 1 0 64 1 0 64 1 1 0 0 253696"),
], ids=["key1", "key11", "key0"])
def test_ut_inputs_on_the_950_profile(pad, probs, key, data):
    """The same host tiling on ascend950 (no arch35 branch in the tiling .cpp): only the core split and
    totalUbSize move with the platform."""
    result = tiling_uwrm_grad(*_inputs(30, 64, 64, 30, probs=probs), drop_and_pad=pad, soc="ascend950")
    assert result.tiling_key == key and result.block_dim == 64
    assert list(result.fields.values()) == [int(v) for v in data.split()]
    assert result.workspace_size == 16 * 1024 * 1024


@pytest.mark.parametrize("case,inputs,pad,soc,key", [
    ("test_tiling_prob_none_small_ub_hidden_split", _inputs(30, 512, 64, 30, probs=False), False,
     get_soc("910b", aiv_num=40, ub_size=512), 0),
    ("test_tiling_prob_not_none_pad_true_small_ub_hidden_split", _inputs(30, 8192, 64, 30), True,
     get_soc("910b", aiv_num=40, ub_size=8192), 11),
    ("test_tiling_int64_unpermuted_dtype", _inputs(30, 64, 64, 30, dtype="int64", probs=False), False, UT_SOC, 0),
    ("test_tiling_double_unpermuted_dtype", _inputs(30, 64, 64, 30, dtype="float64", probs=False), False, UT_SOC, 0),
], ids=lambda v: v if isinstance(v, str) else "")
def test_host_ut_status_only_cases(case, inputs, pad, soc, key):
    result = tiling_uwrm_grad(*inputs, drop_and_pad=pad, soc=soc)
    assert result.tiling_key == key
    if "small_ub" in case:
        assert result.fields["hidden_size_loop_times"] > 1


@pytest.mark.parametrize("pad", [False, True], ids=["prob_none_invalid_unpermuted_dtype",
                                                    "prob_not_none_pad_true_invalid_unpermuted_dtype"])
def test_host_ut_int8_grads_fail(pad):
    with pytest.raises(TilingError, match="dtype size"):
        tiling_uwrm_grad(*_inputs(30, 64, 64, 30, dtype="int8", probs=pad), drop_and_pad=pad, soc=UT_SOC)


def test_split_hidden_figures():
    # bf16, tiling UB 7936: pad + probs pieces of AlignDown(5856 / 20, 16) = 288 elements
    r = tiling_uwrm_grad(*_inputs(30, 8192, 64, 30), drop_and_pad=True, soc=get_soc("910b", aiv_num=40,
                                                                                     ub_size=8192))
    f = r.fields
    assert (f["hidden_size_align"], f["hidden_size_loop_times"], f["hidden_size_loop_times_align"],
            f["hidden_size_tail"]) == (288, 29, 32, 8192 - 28 * 288)


FAILURES = {
    # seed error table (all 561002) and the tiling's shape checks
    "topK-over-512": (_inputs(1, 16, 600, 513), False, "at most 512"),
    "topK-over-experts": (_inputs(4, 16, 2, 12), False, "must not exceed experts_num"),
    "experts-beyond-UB": (_inputs(4, 16, 70000, 8), False, "maximum experts_num"),
    "capacity-over-tokens": (_inputs(4, 16, 2, 10), True, "capacity should be smaller"),
    "hidden-beyond-UB-in-pad-mode": (_inputs(4, 5_000_000, 2, 8), True, "maximum hidden_size"),
    "probs-without-routing-map": ([T((4, 16), BF16), T((8,), "int32"), T((8,), "int32"), None, T((8, 16), BF16),
                                   T((4, 2), BF16)], False, "routing_map is required"),
    "probs-without-permuted-tokens": ([T((4, 16), BF16), T((8,), "int32"), T((8,), "int32"), T((4, 2), "bool"),
                                       None, T((4, 2), BF16)], False, "permuted_tokens is required"),
    "probs-dtype-mix-not-allowed": (_inputs(4, 16, 2, 8, dtype=F16, probs_dtype=F32), False, "probs dtype"),
    "grads-not-2d": ([T((4, 16, 1), BF16), T((8,), "int32"), T((8,), "int32"), None, None, None], False,
                     "dims of unpermuted_tokens_grad"),
    "out-index-not-1d": ([T((4, 16), BF16), T((8, 1), "int32"), T((8,), "int32"), None, None, None], False,
                         "dims of out_index"),
    "index-lengths-differ": ([T((4, 16), BF16), T((8,), "int32"), T((9,), "int32"), None, None, None], False,
                             "same length"),
    "probs-not-2d": ([T((4, 16), BF16), T((8,), "int32"), T((8,), "int32"), T((4, 2), "bool"), T((8, 16), BF16),
                      T((8,), BF16)], False, "dims of probs"),
    "zero-tokens-with-probs": (_inputs(0, 16, 2, 8), False, "tokens_num"),
}


@pytest.mark.parametrize("case", FAILURES)
def test_tiling_failures(case):
    inputs, pad, fragment = FAILURES[case]
    with pytest.raises(TilingError, match=fragment) as info:
        tiling_uwrm_grad(*inputs, drop_and_pad=pad, soc="ascend910b")
    assert info.value.status == 561002


def test_limits_scale_with_the_chip():
    # the experts limit follows the UB: 70000 experts fit in the 950's UB only if (UB - ...) / 3 allows it
    e = (get_soc("ascend950").ub_size_for_tiling - 512 - 2048 - 24) // 3
    tiling_uwrm_grad(*_inputs(4, 16, e, 8), soc="ascend950")
    with pytest.raises(TilingError):
        tiling_uwrm_grad(*_inputs(4, 16, e + 1, 8), soc="ascend950")


@pytest.mark.parametrize("soc_name", ["ascend910b", "ascend910_93", "ascend950"])
@pytest.mark.parametrize("pad,probs,mix,key", [(False, False, False, 0), (True, False, False, 10),
                                               (False, True, False, 1), (True, True, False, 11),
                                               (False, True, True, 101), (True, True, True, 111)])
def test_key_selection_and_ub_plan_fits(soc_name, pad, probs, mix, key):
    soc = get_soc(soc_name)
    r = tiling_uwrm_grad(*_inputs(512, 7168, 64, 512 * 8 if not pad else 64 * 8, probs=probs,
                                  probs_dtype=F32 if mix else None), drop_and_pad=pad, soc=soc)
    assert r.tiling_key == key and r.block_dim == soc.aiv_num
    assert r.ub_fits and 0 < r.ub_plan_bytes <= soc.ub_size


def _plan_row(result, name):
    return next(row for row in result.ub_plan if row[0] == name)


def test_mixed_probs_wide_rows_overflow_the_ub_once_256_slots_are_reserved():
    """Key 101 (bf16 grads, fp32 probs): the tiling budgets outQueueProbGrad as 256 grad-sized elements
    (512 B), the kernel sizes it indicesReserveNumAlign probs elements (up to 1024 B). When the hidden piece
    is near its maximum only the 256 B kept back from the UB absorb the difference, so the plan overflows
    as soon as the reserved slots align to 256. A faithful copy of the real op's under-budget; bf16 probs
    (key 1) are budgeted exactly and fit."""
    one_core = get_soc("ascend910b", aiv_num=1)

    def tile(tokens, hidden, probs_dtype=F32, soc=one_core):
        return tiling_uwrm_grad(*_inputs(tokens, hidden, 8, tokens * 8, probs_dtype=probs_dtype), soc=soc)

    fits, over = tile(30, 8192), tile(31, 8192)   # topK 8: 240 slots per core, then 248 -> aligned 256
    assert fits.tiling_key == over.tiling_key == 101
    assert (fits.fields["hidden_size_align"], fits.fields["hidden_size_loop_times"]) == (8064, 2)
    assert fits.fields["indices_reserve_num_align"] == 240 and fits.ub_fits
    assert over.fields["indices_reserve_num_align"] == 256 and not over.ub_fits
    assert over.ub_plan_bytes - one_core.ub_size == 160
    # the cause is that one buffer: at the size the tiling budgeted, the same plan would fit
    assert _plan_row(over, "outQueueProbGrad")[1] == 256 * 4
    assert over.ub_plan_bytes - 256 * 4 + 256 * 2 <= one_core.ub_size
    bf16_probs = tile(31, 8192, probs_dtype=None)
    assert bf16_probs.tiling_key == 1 and bf16_probs.ub_fits
    assert _plan_row(bf16_probs, "outQueueProbGrad")[1] == 256 * 2
    # at 256 reserved slots the hidden boundary on the 910B: rows of 8048 fit, 8049 round up to 8064 and do not
    assert tile(32, 8048).ub_fits and not tile(32, 8049).ub_fits
    assert tile(32, 8049).fields["hidden_size_loop_times"] == 1   # no split needed to hit it
    assert not tile(32, 100_000).ub_fits                          # nor does splitting further help


@pytest.mark.parametrize("soc_name,tokens,hidden,fits", [
    ("ascend910b", 1440, 8192, True),    # 30 tokens per core
    ("ascend910b", 1441, 8192, False),   # one core gets 31 tokens = 248 slots
    ("ascend910_93", 1536, 8192, False),
    ("ascend950", 2048, 10432, True),    # the 950's larger UB moves the hidden boundary
    ("ascend950", 2048, 10433, False),
])
def test_mixed_probs_ub_overflow_boundary_on_stock_chips(soc_name, tokens, hidden, fits):
    r = tiling_uwrm_grad(*_inputs(tokens, hidden, 8, tokens * 8, probs_dtype=F32), soc=soc_name)
    assert r.tiling_key == 101 and r.fields["indices_reserve_num_align"] == (240 if tokens == 1440 else 256)
    assert r.ub_fits is fits
    assert ("DOES NOT FIT" in str(r)) is not fits
