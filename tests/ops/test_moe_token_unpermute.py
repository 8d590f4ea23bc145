"""MoeTokenUnpermute end to end: bit-exact against the independent golden over all twelve tiling keys, hidden
and token splits, uneven cores, numOutTokens truncation, zero probs hiding NaN rows, topK 512, the three
profiles (the Ascend 950 path with the arch35 MoeFinalizeRoutingV2 rules), every status code, fuzzed indices,
and the round trip through the forward MoeTokenPermute. Kernel G compiles nothing new here."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops.unpermute as unpermute
from ascend_sim import OutOfBoundsError, SimulatorError
from ops.unpermute import allocate_outputs, get_workspace_size, moe_token_unpermute, run
from ops.unpermute.examples import make_inputs
from ops.unpermute.golden import golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.status import AclnnError

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
# the tilingKey each (tokens, probs) pair must select, from the key table of facts §5.d
KEY = {("bf16", None): 0, ("bf16", "bf16"): 1, ("bf16", "fp16"): 17, ("bf16", "fp32"): 25,
       ("fp16", None): 2, ("fp16", "fp16"): 3, ("fp16", "bf16"): 11, ("fp16", "fp32"): 27,
       ("fp32", None): 4, ("fp32", "fp32"): 5, ("fp32", "bf16"): 13, ("fp32", "fp16"): 21}


def _case(tokens, probs, *, n=13, k=3, h=40, drop=0, experts=6, seed=0, hide_nan=True):
    """make_inputs plus the hard parts: column 0 of every row -0.0 (a one-term sum keeps its sign only if the
    first term is assigned), about a fifth of the probs exactly +-0 with NaN in the rows they address (a kernel
    that gathered them would show it), and `drop` rows cut off the permuted tensor (numOutTokens)."""
    with_probs = probs is not None
    slots = n * (k if with_probs else 1)
    a = make_inputs(n, h, experts, k, dtype=tokens, probs_dtype=probs, with_probs=with_probs,
                    num_out_tokens=slots - drop, seed=seed)
    p = a["permuted_tokens"].astype(F32)
    p[:, 0] = -0.0
    if with_probs and hide_nan:
        rng = np.random.default_rng(seed + 100)
        w = a["probs"].astype(F32)
        zero = rng.random(w.shape) < 0.2
        w[zero] = np.where(rng.random(int(zero.sum())) < 0.5, 0.0, -0.0)
        rows = a["sorted_indices"].reshape(w.shape)[zero]
        p[rows[rows < p.shape[0]]] = np.nan
        a["probs"] = w.astype(a["probs"].dtype)
    a["permuted_tokens"] = p.astype(a["permuted_tokens"].dtype)
    return a


def _run(a, soc="ascend910b"):
    """Both phases; returns (out, executor)."""
    out = allocate_outputs(a["permuted_tokens"], a["sorted_indices"], a["probs"])
    size, executor = get_workspace_size(a["permuted_tokens"], a["sorted_indices"], a["probs"], a["padded_mode"],
                                        a["restore_shape"], out, soc=soc)
    run(np.empty(size, np.uint8), size, executor)
    return out, executor


def _check(a, soc="ascend910b"):
    out, executor = _run(a, soc)
    want = golden(a["permuted_tokens"], a["sorted_indices"], a["probs"], arch35=get_soc(soc).is_regbase)
    assert_bits_equal(out, want, f"tiling {executor.tiling.fields}")
    return out, executor


# --- the twelve keys, with dropped rows and zero probs ---------------------------------------------------------
@pytest.mark.parametrize("tokens,probs", list(KEY), ids=[f"{t}-{p or 'noprobs'}" for t, p in KEY])
def test_every_key_matches_golden_bit_for_bit(tokens, probs):
    a = _case(tokens, probs, drop=5, seed=len(tokens) + len(probs or ""))
    _, executor = _check(a)
    assert executor.tiling.tiling_key == KEY[(tokens, probs)]


# id: (tokens, probs, _case arguments, profile overrides, tiling figures the case must reach)
SPLITS = {
    "hidden-pieces-and-remainder": ("bf16", "fp32", dict(n=5, k=3, h=1300, drop=2), dict(aiv_num=2, ub_size=15376),
                                    dict(hidden_splited_length=512, hidden_splited_num=2, hidden_splited_remain=276)),
    "token-chunks-and-remainder": ("fp32", "bf16", dict(n=41, k=80, h=40, drop=50, experts=100),
                                   dict(aiv_num=2, ub_size=13776),
                                   dict(tokens_core_length=20, tokens_splited_length=6, tokens_splited_num=3,
                                        tokens_splited_remain=2)),
    "uneven-cores": ("fp16", None, dict(n=37, h=33, drop=4), dict(aiv_num=8),
                     dict(tokens_core_length=4, tokens_core_remain=5)),
}


@pytest.mark.parametrize("case", SPLITS)
def test_splits_over_hidden_tokens_and_cores(case):
    tokens, probs, spec, overrides, figures = SPLITS[case]
    _, executor = _check(_case(tokens, probs, **spec), soc=get_soc("ascend910b", **overrides))
    assert {k: executor.tiling.fields[k] for k in figures} == figures


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_topk_512(soc):
    a = _case("fp32", "fp32", n=2, k=512, h=8, drop=100, experts=512)
    _, executor = _check(a, soc)
    # 950: the tiling is MoeFinalizeRoutingV2's (its field k), A2/A3: T-G's top_k
    assert executor.tiling.fields["k" if get_soc(soc).is_regbase else "top_k"] == 512


@pytest.mark.parametrize("soc,tokens,probs", [
    ("ascend910_93", "bf16", "fp32"), ("ascend910_93", "fp16", None),
    ("ascend950", "bf16", "fp16"), ("ascend950", "fp32", "bf16"), ("ascend950", "fp16", None),
], ids=lambda v: v if isinstance(v, str) else "noprobs")
def test_other_profiles(soc, tokens, probs):
    _check(_case(tokens, probs, drop=3, seed=7), soc)


# --- the Ascend 950 rules (MoeFinalizeRoutingV2 arch35) against A2/A3 ------------------------------------------
def _differences_case():
    """Token 0: its only kept term is -0.0 (950 sums from +0.0); token 1: a zero prob over a NaN row (950
    multiplies it); token 2: a -1 slot (950 skips it, A2/A3 read before the tensor)."""
    p = np.ones((6, 8), F32)
    p[0] = -0.0
    p[3] = np.nan
    s = np.array([0, 5, 1, 3, 2, 4], np.int32)       # token 0: rows 0 (-0.0) and 5 (prob 0); token 1: 1 and 3 (NaN)
    probs = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 1.0]], F32)
    return p, s, probs


def test_950_sums_from_zero_and_multiplies_zero_probs():
    p, s, probs = _differences_case()
    got = moe_token_unpermute(p, s, probs, soc="950")
    assert_bits_equal(got, golden(p, s, probs, arch35=True))
    assert np.all(np.signbit(got[0]) == False) and np.all(np.isnan(got[1]))      # noqa: E712
    a2 = moe_token_unpermute(p, s, probs, soc="910b")
    assert np.all(np.signbit(a2[0])) and np.all(a2[1] == 2.0)


def test_minus_one_slot_is_skipped_on_950_and_read_on_a2():
    p, s, probs = _differences_case()
    s = s.copy()
    s[4] = -1
    got = moe_token_unpermute(p, s, probs, soc="950")
    assert_bits_equal(got, golden(p, s, probs, arch35=True))
    with pytest.raises(OutOfBoundsError) as info:
        moe_token_unpermute(p, s, probs, soc="910b")
    assert info.value.index_tensor == "sorted_indices" and info.value.index_value == -1


def test_950_steps_and_topk_beyond_512():
    a = _case("bf16", "bf16", n=1, k=600, h=8, experts=600, hide_nan=False)
    out, executor = _check(a, "950")
    assert [(s.name, s.kind) for s in executor.report.steps] == [("l0op::MoeFinalizeRoutingV2", "kernel"),
                                                                  ("l0op::ViewCopy", "host")]
    with pytest.raises(AclnnError) as info:          # the A2/A3 tiling refuses topK > 512
        _run(a, "910b")
    assert info.value.status == 561002


def test_950_large_topk_on_a_small_ub_runs_the_real_template():
    """A topK whose indices T-G could not hold in 8 KiB: the MoeFinalizeRoutingV2 tiling picks a template that
    runs (the stand-in kernel G refused this shape)."""
    a = _case("bf16", "fp32", n=1, k=600, h=8, experts=600, hide_nan=False)
    _, executor = _check(a, get_soc("950", ub_size=8192))
    assert executor.tiling.tiling_key // 10000 in (1, 2, 3, 4)


# --- attributes, empty tensors ---------------------------------------------------------------------------------
def test_padded_mode_and_restore_shape_are_ignored_on_a2():
    a = _case("bf16", "bf16", seed=3)
    want, _ = _run(a)
    a.update(padded_mode=True, restore_shape=(99, 2))
    got, _ = _run(a)
    assert_bits_equal(got, want)


@pytest.mark.parametrize("soc,workspace", [("ascend910b", 16 * 1024 * 1024), ("ascend950", 0)])
def test_empty_output_launches_nothing(soc, workspace):
    out = np.zeros((0, 8), BF16)
    size, executor = get_workspace_size(np.zeros((0, 8), BF16), np.zeros(0, np.int32), None, False, None, out,
                                        soc=soc)
    assert size == workspace
    run(np.empty(size, np.uint8), size, executor)


# --- checks and their status codes -----------------------------------------------------------------------------
def _base():
    a = _case("bf16", "bf16", n=4, k=2, h=8, hide_nan=False)
    out = allocate_outputs(a["permuted_tokens"], a["sorted_indices"], a["probs"])
    return dict(permuted_tokens=a["permuted_tokens"], sorted_indices=a["sorted_indices"], probs=a["probs"],
                padded_mode=False, restore_shape=None, unpermuted_tokens=out)


def _with(**changes):
    return {**_base(), **changes}


BAD = {
    # id: (arguments, status on 910B, status on 950, message fragment on 910B)
    "tokens-missing": (_with(permuted_tokens=None), 161001, 161001, "permuted_tokens"),
    "indices-missing": (_with(sorted_indices=None), 161001, 161001, "sorted_indices"),
    "out-missing": (_with(unpermuted_tokens=None), 161001, 161001, "unpermuted_tokens"),
    "tokens-int32": (_with(permuted_tokens=np.zeros((8, 8), np.int32)), 161002, 161002, "dtype combination"),
    "indices-int64": (_with(sorted_indices=np.zeros(8, np.int64)), 161002, 161002, "dtype combination"),
    "probs-int8": (_with(probs=np.zeros((4, 2), np.int8)), 161002, 161002, "dtype combination"),
    "out-dtype-differs": (_with(unpermuted_tokens=np.zeros((4, 8), F16)), 161002, 161002, "dtype combination"),
    "padded-mode-not-bool": (_with(padded_mode="yes"), 161002, 161002, "single bool"),
    "restore-shape-not-ints": (_with(restore_shape=[1.5]), 161002, 161002, "integer"),
    "tokens-3d": (_with(permuted_tokens=np.zeros((8, 8, 1), BF16)), 561002, 561103, "2-D"),
    "probs-1d": (_with(probs=np.zeros(8, BF16)), 561002, 561103, "2-D"),
    "indices-count": (_with(sorted_indices=np.arange(7, dtype=np.int32)), 561002, 561103, "tokens \\* topK"),
    "topk-513": (_with(sorted_indices=np.arange(513, dtype=np.int32), probs=np.ones((1, 513), BF16),
                       permuted_tokens=np.zeros((513, 8), BF16), unpermuted_tokens=np.zeros((1, 8), BF16)),
                 561002, None, "exceeds 512"),
    "out-shape": (_with(unpermuted_tokens=np.zeros((4, 9), BF16)), 561002, 561103, "unpermuted_tokens must have"),
    "out-aliases-tokens": (None, 161002, 161002, "shares memory"),
}


def _bad_args(case):
    args = BAD[case][0]
    if args is None:                                   # out is a view of permuted_tokens
        args = _base()
        tokens = np.zeros((8, 8), BF16)
        args.update(permuted_tokens=tokens, unpermuted_tokens=tokens[:4])
    return args


@pytest.mark.parametrize("case", BAD)
def test_each_check_gives_its_status_910b(case):
    _, status, _, fragment = BAD[case]
    with pytest.raises(AclnnError, match=fragment) as info:
        get_workspace_size(*_bad_args(case).values(), soc="ascend910b")
    assert info.value.status == status


@pytest.mark.parametrize("case", [c for c in BAD if BAD[c][2] is not None])
def test_each_check_gives_its_status_950(case):
    with pytest.raises(AclnnError) as info:
        get_workspace_size(*_bad_args(case).values(), soc="ascend950")
    assert info.value.status == BAD[case][2]


def test_950_padded_mode_is_checked_before_null_tensors():
    with pytest.raises(AclnnError, match="padded_mode") as info:
        get_workspace_size(*_with(padded_mode=True, permuted_tokens=None).values(), soc="ascend950")
    assert info.value.status == 161002


def test_950_skips_dtype_checks_of_empty_tensors():
    """An empty int8 probs with an empty output: no dtype check, no launch (the A2/A3 OpDef refuses it)."""
    args = _with(permuted_tokens=np.zeros((0, 8), BF16), sorted_indices=np.zeros(0, np.int32),
                 probs=np.zeros((0, 2), np.int8), unpermuted_tokens=np.zeros((0, 8), BF16))
    assert get_workspace_size(*args.values(), soc="ascend950")[0] == 0
    with pytest.raises(AclnnError) as info:
        get_workspace_size(*args.values(), soc="ascend910b")
    assert info.value.status == 161002


# --- bad data never crashes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("seed", range(3))
def test_fuzzed_indices_end_in_an_error_or_the_skip_rule(soc, seed):
    rng = np.random.default_rng(seed)
    a = _case("bf16", "fp32", n=6, k=3, h=16, drop=4, hide_nan=False, seed=seed)
    s = rng.integers(-3, 40, size=18).astype(np.int32)
    s[rng.integers(0, 18)] = [np.iinfo(np.int32).max, np.iinfo(np.int32).min, -1][seed]
    a["sorted_indices"] = s
    lowest = -1 if get_soc(soc).is_regbase else 0
    try:
        out, _ = _run(a, soc)
    except SimulatorError as e:
        assert isinstance(e, OutOfBoundsError) and s.min() < lowest
        return
    assert s.min() >= lowest
    assert_bits_equal(out, golden(a["permuted_tokens"], s, a["probs"], arch35=lowest == -1))


# --- round trip through the forward permute --------------------------------------------------------------------
def test_round_trip_permute_then_unpermute_gives_k_times_the_tokens():
    """MoeTokenPermute then MoeTokenUnpermute with probs = 1 adds each token's K copies: exactly 4 * x for K = 4
    (a power of two, so the bf16 result is exact). Every token row is distinct, so a slot gathered from the
    wrong row, or a wrong sum order, cannot give 4 * x."""
    import ops.permute as permute
    rng = np.random.default_rng(5)
    n, h, k = 24, 40, 4
    x = rng.standard_normal((n, h)).astype(BF16)
    experts = np.stack([rng.permutation(8)[:k] for _ in range(n)]).astype(np.int32)
    permuted, sorted_indices, _ = permute.moe_token_permute(x, experts)
    assert not np.array_equal(sorted_indices.reshape(-1), np.arange(n * k))      # a real permutation
    out = moe_token_unpermute(permuted, sorted_indices.reshape(-1), np.ones((n, k), BF16))
    assert_bits_equal(out, (x.astype(F32) * 4).astype(BF16))


def test_friendly_call_and_registration_names():
    assert unpermute.moe_token_unpermute is moe_token_unpermute
    a = _base()
    out = moe_token_unpermute(a["permuted_tokens"], a["sorted_indices"], a["probs"])
    assert out.shape == (4, 8) and out.dtype == BF16
