"""MoeTokenPermuteGrad end to end: bit-exact against the independent goldens (kernel G on 910B / 910_93, the
MoeInitRoutingV2Grad summation on 950) over dtypes, dropped rows, hidden splits, token chunks, topK 1 and
512, num_topk -1; a case where the two chips' sums differ; the ATK golden through the forward permute;
every status of the checks; fuzzed bad indices never crash."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from ascend_sim import OutOfBoundsError, SimulatorError
from ops._framework import KernelStep
from ops.permute_grad import arch35_k_chunk, get_workspace_size, run
from ops.permute_grad import moe_token_permute_grad as permute_grad
from ops.permute_grad.examples import make_inputs
from ops.permute_grad.golden import atk_golden, golden, golden_950
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_token_permute_grad import moe_token_permute_grad as tile
from tiling.status import AclnnError

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)


# id: make_inputs arguments, chip (name, overrides), tiling figures the case must reach
CASES_910 = {
    "bf16-dropped-rows": (dict(tokens=13, hidden=40, topk=3, num_out_tokens=30), ("910b", {}), {}),
    "fp16-all-rows-odd-h": (dict(tokens=9, hidden=33, topk=2, dtype="fp16"), ("910b", {}), {}),
    "fp32-dropped-rows": (dict(tokens=11, hidden=24, topk=4, dtype="fp32", num_out_tokens=30), ("910b", {}), {}),
    "bf16-hidden-split": (dict(tokens=5, hidden=1300, topk=3, num_out_tokens=13),
                          ("910b", dict(aiv_num=2, ub_size=15376)),
                          dict(hidden_splited_length=512, hidden_splited_num=2, hidden_splited_remain=276)),
    "fp16-token-chunks": (dict(tokens=41, hidden=40, topk=80, dtype="fp16", num_out_tokens=3000),
                          ("910b", dict(aiv_num=2, ub_size=13776)), dict(tokens_splited_length=15, tokens_splited_num=1,
                                                                         tokens_splited_remain=5)),
    "fp32-topk1-uneven-cores": (dict(tokens=50, hidden=48, topk=1, dtype="fp32", num_out_tokens=46),
                                ("910b", dict(aiv_num=16)), dict(tokens_core_remain=2)),
    "bf16-topk512": (dict(tokens=3, hidden=16, topk=512, num_out_tokens=1400), ("910b", dict(aiv_num=2)), {}),
    "fp16-910_93": (dict(tokens=7, hidden=16, topk=2, dtype="fp16"), ("910_93", {}), {}),
}


@pytest.mark.parametrize("case", CASES_910)
def test_910_matches_golden_bit_for_bit(case):
    spec, (chip, over), expect = CASES_910[case]
    a = make_inputs(**spec, seed=len(case))
    soc = get_soc(chip, **over)
    g, s, k = a["permuted_output_grad"], a["sorted_indices"], a["num_topk"]
    fields = tile(g, s, k, soc=soc).fields
    for name, value in expect.items():
        assert fields[name] == value, f"{case}: the tiling no longer reaches {name} = {value}: {fields}"
    assert_bits_equal(permute_grad(g, s, k, soc=soc), golden(g, s, k))


def test_num_topk_minus_one_is_topk_1_on_910b():
    a = make_inputs(tokens=20, hidden=24, topk=1, num_out_tokens=17)
    g, s = a["permuted_output_grad"], a["sorted_indices"]
    assert_bits_equal(permute_grad(g, s, -1), golden(g, s, 1))


# id: make_inputs arguments, chip overrides of ascend950, the k chunk MoeInitRoutingV2Grad's tiling chooses
CASES_950 = {
    "bf16-full-load": (dict(tokens=13, hidden=40, topk=6, num_out_tokens=70), {}, 6),
    "fp16-regbase-chunks": (dict(tokens=3, hidden=256, topk=16, dtype="fp16", num_out_tokens=44),
                            dict(aiv_num=2, ub_size=16384 + 256), 14),
    "bf16-hidden-split": (dict(tokens=5, hidden=1300, topk=3, num_out_tokens=13), dict(aiv_num=2, ub_size=15376), 3),
    "fp32-full-load": (dict(tokens=11, hidden=24, topk=9, dtype="fp32", num_out_tokens=90), {}, 9),
}
SLOW_950 = ("fp32-full-load",)      # the fp32 950 kernel compiles only in the slow sweep


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_950 else c for c in CASES_950])
def test_950_matches_moe_init_routing_v2_grad_golden(case):
    spec, over, chunk = CASES_950[case]
    a = make_inputs(**spec, seed=len(case))
    soc = get_soc("ascend950", **over)
    g, s, k = a["permuted_output_grad"], a["sorted_indices"], a["num_topk"]
    assert arch35_k_chunk(g.shape[1], k, s.size // k, g.dtype, soc) == chunk
    s = s.copy()
    s[::7] = -1                  # negative slots count as zero rows on 950
    assert_bits_equal(permute_grad(g, s, k, soc=soc), golden_950(g, s, k, chunk))


def _cancellation_case(dtype):
    """Two tokens of topK 4 whose rows are 2^25, 1, -2^25, 1: sequential fp32 gives 1, pairwise gives 0."""
    big = np.float32(2 ** 25)
    rows = np.array([[big], [1], [-big], [1], [-0.0], [-0.0], [-0.0], [-0.0]], dtype=np.float32)
    return rows.astype(dtype), np.arange(8, dtype=np.int32)


@pytest.mark.parametrize("dtype", [BF16, pytest.param(F32, marks=pytest.mark.slow)], ids=["bf16", "fp32"])
def test_the_chips_sum_in_different_orders(dtype):
    g, s = _cancellation_case(dtype)
    on_910, on_950 = permute_grad(g, s, 4), permute_grad(g, s, 4, soc="950")
    assert_bits_equal(on_910, golden(g, s, 4), "910b")
    assert_bits_equal(on_950, golden_950(g, s, 4), "950")
    assert (on_910[0, 0], on_950[0, 0]) == (1, 0)
    assert np.signbit(on_910[1, 0]) and not np.signbit(on_950[1, 0])     # -0.0 rows: kept vs. summed from +0.0


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_atk_golden_through_the_forward_permute(soc):
    """The op's ATK reference: backward of the forward permute with a ones upstream gradient."""
    rng = np.random.default_rng(3)
    tokens, hidden, topk, keep = 12, 24, 3, 29
    x = rng.uniform(-5, 5, (tokens, hidden)).astype(BF16)
    indices = np.argsort(rng.random((tokens, 6)), axis=1)[:, :topk].astype(np.int32)
    permuted, sorted_indices, _ = ops.moe_token_permute(x, indices, keep)
    ones = np.ones(permuted.shape, dtype=BF16)
    grad = permute_grad(ones, sorted_indices, topk, soc=soc)
    assert_bits_equal(grad, atk_golden(sorted_indices, topk, keep, hidden, BF16))
    assert grad.sum(dtype=np.float32) == keep * hidden


def test_two_phase_api_and_950_steps():
    a = make_inputs(tokens=6, hidden=16, topk=2)
    g, s = a["permuted_output_grad"], a["sorted_indices"]
    out = np.zeros((6, 16), dtype=g.dtype)
    size, ex = get_workspace_size(g, s, 2, False, out)
    assert size == 16 * 1024 * 1024 and ex.tiling.tiling_key == 0 and ex.tiling.block_dim == 6
    run(np.empty(size, np.uint8), size, ex)
    assert_bits_equal(out, golden(g, s, 2))
    out950 = np.zeros_like(out)
    size, ex = get_workspace_size(g, s, 2, False, out950, soc="950")
    assert [st.name for st in ex.steps] == ["l0op::MoeInitRoutingV2Grad", "l0op::ViewCopy"]
    assert isinstance(ex.steps[0], KernelStep)
    run(np.empty(size, np.uint8), size, ex)
    assert_bits_equal(out950, golden_950(g, s, 2))


def _args(**change):
    a = make_inputs(tokens=6, hidden=16, topk=2, num_out_tokens=10)
    args = dict(g=a["permuted_output_grad"], s=a["sorted_indices"], k=2, pad=False,
                out=np.zeros((6, 16), dtype=a["permuted_output_grad"].dtype))
    args.update(change)
    return args


# id: (soc, argument changes, status)
STATUS_CASES = {
    "910b-null-grad": ("910b", dict(g=None), 161001),
    "910b-null-indices": ("910b", dict(s=None), 161001),
    "910b-null-out": ("910b", dict(out=None), 161001),
    "910b-null-topk": ("910b", dict(k=None), 161001),
    "910b-int64-indices": ("910b", dict(s=np.arange(12, dtype=np.int64)), 161002),
    "910b-int8-grad": ("910b", dict(g=np.zeros((10, 16), np.int8), out=np.zeros((6, 16), np.int8)), 161002),
    "910b-out-dtype": ("910b", dict(out=np.zeros((6, 16), np.float32)), 161002),
    "910b-grad-1d": ("910b", dict(g=np.zeros(10, BF16)), 561002),
    "910b-indices-2d": ("910b", dict(s=np.arange(12, dtype=np.int32).reshape(6, 2)), 561002),
    "910b-topk-minus2": ("910b", dict(k=-2), 561002),
    "910b-topk-zero": ("910b", dict(k=0, out=np.zeros((0, 16), BF16)), 561002),
    "910b-out-infershape-rows": ("910b", dict(out=np.zeros((5, 16), BF16)), 561002),
    "910b-out-hidden": ("910b", dict(out=np.zeros((6, 8), BF16)), 561002),
    "910b-ub-too-small": ("910b-tiny", dict(), 561002),
    "950-padded-mode": ("950", dict(pad=True), 161002),
    "950-null-out": ("950", dict(out=None), 161001),
    "950-int64-indices": ("950", dict(s=np.arange(12, dtype=np.int64)), 161002),
    "950-out-dtype": ("950", dict(out=np.zeros((6, 16), np.float16)), 161002),
    "950-grad-rank0": ("950", dict(g=np.zeros((), BF16)), 161002),
    "950-topk-minus1": ("950", dict(k=-1, out=np.zeros((12, 16), BF16)), 561103),
    "950-topk-zero": ("950", dict(k=0, out=np.zeros((6, 16), BF16)), 561103),
    "950-topk-zero-empty-out": ("950", dict(k=0, out=np.zeros((0, 16), BF16)), 0),   # the l0 launches nothing
    "950-topk-not-dividing": ("950", dict(k=5, out=np.zeros((2, 16), BF16)), 561103),
    "950-out-rows": ("950", dict(out=np.zeros((5, 16), BF16)), 561103),
    "950-grad-3d": ("950", dict(g=np.zeros((10, 16, 1), BF16)), 561103),
    "910b-padded-mode-ignored": ("910b", dict(pad=True), 0),
}


@pytest.mark.parametrize("case", STATUS_CASES)
def test_status_codes(case):
    chip, change, status = STATUS_CASES[case]
    soc = get_soc("910b", ub_size=4096) if chip == "910b-tiny" else chip
    a = _args(**change)
    if status == 0:
        get_workspace_size(a["g"], a["s"], a["k"], a["pad"], a["out"], soc=soc)
        return
    with pytest.raises(AclnnError) as e:
        get_workspace_size(a["g"], a["s"], a["k"], a["pad"], a["out"], soc=soc)
    assert e.value.status == status, str(e.value)
    if case == "910b-out-infershape-rows":
        assert "InferShape" in str(e.value)


# num_topk -> (910B / 910_93, 950): the rows of the friendly call's input_grad, or the status. 12 slots (6 tokens,
# topK 2), 10 gradient rows. 910B: T-G reads -1 as 1 and takes tokens = len // K (the slots past tokens * K are
# not read; K above len gives no token); K = 0 or below -1 leaves no token count (561002). 950: the l0
# MoeInitRoutingV2Grad's tiling refuses K <= 0 and a len that K does not divide (561103); an out of 0 rows
# launches nothing.
NUM_TOPK_RULES = {
    "zero": (0, 561002, 561103),
    "minus-one": (-1, 12, 561103),
    "minus-two": (-2, 561002, 561103),
    "not-dividing": (5, 2, 561103),
    "dividing": (3, 4, 4),
    "above-len": (13, 0, 0),
}


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("rule", NUM_TOPK_RULES)
def test_friendly_call_applies_each_chips_num_topk_rule(rule, soc):
    k, on_910, on_950 = NUM_TOPK_RULES[rule]
    want = on_950 if soc == "ascend950" else on_910
    a = make_inputs(tokens=6, hidden=16, topk=2, num_out_tokens=10, seed=7)
    g, s = a["permuted_output_grad"], a["sorted_indices"]
    if want > 100:
        with pytest.raises(AclnnError) as e:
            permute_grad(g, s, k, soc=soc)
        assert e.value.status == want and "num_topk" in e.value.message, str(e.value)
        return
    out = permute_grad(g, s, k, soc=soc)
    assert out.shape == (want, 16)
    expected = golden_950(g, s, k) if soc == "ascend950" else golden(g, s, k)
    assert_bits_equal(out, expected.reshape(want, 16))


def test_empty_out_on_950_launches_nothing():
    g = np.zeros((0, 16), BF16)
    size, ex = get_workspace_size(g, np.zeros(0, np.int32), 2, False, np.zeros((0, 16), BF16), soc="950")
    assert size == 0 and ex.steps == []


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_bad_indices_never_crash(seed):
    rng = np.random.default_rng(seed)
    a = make_inputs(tokens=8, hidden=24, topk=2, num_out_tokens=12, seed=seed)
    g, s = a["permuted_output_grad"], a["sorted_indices"].copy()
    bad = rng.choice(s.size, 3, replace=False)
    s[bad] = rng.choice([-1, -7, np.iinfo(np.int32).min, 12, 10 ** 6, np.iinfo(np.int32).max], 3)
    if (s < 0).any():
        with pytest.raises(OutOfBoundsError) as e:
            permute_grad(g, s, 2)
        assert isinstance(e.value, SimulatorError) and "sorted_indices" in str(e.value)
    else:
        assert_bits_equal(permute_grad(g, s, 2), golden(g, s, 2))
    assert_bits_equal(permute_grad(g, s, 2, soc="950"), golden_950(g, s, 2))


def _ut_grad(dtype):
    return (np.arange(30) % 7).reshape(6, 5).astype(dtype)


_UT_SI = (np.arange(6) % 2).astype(np.int32)
# the GetWorkspaceSize cases of tests/ut/op_host/op_api/test_aclnn_moe_token_permute_grad.cpp @ 25fb6b92890d
# (Ascend950): (gradient, sorted indices, out, paddedMode, status)
OP_API_UT_950 = {
    "fp16": (_ut_grad(np.float16), _UT_SI, np.float16, False, 0),
    "fp32": (_ut_grad(np.float32), _UT_SI, np.float32, False, 0),
    "bf16": (_ut_grad(ml_dtypes.bfloat16), _UT_SI, ml_dtypes.bfloat16, False, 0),
    "permuted_output_grad_nullptr": (None, _UT_SI, np.float16, False, 161001),
    "sorted_indices_nullptr": (_ut_grad(np.float16), None, np.float16, False, 161001),
    "out_nullptr": (_ut_grad(np.float16), _UT_SI, None, False, 161001),
    "padded_mode_invalid": (_ut_grad(np.float16), _UT_SI, np.float16, True, 161002),
    "permuted_output_grad_dtype_invalid": (_ut_grad(np.int8), _UT_SI, np.int8, False, 161002),
    "sorted_indices_dtype_invalid": (_ut_grad(np.float16), _UT_SI.astype(np.int64), np.float16, False, 161002),
    "out_dtype_invalid": (_ut_grad(np.float16), _UT_SI, np.int8, False, 161002),
    "dtype_diff": (_ut_grad(np.float16), _UT_SI, np.float32, False, 161002),
}


@pytest.mark.parametrize("case", list(OP_API_UT_950), ids=list(OP_API_UT_950))
def test_950_op_api_ut_status(case):
    grad, si, out_dtype, padded, status = OP_API_UT_950[case]
    out = None if out_dtype is None else np.zeros((2, 5), out_dtype)
    if status == 0:
        get_workspace_size(grad, si, 3, padded, out, soc="ascend950")
        return
    with pytest.raises(ops.AclnnError) as info:
        get_workspace_size(grad, si, 3, padded, out, soc="ascend950")
    assert info.value.status == status
