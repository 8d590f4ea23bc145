"""MoeTokenUnpermuteWithRoutingMap through the aclnn and friendly calls, bit-exact against the independent golden:
keys 0 / 1 (not padded) and 1000 (padded) over token / probs dtypes (incl. bf16 tokens + fp32 probs), bool and int8
maps, topK 1..512, -1 and dropped slots, hidden splits and token chunks (small UB profiles), uneven multi-core
splits, the three chip profiles; every status of the Checks section; the composite's step order; empty inputs;
a permute -> unpermute round trip; fuzzed bad indices never crash."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops.unpermute_with_routing_map as uwrm
from ascend_sim import SimulatorError
from ops.unpermute_with_routing_map.examples import make_inputs
from ops.unpermute_with_routing_map.golden import golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.status import AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
DTYPES = {"bf16": ("bf16", None), "fp16": ("fp16", None), "fp32": ("fp32", None), "bf16-fp32probs": ("bf16", "fp32")}
SMALL = get_soc("ascend910b", aiv_num=4)
_DT = {"bf16": BF16, "fp16": F16, "fp32": F32}


def _run(args, soc="ascend910b", **kw):
    outs = uwrm.allocate_outputs(*args.values())
    outs[1][:] = -7                    # out_index / permute_token_id: untouched when not padded
    outs[2][:] = -7
    size, ex = uwrm.get_workspace_size(*args.values(), *outs, soc=soc, **kw)
    uwrm.run(np.empty(size, dtype=np.uint8), size, ex)
    return outs, ex


def _check(args, outs):
    want = golden(*args.values(), out_shape=outs[0].shape)
    assert_bits_equal(outs[0], want[0], "unpermuted_tokens")
    if args["padded_mode"]:
        assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])
    else:
        assert (outs[1] == -7).all() and (outs[2] == -7).all(), "out_index / permute_token_id must stay unwritten"
    if args["probs"] is not None:
        assert_bits_equal(outs[3], want[3])


# id: make_inputs arguments (tokens, hidden, experts, topk/capacity), soc
NOT_PAD = {
    "k2-unaligned-h": (dict(tokens=37, hidden=300, experts=5, topk=2), "ascend910b"),
    "k1-uneven-4cores": (dict(tokens=37, hidden=64, experts=6, topk=1), SMALL),
    "k3-910_93": (dict(tokens=20, hidden=48, experts=8, topk=3), "ascend910_93"),
    "k4-950": (dict(tokens=70, hidden=40, experts=6, topk=4), "ascend950"),
}


@pytest.mark.parametrize("with_probs", [True, False], ids=["probs", "noprobs"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(NOT_PAD))
def test_not_padded_matches_golden(case, dtype, with_probs):
    shape, soc = NOT_PAD[case]
    if not with_probs and dtype == "bf16-fp32probs":
        pytest.skip("no probs: the same as bf16")
    tok, pr = DTYPES[dtype]
    args = make_inputs(**shape, dtype=tok, probs_dtype=pr, with_probs=with_probs,
                       routing_map_dtype="int8" if case == "k3-910_93" else "bool", seed=len(case))
    outs, ex = _run(args, soc)
    _check(args, outs)
    assert ex.tiling.tiling_key == (1 if with_probs else 0)
    assert [s.name for s in ex.report.steps][:2] == ["l0op::MoeTokenUnpermuteWithRoutingMap", "l0op::ViewCopy"]


@pytest.mark.parametrize("top_k", [1, 8, 512], ids=lambda k: f"topk{k}")
def test_topk_range(top_k):
    args = make_inputs(3, 16, 512, topk=top_k, dtype="bf16", seed=top_k)
    outs, ex = _run(args, SMALL)
    _check(args, outs)
    assert ex.tiling.fields["top_k"] == top_k


def test_minus_one_and_dropped_slots_and_zero_probs():
    """Non-topK rows (master): -1 slots are skipped (the map keeps topK ones, their probs are 0); slots whose row is
    >= R (dropped by numOutTokens) are skipped; a zero prob hides a NaN row."""
    args = make_inputs(30, 72, 6, topk=3, dtype="fp16", seed=3)
    s = args["sorted_indices"].copy()
    s[::7] = -1
    s[:3] = -1                     # token 0 keeps no slot: its row is zero
    p = args["permuted_tokens"][:80].copy()       # rows 80..89 dropped
    probs = args["probs"].copy()
    t, e = np.nonzero(args["routing_map"])
    probs[t[10], e[10]] = 0
    p[s[10]] = np.nan if s[10] >= 0 and s[10] < 80 else p[0]
    args.update(permuted_tokens=p, sorted_indices=s, probs=probs)
    outs, _ = _run(args, SMALL)
    _check(args, outs)
    assert not outs[0][0].any()


def test_skipped_first_slot_then_negative_zeros_sum_to_positive_zero():
    """Kernel G zero-fills the accumulator when slot 0 is skipped, then adds: +0.0 + -0.0 = +0.0. A golden that
    started from the first kept term would keep -0.0."""
    args = make_inputs(8, 64, 4, topk=2, dtype="fp16", seed=4)
    s, p, probs = args["sorted_indices"], args["permuted_tokens"].copy(), args["probs"].copy()
    t, e = np.nonzero(args["routing_map"])          # token-major: token 0's two experts first
    probs[t[0], e[0]] = 0                            # slot 0 of token 0 skipped
    p[s[1]] = -0.0                                   # its second slot adds -0.0 (times a positive prob)
    probs[t[1], e[1]] = abs(probs[t[1], e[1]]) + np.float16(0.25)
    args.update(permuted_tokens=p, probs=probs)
    outs, _ = _run(args, SMALL)
    _check(args, outs)
    assert not np.signbit(outs[0][0]).any()


# --- rows routed to fewer than topK experts (docs/calling.md, "A routing-map round trip") --------------------------
# 3 tokens, E 4, topK 2. Token 0 is routed to expert 1 only; token 1 to experts 0, 2; token 2 to experts 1, 3.
# The forward numbers its rows expert-major: (e0, t1) -> 0, (e1, t0) -> 1, (e1, t2) -> 2, (e2, t1) -> 3,
# (e3, t2) -> 4, so S (token-major slots, -1 for token 0's unused slot) is [1, -1, 0, 3, 2, 4].
SHORT_X = np.array([1.0, 2.0, 4.0], np.float32)              # token t's one hidden value
SHORT_S = np.array([1, -1, 0, 3, 2, 4], np.int32)
SHORT_PERMUTED = SHORT_X[[1, 0, 2, 1, 2, 0]][:, None]        # rows 0..4 as above; row 5 never written (0 here)
SHORT_PERMUTED[5] = 0


def _short_map_and_probs(extra=None):
    """The short-row routing map and probs (exact binary fractions), `extra` = (token, expert) given a 1 and prob 0."""
    rm = np.zeros((3, 4), bool)
    probs = np.zeros((3, 4), np.float32)
    for (t, e), p in {(0, 1): 0.5, (1, 0): 0.125, (1, 2): 0.0625, (2, 1): 0.75, (2, 3): 0.25}.items():
        rm[t, e], probs[t, e] = True, p
    if extra is not None:
        rm[extra] = True
    return rm, probs


def test_short_rows_shift_later_tokens_onto_other_tokens_probs():
    """The key-1 kernel packs the selected probs token-major, [0.5, 0.125, 0.0625, 0.75, 0.25], and kernel G reads
    slot t*topK + k at that position whatever token t's count: token 1 gets 0.0625 and 0.75 (its own second and
    token 2's first), token 2 gets 0.25 and position 5, past the five selected (0 here; on the chip whatever the
    l0's permuteProbs buffer held, so its second term is undefined there). Worked by hand:
      token 0: 0.5 * x0 = 0.5              (formula 0.5)
      token 1: 0.0625 * x1 + 0.75 * x1 = 1.625   (formula (0.125 + 0.0625) * 2 = 0.375)
      token 2: 0.25 * x2 (+ position 5) = 1.0    (formula (0.75 + 0.25) * 4 = 4.0)"""
    rm, probs = _short_map_and_probs()
    out, _, _, permute_probs = uwrm.moe_token_unpermute_with_routing_map(SHORT_PERMUTED, SHORT_S, rm, probs)
    assert out[:, 0].tolist() == [0.5, 1.625, 1.0]
    assert (SHORT_X * probs.sum(axis=1)).tolist() == [0.5, 0.375, 4.0]      # what the formula would give
    assert permute_probs.tolist() == [0.5, 0.125, 0.0625, 0.75, 0.25, 0.0]


@pytest.mark.parametrize("extra,want", [
    ((0, 3), [0.5, 0.375, 4.0]),     # filler after token 0's expert: slot 0 meets expert 1, the formula holds
    ((0, 0), [0.0, 0.375, 4.0]),     # filler before it: slot 0 meets the filler's prob 0 and is skipped
], ids=["filler-after", "filler-before"])
def test_rows_filled_to_topk_with_prob_0_slots_give_the_formula(extra, want):
    """The convention the real op needs: every row of the unpermute's map holds exactly topK ones, the unused slots'
    ones with prob 0 and placed after the token's routed experts (slot r = the r-th one, ascending experts)."""
    rm, probs = _short_map_and_probs(extra)
    out = uwrm.moe_token_unpermute_with_routing_map(SHORT_PERMUTED, SHORT_S, rm, probs)[0]
    assert out[:, 0].tolist() == want


def _short_row_inputs(tokens, hidden, experts, topk, dtype, probs_dtype, seed):
    """A forward's outputs for rows routed to 1..topK experts (facts 7.a, non-topK): permuted rows expert-major,
    S[t*topK + r] = the row of token t's r-th expert (ascending), -1 past its count."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, topk + 1, size=tokens)
    counts[0] = max(1, topk - 1)                    # a short row before the others: the shift is certain
    rm = np.zeros((tokens, experts), bool)
    for t in range(tokens):
        rm[t, np.sort(rng.choice(experts, counts[t], replace=False))] = True
    rows = np.cumsum(rm.T.reshape(-1)).reshape(experts, tokens).T - 1      # expert-major numbering
    s = np.full((tokens, topk), -1, np.int32)
    for t in range(tokens):
        s[t, :counts[t]] = rows[t, np.flatnonzero(rm[t])]
    permuted = np.zeros((tokens * topk, hidden), np.float32)
    permuted[: rm.sum()] = rng.uniform(-2, 2, (int(rm.sum()), hidden))
    probs = rng.uniform(0, 1, (tokens, experts)).astype(np.float32)
    return dict(permuted_tokens=permuted.astype(dtype), sorted_indices=s.reshape(-1), routing_map=rm,
                probs=probs.astype(probs_dtype), padded_mode=False, restore_shape=(tokens, hidden))


@pytest.mark.parametrize("dtype,probs_dtype,soc", [
    ("bf16", "bf16", "ascend910b"), ("fp32", "fp32", SMALL), ("bf16", "fp32", "ascend950"),
], ids=["bf16-910b", "fp32-4cores", "bf16-fp32probs-950"])
def test_short_rows_match_the_golden_of_the_kernels_indexing(dtype, probs_dtype, soc):
    args = _short_row_inputs(23, 40, 6, 3, _DT[dtype], _DT[probs_dtype], seed=5)
    outs, _ = _run(args, soc)
    _check(args, outs)



@pytest.mark.parametrize("ub_size,expect", [
    (15376, {"hidden_splited_length": 512, "hidden_splited_num": 2, "hidden_splited_remain": 276}),
    (13776, {"tokens_splited_num": 1, "tokens_splited_remain": 5}),
], ids=["hidden-split", "token-chunks"])
def test_small_ub_splits(ub_size, expect):
    soc = get_soc("ascend910b", aiv_num=2, ub_size=ub_size)
    h, k = (1300, 3) if "hidden_splited_num" in expect else (40, 80)
    args = make_inputs(21 if k == 80 else 5, h, 96, topk=k, dtype="bf16", seed=5)
    outs, ex = _run(args, soc)
    got = {n: ex.tiling.fields[n] for n in expect}
    if "tokens_splited_num" in expect:
        assert ex.tiling.fields["tokens_splited_length"] < ex.tiling.fields["tokens_core_length"], got
    else:
        assert got == expect
    _check(args, outs)


# --- padded --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("with_probs", [True, False], ids=["probs", "noprobs"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_padded_matches_golden(dtype, with_probs, soc):
    if not with_probs and dtype == "bf16-fp32probs":
        pytest.skip("no probs: the same as bf16")
    tok, pr = DTYPES[dtype]
    args = make_inputs(23, 40, 5, capacity=7, dtype=tok, probs_dtype=pr, drop_and_pad=True, with_probs=with_probs,
                       seed=11)
    outs, ex = _run(args, soc)
    _check(args, outs)
    names = [s.name for s in ex.report.steps]
    fp32_acc = tok == "fp32" or pr == "fp32"
    add = "l0op::MoeInplaceIndexAddAiCore" if fp32_acc else "l0op::MoeInplaceIndexAddWithSorted"
    want = (["l0op::MoeTokenUnpermuteWithRoutingMap", "l0op::Mul"] if with_probs else []) + \
        ["l0op::ZerosLike"] + (["l0op::Cast"] if pr == "fp32" else []) + ["l0op::Sort", add] + \
        (["l0op::ViewCopy"] if with_probs else []) + ["l0op::ViewCopy"] * 2 + \
        (["l0op::Cast"] if pr == "fp32" else []) + ["l0op::ViewCopy"]
    assert names == want
    if with_probs:
        assert ex.tiling.tiling_key == 1000


@pytest.mark.parametrize("soc,hidden", [("ascend910b", 24), ("ascend950", 40), ("ascend950", 24)],
                         ids=["910b", "950-column-split", "950-id-split"])
def test_padded_fp32_deterministic_uses_index_add_with_sorted_on_a2_a3_only(soc, hidden):
    """910B: the sorted index add. 950: MoeInplaceIndexAddAiCore's deterministic template; with 32 columns or
    fewer its id split, whose real kernel multiplies by alphaValue_ = 0 without an alpha input: the tokens stay
    at the zeros they were filled with (tests/ops/l0/test_moe_inplace_index_add_quant.py)."""
    args = make_inputs(19, hidden, 4, capacity=9, dtype="fp32", drop_and_pad=True, seed=2)
    outs, ex = _run(args, soc, deterministic=True)
    names = [s.name for s in ex.report.steps]
    assert ("l0op::MoeInplaceIndexAddWithSorted" in names) == (soc == "ascend910b")
    if hidden == 24 and soc == "ascend950":
        step = next(s for s in ex.report.steps if s.name == "l0op::MoeInplaceIndexAddAiCore")
        assert step.run.kernel == "MoeInplaceIndexAddDeterminstic" and not np.any(outs[0])
    else:
        _check(args, outs)


def test_padded_pad_kernel_multi_core_front_tail_and_repeat_runs():
    """E * capacity = 63 probs over 4 cores: 3 front cores of 16, 1 tail core of 15; a second run of the same
    executor gives the same bits (ZerosLike runs again)."""
    args = make_inputs(30, 16, 7, capacity=9, dtype="bf16", drop_and_pad=True, seed=4)
    outs, ex = _run(args, SMALL)
    f = ex.tiling.fields
    assert (f["front_core"], f["num_tokens_each_front_core"], f["tail_core"], f["num_tokens_each_tail_core"]) == \
        (3, 16, 1, 15)
    _check(args, outs)
    first = outs[0].copy()
    uwrm.run(np.empty(ex.workspace_size, dtype=np.uint8), ex.workspace_size, ex)
    assert_bits_equal(outs[0], first)


def test_round_trip_permute_then_unpermute():
    """Forward permute (NumPy, the routing-map permute's layout) then the simulated unpermute: each token comes back
    times the sum of its kept probs."""
    args = make_inputs(40, 32, 8, topk=3, dtype="fp32", seed=8)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 32)).astype(np.float32)
    _, token_of_row = np.nonzero(args["routing_map"].T)   # expert-major (expert, token) pairs: the forward's rows
    permuted = x[token_of_row]
    args["permuted_tokens"] = permuted
    out = uwrm.moe_token_unpermute_with_routing_map(*args.values(), soc=SMALL)[0]
    kept = (args["probs"] * args["routing_map"]).sum(axis=1)
    np.testing.assert_allclose(out, x * kept[:, None], rtol=1e-5, atol=1e-6)


# --- statuses ------------------------------------------------------------------------------------------------
def _args(**over):
    a = make_inputs(6, 8, 4, topk=2, dtype="bf16", seed=0)
    a.update(over)
    return a


def _ws(args, outs=None, **kw):
    outs = uwrm.allocate_outputs(*args.values()) if outs is None else outs
    return uwrm.get_workspace_size(*args.values(), *outs, **kw)


STATUS_CASES = {
    "null-permuted-tokens": (lambda: _ws(_args(permuted_tokens=None), uwrm.allocate_outputs(
        np.zeros((12, 8), BF16), np.zeros(12, np.int32), probs=np.zeros((6, 4), BF16))), ParamNullptrError),
    "null-sorted-indices": (lambda: _ws(_args(sorted_indices=None), uwrm.allocate_outputs(
        np.zeros((12, 8), BF16), np.zeros(12, np.int32), probs=np.zeros((6, 4), BF16))), ParamNullptrError),
    "no-probs-no-restore-shape": (lambda: _ws(_args(probs=None, restore_shape=None), uwrm.allocate_outputs(
        np.zeros((12, 8), BF16), np.zeros(12, np.int32), restore_shape=(6, 8))), ParamNullptrError),
    "null-unpermuted": (lambda: uwrm.get_workspace_size(*_args().values(), None, None, None, None),
                        ParamNullptrError),
    "int8-tokens": (lambda: _ws(_args(permuted_tokens=np.zeros((12, 8), np.int8))), ParamInvalidError),
    # CheckDtypeValid runs before anything reads unpermuted_tokens: the dtype error wins over the missing output
    "int8-tokens-null-unpermuted": (lambda: uwrm.get_workspace_size(
        *_args(permuted_tokens=np.zeros((12, 8), np.int8)).values(), None, None, None, None), ParamInvalidError),
    "int64-indices": (lambda: _ws(_args(sorted_indices=np.zeros(12, np.int64))), ParamInvalidError),
    "fp16-probs-bf16-tokens": (lambda: _ws(_args(probs=np.zeros((6, 4), F16))), ParamInvalidError),
    "fp32-permute-probs-for-bf16-probs": (
        lambda: _ws(_args(), (np.zeros((6, 8), BF16), np.zeros(12, np.int32), np.zeros(12, np.int32),
                              np.zeros(12, F32))), ParamInvalidError),
    "int64-out-index": (lambda: _ws(_args(), (np.zeros((6, 8), BF16), np.zeros(12, np.int64),
                                               np.zeros(12, np.int32), np.zeros(12, BF16))), ParamInvalidError),
    "3d-tokens": (lambda: _ws(_args(permuted_tokens=np.zeros((12, 8, 1), BF16)),
                              (np.zeros((6, 8), BF16), np.zeros(12, np.int32), np.zeros(12, np.int32),
                               np.zeros(12, BF16))), ParamInvalidError),
    "2d-indices": (lambda: _ws(_args(sorted_indices=np.zeros((12, 1), np.int32)),
                               (np.zeros((6, 8), BF16), np.zeros(12, np.int32), np.zeros(12, np.int32),
                                np.zeros(12, BF16))), ParamInvalidError),
    "1d-unpermuted": (lambda: _ws(_args(), (np.zeros(48, BF16), np.zeros(12, np.int32), np.zeros(12, np.int32),
                                             np.zeros(12, BF16))), ParamInvalidError),
    "restore-shape-len1-no-probs": (lambda: _ws(_args(probs=None, routing_map=None, restore_shape=(6,)),
                                                (np.zeros((6, 8), BF16), np.zeros(12, np.int32),
                                                 np.zeros(12, np.int32), None)), InnerNullptrError),
    "topk-over-512": (lambda: _ws(_args(permuted_tokens=np.zeros((6 * 513, 8), BF16))), InnerNullptrError),
    "probs-not-2d": (lambda: _ws(_args(probs=np.zeros(24, BF16), routing_map=np.zeros(24, bool)),
                                 (np.zeros((24, 8), BF16), np.zeros(12, np.int32), np.zeros(12, np.int32),
                                  np.zeros(12, BF16))), InnerNullptrError),
    "unpermuted-shape-mismatch": (lambda: _ws(_args(), (np.zeros((7, 8), BF16), np.zeros(12, np.int32),
                                                         np.zeros(12, np.int32), np.zeros(12, BF16))),
                                  InnerNullptrError),
    "pad-rows-differ-from-indices": (lambda: _ws(_args(padded_mode=True, sorted_indices=np.zeros(8, np.int32)),
                                                 (np.zeros((6, 8), BF16), np.zeros(8, np.int32),
                                                  np.zeros(8, np.int32), np.zeros(8, BF16))), InnerNullptrError),
    "pad-null-out-index": (lambda: _ws(_args(padded_mode=True, sorted_indices=np.zeros(12, np.int32)),
                                       (np.zeros((6, 8), BF16), None, np.zeros(12, np.int32), np.zeros(12, BF16))),
                           InnerNullptrError),
}


@pytest.mark.parametrize("case", list(STATUS_CASES))
def test_statuses(case):
    fn, error = STATUS_CASES[case]
    with pytest.raises(error) as e:
        fn()
    assert e.value.status == error.status and len(e.value.message) > 20


def test_uint8_routing_map_is_refused():
    # the real aclnn accepts uint8 without a word, but the l0 op's OpDef has bool / int8 only
    # (docs/operators/moe-token-unpermute-with-routing-map.md)
    with pytest.raises(ParamInvalidError, match="uint8") as e:
        _run(_args(routing_map=_args()["routing_map"].astype(np.uint8)))
    assert e.value.status == 161002


@pytest.mark.parametrize("padded", [False, True], ids=["notpad", "pad"])
def test_empty_sorted_indices_zero_fills_every_output(padded):
    a = _args(sorted_indices=np.zeros(0, np.int32), padded_mode=padded)
    outs = (np.ones((6, 8), BF16), np.ones(0, np.int32), np.ones(0, np.int32), np.ones(0, BF16))
    size, ex = _ws(a, outs)
    uwrm.run(None, size, ex)
    assert size == 0 and not outs[0].astype(np.float32).any()
    assert [s.name for s in ex.report.steps] == ["l0op::ZerosLike", "l0op::ViewCopy"] * 4


# --- bad data never crashes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("padded", [False, True], ids=["notpad", "pad"])
def test_fuzzed_indices_end_in_errors_not_crashes(seed, padded):
    rng = np.random.default_rng(seed)
    a = make_inputs(9, 16, 3, topk=2, capacity=4, dtype="bf16", drop_and_pad=padded, seed=seed)
    s = a["sorted_indices"].copy()
    s[rng.integers(0, s.size, 3)] = rng.choice([-5, 2 ** 31 - 1, -(2 ** 31), 10 ** 6, 9, 12])
    a["sorted_indices"] = s
    if seed % 2:
        a["routing_map"] = rng.integers(0, 3, a["routing_map"].shape).astype(np.int8)
    try:
        _run(a, SMALL)
    except (AclnnError, SimulatorError):
        pass


@pytest.mark.parametrize("probs_out_len", [0, 8], ids=["empty-permute-probs", "non-empty-permute-probs"])
def test_not_padded_without_probs_copies_an_empty_permute_probs(probs_out_len):
    """Without probs the l0 returns a (0,) permuteProbs and the aclnn still ViewCopies it into the caller's
    output: fine into an empty one, 561103 into one with elements."""
    p = np.arange(64, dtype=np.float16).reshape(8, 8)
    s = np.arange(8, dtype=np.int32)
    outs = (np.zeros((4, 8), np.float16), np.zeros(8, np.int32), np.zeros(8, np.int32),
            np.zeros(probs_out_len, np.float16))
    if probs_out_len:
        with pytest.raises(InnerNullptrError, match="permute_probs"):
            uwrm.get_workspace_size(p, s, None, None, False, [4, 8], *outs)
        return
    size, executor = uwrm.get_workspace_size(p, s, None, None, False, [4, 8], *outs)
    uwrm.run(np.empty(size, np.uint8), size, executor)
    assert np.array_equal(outs[0], golden(p, s, None, None, False, [4, 8])[0])


@pytest.mark.parametrize("probs_dtype", ["fp32", "bf16"], ids=["mixed", "same"])
def test_padded_empty_hidden_steps_follow_master(probs_dtype):
    """aclnn UT padded_empty_hidden (op_api UT @ 25fb6b92890d): hidden 0 with padding succeeds; the chain runs the l0
    op, ZerosLike (+ Cast with bf16 tokens and fp32 probs), Sort and the ViewCopies, but no Mul and no index add
    (both sit behind `!permutedTokens->IsEmpty()`); the mixed chain still casts the zeros back to bf16."""
    p = np.zeros((8, 0), BF16)
    s = (np.arange(8, dtype=np.int32) % 4)
    rm, pr = np.ones((4, 2), np.int8), np.full((4, 2), 0.5, _DT[probs_dtype])
    outs = (np.ones((4, 0), BF16), np.zeros(8, np.int32), np.zeros(8, np.int32), np.zeros(8, _DT[probs_dtype]))
    size, ex = uwrm.get_workspace_size(p, s, rm, pr, True, [4, 0], *outs)
    cast = ["l0op::Cast"] if probs_dtype == "fp32" else []
    assert [st.name for st in ex.steps] == (["l0op::MoeTokenUnpermuteWithRoutingMap", "l0op::ZerosLike"] + cast
                                            + ["l0op::Sort"] + ["l0op::ViewCopy"] * 3 + cast + ["l0op::ViewCopy"])
