"""MoeTokenUnpermuteGrad: bit-exact against the NumPy golden on every key, dtype pair and profile, the split
boundaries of its tiling, ReduceSumFunc's `>=` tiers (values and instruction counts), every status, and bad
indices. Two kernel compilations serve all of it (tokens and probs move as bytes)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError, SimulatorError
from ops._framework import KernelStep
from ops.common.reduce_sum_golden import reduce_sum_rows
from ops.unpermute_grad import allocate_outputs, get_workspace_size, moe_token_unpermute_grad, run
from ops.unpermute_grad.examples import make_inputs
from ops.unpermute_grad.golden import golden, reduce_sum_rows_arch35
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_token_unpermute_grad import moe_token_unpermute_grad as tiling_ug
from tiling.status import ParamInvalidError

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = ("bf16", "fp16", "fp32")
PROFILES = ("ascend910b", "ascend910_93", "ascend950")


def _check(args, soc="ascend910b"):
    """Run the friendly call and compare with the golden bit for bit; returns the tiling fields."""
    soc = get_soc(soc)
    p, g, s, pr = args["permuted_tokens"], args["unpermuted_tokens_grad"], args["sorted_indices"], args["probs"]
    out, probs_grad = moe_token_unpermute_grad(p, g, s, pr, soc=soc)
    fields = {} if soc.is_regbase else tiling_ug(p, g, s, pr, soc=soc).fields      # 950: the l0's own tiling
    want, want_pg = golden(p, g, s, pr, hidden_piece=fields.get("hidden_size_align"), arch35=soc.is_regbase)
    assert out.dtype == g.dtype
    assert_bits_equal(out, want)
    if pr is None:
        assert probs_grad is None
    else:
        assert probs_grad.dtype == pr.dtype
        assert_bits_equal(probs_grad, want_pg)
    return fields


# --- dtypes, keys, profiles -----------------------------------------------------------------------------------
@pytest.mark.parametrize("probs_dtype", DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_key1_every_dtype_pair(dtype, probs_dtype):
    _check(make_inputs(7, 100, topk=3, dtype=dtype, probs_dtype=probs_dtype, seed=11))


@pytest.mark.parametrize("dtype", DTYPES)
def test_key0_every_dtype(dtype):
    fields = _check(make_inputs(7, 100, dtype=dtype, with_probs=False, seed=12))
    assert fields["top_k"] == 1


@pytest.mark.parametrize("with_probs", [False, True], ids=["key0", "key1"])
@pytest.mark.parametrize("soc", PROFILES)
def test_every_profile(soc, with_probs):
    _check(make_inputs(9, 72, topk=2, dtype="bf16", probs_dtype="fp32", with_probs=with_probs, seed=13), soc)


# --- tiling boundaries ---------------------------------------------------------------------------------------
def _small_ub(ub):
    return get_soc("ascend910b", ub_size=ub)


@pytest.mark.parametrize("case,dtype,hidden,with_probs,ub", [
    ("key1_bf16_two_pieces_tail", "bf16", 1000, True, 12288),
    ("key1_fp32_three_pieces_tail", "fp32", 1100, True, 12288),
    ("key0_bf16_pieces_tail", "bf16", 1000, False, 6000),
])
def test_hidden_pieces_with_tail(case, dtype, hidden, with_probs, ub):
    fields = _check(make_inputs(5, hidden, topk=2, dtype=dtype, with_probs=with_probs, seed=14), _small_ub(ub))
    assert fields["hidden_size_loop_times"] > 1 and fields["hidden_size_tail"] != fields["hidden_size_align"]


@pytest.mark.parametrize("case,tokens,cores", [("tokens_below_cores", 3, 8), ("former_and_tail_cores", 21, 8),
                                               ("tokens_multiple_of_cores", 16, 8)])
@pytest.mark.parametrize("with_probs", [False, True], ids=["key0", "key1"])
def test_core_split(case, tokens, cores, with_probs):
    fields = _check(make_inputs(tokens, 40, topk=3, with_probs=with_probs, seed=15), get_soc("910b", aiv_num=cores))
    assert fields["former_core_num"] == tokens % cores and fields["tail_core_num"] == cores - tokens % cores


def test_batches_of_tokens_and_of_rows():
    """Several index batches per core (key 1: 256 // topK tokens per batch; key 0: a UB of few rows)."""
    _check(make_inputs(200, 16, topk=3, seed=16), get_soc("910b", aiv_num=2))
    fields = _check(make_inputs(100, 16, with_probs=False, seed=16), get_soc("910b", aiv_num=2, ub_size=1024))
    assert fields["indices_reserve_num"] < fields["row_id_map_each_core"]


def test_input_reserve_below_topk():
    """UB for only some of a token's topK permuted rows: inputReserveNum is a smaller divisor of topK."""
    soc = _small_ub(33792)
    args = make_inputs(4, 1024, topk=4, seed=17)
    fields = _check(args, soc)
    assert 1 < fields["input_reserve_num"] < 4 and fields["hidden_size_loop_times"] == 1


@pytest.mark.parametrize("topk", [300, 512])
def test_large_topk(topk):
    fields = _check(make_inputs(2, 16, topk=topk, dtype="fp16", seed=18), get_soc("910b", aiv_num=2))
    assert fields["indices_reserve_num"] == topk


# --- ReduceSumFunc: `>=` tiers -------------------------------------------------------------------------------
LENGTHS = (63, 64, 65, 511, 512, 513, 4095, 4096, 4097)


def _fold_sensitive_row(length):
    """1.0 and 0.5 with +2**24 first and -2**24 last: its fp32 sum depends on the order of the additions."""
    x = np.ones(length, np.float32)
    x[1::3] = 0.5
    x[0], x[-1] = 2.0 ** 24, -(2.0 ** 24)
    return x


def _one_row_case(row, dtype=np.float32):
    """One token, topK 1: probs_grad = sum(row * 1.0)."""
    length = row.size
    return dict(permuted_tokens=row[None].astype(dtype), unpermuted_tokens_grad=np.ones((1, length), dtype),
                sorted_indices=np.zeros(1, np.int32), probs=np.ones((1, 1), np.float32), padded_mode=False)


@pytest.mark.parametrize("length", LENGTHS)
def test_probs_grad_follows_inclusive_tiers(length):
    row = _fold_sensitive_row(length)
    args = _one_row_case(row)
    fields = _check(args)
    assert fields["hidden_size_loop_times"] == 1
    got = moe_token_unpermute_grad(*list(args.values())[:4])[1][0, 0]
    sequential = np.float32(0)
    for v in row:
        sequential = np.float32(sequential + v)
    assert got != sequential       # a sequential fp32 sum would fail every length
    if length in (512, 4096):      # the strict (`>`) copy of ReduceSumFunc gives another value here
        assert got != reduce_sum_rows(row[None], strict=True)[0]


REDUCE_INSTR_GE = {63: 1, 64: 3, 65: 3, 511: 5, 512: 4, 513: 4, 4095: 6, 4096: 5, 4097: 5}
"""Vector instructions of one `>=` ReduceSumFunc call: 64 / 512 / 4096 take the fold tier (an empty final Add,
then the BlockReduceSums and the WholeReduceSum); the strict copy keeps them in the tier below."""


def test_reduce_sum_instruction_count_per_tier():
    """bf16: every other vector instruction of key 1 is one count-form call whatever the length, so the count
    moves only with ReduceSumFunc, once per slot."""
    tokens, topk = 2, 2
    counts = {}
    for length in LENGTHS:
        args = make_inputs(tokens, length, topk=topk, seed=19)
        out, pg = allocate_outputs(*list(args.values())[:4])
        size, ex = get_workspace_size(*list(args.values())[:5], None, out, pg)
        assert ex.tiling.fields["hidden_size_loop_times"] == 1
        run(np.empty(size, np.uint8), size, ex)
        counts[length] = ex.report.total.vec_instr
    slots = tokens * topk
    assert {n: counts[n] - counts[63] for n in LENGTHS} == \
        {n: slots * (REDUCE_INSTR_GE[n] - REDUCE_INSTR_GE[63]) for n in LENGTHS}


def test_950_sums_in_the_arch35_order():
    """A row whose sum tells the membase and the arch35 orders apart: each profile returns its own."""
    args = _one_row_case(_fold_sensitive_row(511))
    membase = moe_token_unpermute_grad(*list(args.values())[:4])[1][0, 0]
    arch35 = moe_token_unpermute_grad(*list(args.values())[:4], soc="ascend950")[1][0, 0]
    assert membase == reduce_sum_rows(args["permuted_tokens"], strict=False)[0]
    assert arch35 == reduce_sum_rows_arch35(args["permuted_tokens"])[0] != membase


@pytest.mark.parametrize("hidden", [40, 130, 4100, 8200])
def test_950_reduce_shapes(hidden):
    """Rows of one register, a tail shorter than the head, and more than 64 chunk sums (halving fold)."""
    _check(make_inputs(3, hidden, topk=2, dtype="bf16", probs_dtype="fp32", seed=hidden), "ascend950")


@pytest.mark.parametrize("topk", [512, 513, 1024])
def test_950_top_k_above_512_runs(topk):
    """No topK limit on 950 (the l0 has none; this op's own 910B tiling stops at 512)."""
    _check(make_inputs(2, 24, topk=topk, dtype="bf16", probs_dtype="fp16", seed=topk), "ascend950")


@pytest.mark.parametrize("dtype,hidden", [("fp32", 313), ("bf16", 1200)], ids=["fp32-h313", "bf16-h1200"])
def test_950_cut_h_hidden_runs_the_split_h_kernel(dtype, hidden):
    """A hidden size the l0 tiling cuts (an 8000-byte UB: mainFactor 144 fp32 / 288 16-bit) runs key 20012, whose
    probs gradients go block by block; against the split-H golden of the l0's tests (written from the formulas)."""
    from tests.ops.l0.test_moe_finalize_routing_v2_grad_split_h import golden as split_h_golden
    from tiling.moe_finalize_routing_v2_grad import moe_finalize_routing_v2_grad as tiling_l0
    small = get_soc("ascend950", ub_size=8000, aiv_num=3)
    a = make_inputs(3, hidden, topk=2, dtype=dtype, probs_dtype="fp32", seed=hidden)
    p, g, s, pr = a["permuted_tokens"], a["unpermuted_tokens_grad"], a["sorted_indices"], a["probs"]
    out, probs_grad = allocate_outputs(p, g, s, pr)
    size, executor = get_workspace_size(p, g, s, pr, False, None, out, probs_grad, soc=small)
    run(np.zeros(size, np.uint8), size, executor)
    assert [st.run.tiling_key for st in executor.report.steps if st.kind == "kernel"] == [20012]
    f = tiling_l0(g, s, p, pr, None, None, 0, s.size, 0, 0, grad_expanded_x_out=out, grad_scales_out=probs_grad,
                  soc=small).fields
    want_x, want_s = split_h_golden(g, s, p, pr, np.zeros_like(out), f, s.size)
    assert_bits_equal(out, want_x)
    assert_bits_equal(probs_grad, want_s)


@pytest.mark.parametrize("probs_dtype", DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_950_every_dtype_pair(dtype, probs_dtype):
    _check(make_inputs(5, 70, topk=2, dtype=dtype, probs_dtype=probs_dtype, seed=17), "ascend950")


@pytest.mark.parametrize("length,negative", [(100, False), (64, True), (40, False), (128, False)],
                         ids=["h100-tail-add", "h64-one-register", "h40-short-mask", "h128-two-lane-last-sum"])
def test_950_negative_zero_sums(length, negative):
    """Products that are all -0.0: every lane an arch35 ReduceSum leaves inactive, and every head lane of a chunk
    that takes the tail's Add, adds +0, so the sum is +0.0; a row of exactly one full register (64) stays -0.0."""
    row = np.full(length, -0.0, dtype=np.float32)
    args = _one_row_case(row)
    got = moe_token_unpermute_grad(*list(args.values())[:4], soc="ascend950")[1][0, 0]
    assert got == 0 and np.signbit(got) == negative == np.signbit(reduce_sum_rows_arch35(row[None])[0])


# --- probs == 0, unwritten rows, bad indices ---------------------------------------------------------------
def test_prob_zero_rows_are_written_not_skipped():
    args = make_inputs(6, 48, topk=2, dtype="bf16", seed=20)
    args["probs"][::2] = 0
    args["unpermuted_tokens_grad"][0, :5] = -1      # -1 * 0 is -0 in the written row
    out = np.full((12, 48), np.nan, BF16)
    pg = np.zeros((6, 2), BF16)
    size, ex = aclnn_get(args, out, pg)
    run(np.empty(size, np.uint8), size, ex)
    want, _ = golden(*list(args.values())[:4])
    assert not np.isnan(out.astype(np.float32)).any()
    assert_bits_equal(out, want)


def aclnn_get(args, out, pg, soc="ascend910b"):
    return get_workspace_size(*list(args.values())[:5], None, out, pg, soc=soc)


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_rows_no_index_names_are_left_alone(soc):
    """Indices past len(S) are skipped: on 910B the rows they would have filled keep the caller's values; on 950
    the l0 writes a fresh tensor that ViewCopy copies whole into the output, so they hold what that tensor held
    (undefined on the chip, 0 in the simulator)."""
    args = make_inputs(4, 24, topk=2, dtype="fp32", seed=21)
    args["sorted_indices"][[1, 6]] = [8, 1000]
    out = np.full((8, 24), 7.0, np.float32)
    pg = np.zeros((4, 2), np.float32)
    size, ex = aclnn_get(args, out, pg, soc)
    run(np.empty(size, np.uint8), size, ex)
    want, want_pg = golden(*list(args.values())[:4], arch35=soc == "ascend950")
    named = np.zeros(8, bool)
    named[args["sorted_indices"][args["sorted_indices"] < 8]] = True
    assert np.array_equal(out[named], want[named]) and (out[~named] == (7.0 if soc == "ascend910b" else 0.0)).all()
    assert np.array_equal(pg, want_pg) and pg[0, 1] == 0 and pg[3, 0] == 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_fuzzed_bad_indices(soc, seed):
    """Random out-of-range indices: skipped (>= len(S), and negative on 950) or reported (negative on 910B):
    never a crash, never a write outside the outputs."""
    rng = np.random.default_rng(seed)
    with_probs = seed % 2 == 0
    args = make_inputs(5, 20, topk=2, dtype="fp16", with_probs=with_probs, seed=seed)
    s = args["sorted_indices"]
    bad = rng.choice(s.size, 3, replace=False)
    s[bad] = rng.choice([-1, -7, s.size, s.size + 5, 2 ** 31 - 1, -(2 ** 31)], 3)
    if soc == "ascend910b" and (s < 0).any():
        with pytest.raises(OutOfBoundsError) as e:
            moe_token_unpermute_grad(*list(args.values())[:4], soc=soc)
        assert "sorted_indices" in str(e.value)
        return
    out, pg = moe_token_unpermute_grad(*list(args.values())[:4], soc=soc)
    want, want_pg = golden(*list(args.values())[:4], arch35=soc == "ascend950")
    assert_bits_equal(out, want)
    if pg is not None:
        assert_bits_equal(pg, want_pg)


# --- statuses ------------------------------------------------------------------------------------------------
def _status_case(kind, soc):
    a = make_inputs(4, 16, topk=2, seed=22)
    p, g, s, pr = a["permuted_tokens"], a["unpermuted_tokens_grad"], a["sorted_indices"], a["probs"]
    out, pg = np.zeros((8, 16), BF16), np.zeros((4, 2), BF16)
    args = dict(permuted_tokens=p, unpermuted_tokens_grad=g, sorted_indices=s, probs=pr, padded_mode=False,
                restore_shape=None, permuted_tokens_grad_out=out, probs_grad_out=pg)
    edit = {
        "grad_null": dict(unpermuted_tokens_grad=None), "indices_null": dict(sorted_indices=None),
        "out_null": dict(permuted_tokens_grad_out=None), "probs_grad_null": dict(probs_grad_out=None),
        "permuted_null": dict(permuted_tokens=None),
        "grad_int8": dict(unpermuted_tokens_grad=g.astype(np.int8)),
        "indices_int64": dict(sorted_indices=s.astype(np.int64)),
        "permuted_fp32": dict(permuted_tokens=p.astype(np.float32)),
        "probs_grad_dtype": dict(probs_grad_out=pg.astype(np.float16)),
        "padded_mode": dict(padded_mode=True),
        "topk_513": dict(probs=np.zeros((4, 513), BF16), sorted_indices=np.zeros(2052, np.int32),
                         permuted_tokens=np.zeros((2052, 16), BF16),
                         permuted_tokens_grad_out=np.zeros((2052, 16), BF16),
                         probs_grad_out=np.zeros((4, 513), BF16)),
        "hidden_0": dict(unpermuted_tokens_grad=np.zeros((4, 0), BF16), permuted_tokens=np.zeros((8, 0), BF16),
                         permuted_tokens_grad_out=np.zeros((8, 0), BF16)),
        "indices_short": dict(sorted_indices=s[:7]),
        "probs_rows": dict(probs=pr[:3], probs_grad_out=pg[:3]),
        "out_rows": dict(permuted_tokens_grad_out=np.zeros((7, 16), BF16)),
        "permuted_rows": dict(permuted_tokens=p[:7]),
        "probs_grad_shape": dict(probs_grad_out=np.zeros((2, 4), BF16)),
        "indices_0d": dict(sorted_indices=np.array(0, np.int32)),
    }[kind]
    args.update(edit)
    return args


STATUS_CASES = [
    # (case, profile, status or error class)
    ("grad_null", "ascend910b", 161001), ("indices_null", "ascend910b", 161001), ("out_null", "ascend910b", 161001),
    ("probs_grad_null", "ascend910b", 161001), ("grad_int8", "ascend910b", 161002),
    ("indices_int64", "ascend910b", 161002), ("permuted_fp32", "ascend910b", 161002),
    ("probs_grad_dtype", "ascend910b", 161002), ("topk_513", "ascend910b", 561002), ("hidden_0", "ascend910b", 561002),
    ("indices_short", "ascend910b", 561002), ("probs_rows", "ascend910b", 561002), ("out_rows", "ascend910b", 561002),
    ("permuted_rows", "ascend910b", 561002), ("probs_grad_shape", "ascend910b", 561002),
    ("padded_mode", "ascend950", 161002), ("permuted_null", "ascend950", 161001), ("grad_null", "ascend950", 161001),
    ("probs_grad_null", "ascend950", 161001), ("grad_int8", "ascend950", 161002),
    ("permuted_fp32", "ascend950", 161002), ("indices_0d", "ascend950", 161002),
    ("indices_short", "ascend950", 561103), ("probs_rows", "ascend950", 561103), ("out_rows", "ascend950", 561103),
    ("permuted_rows", "ascend950", 561103), ("probs_grad_shape", "ascend950", 561103),
    ("probs_grad_dtype", "ascend950", 561103), ("hidden_0", "ascend950", 561103),
]


@pytest.mark.parametrize("case,soc,want", STATUS_CASES, ids=[f"{c}-{s}" for c, s, _ in STATUS_CASES])
def test_statuses(case, soc, want):
    args = _status_case(case, soc)
    if isinstance(want, int):
        with pytest.raises(Exception) as e:
            get_workspace_size(**args, soc=soc)
        assert getattr(e.value, "status", None) == want, str(e.value)
        assert len(str(e.value)) > 20
    else:
        with pytest.raises(want) as e:
            get_workspace_size(**args, soc=soc)
        assert isinstance(e.value, SimulatorError)


def test_950_dtype_checks_follow_check_dtype_valid_order():
    """aclnn_moe_token_unpermute_grad.cpp's CheckDtypeValid tests probs before permuted_tokens_grad_out: with both
    wrong, the probs is the one named (161002 either way)."""
    args = _status_case("padded_mode", "ascend950")
    args.update(padded_mode=False, probs=args["probs"].astype(np.int8),
                permuted_tokens_grad_out=np.zeros((8, 16), np.float32))
    with pytest.raises(ParamInvalidError) as e:
        get_workspace_size(**args, soc="ascend950")
    assert e.value.status == 161002 and e.value.message.startswith("probs dtype")


def test_padded_mode_true_is_ignored_on_910b():
    """The membase tiling key has no paddedMode part: padded_mode = true runs the same kernel."""
    args = _status_case("padded_mode", "ascend910b")
    size, ex = get_workspace_size(**args, soc="ascend910b")
    assert ex.tiling.tiling_key == 1


def test_950_both_outputs_empty_runs_nothing():
    args = _status_case("hidden_0", "ascend950")
    args.update(probs_grad_out=np.zeros((0, 2), BF16))
    size, ex = get_workspace_size(**args, soc="ascend950")
    assert size == 0 and not any(isinstance(step, KernelStep) for step in ex.steps)


def test_probs_without_permuted_tokens_is_reported_on_910b():
    """permuted_tokens is optional in the OpDef, but the probs kernel reads it: the empty tensor faults."""
    args = _status_case("permuted_null", "ascend910b")
    size, ex = get_workspace_size(**args, soc="ascend910b")
    with pytest.raises(OutOfBoundsError, match="permuted_tokens"):
        run(np.empty(size, np.uint8), size, ex)
