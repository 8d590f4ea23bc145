"""MoeTokenPermuteWithRoutingMap against the independent golden, bit-exact, and its aclnn checks.

Non-pad cases: aligned (exactly topK ones per row: sort #2 path) and non-topK rows (rank + scatter path with
-1 slots), keys 1 / 2 (multi-core sort via a 128 KiB UB) / 3 (split-D via a small UB), the sparse per-token
copy (colsAlign >= 256), fp16 / bf16 / fp32 tokens, fp32 probs with bf16 tokens, no probs, bool / int8 maps,
uneven masked-select core shares, topK 1 .. 512, all three profiles.
Pad cases (key 9, 19 on ascend950): capacity 0 / 1 / between / N, numOutTokens not a multiple of E, E below
and above the core count, probs dtypes, bool / int8 maps, all three profiles.
"""
from __future__ import annotations

import numpy as np
import pytest

from ascend_sim import SimulatorError
from ops.permute_with_routing_map import allocate_outputs, get_workspace_size, moe_token_permute_with_routing_map, run
from ops.permute_with_routing_map.examples import make_inputs
from ops.permute_with_routing_map.golden import permute_with_routing_map_golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.status import AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError, TilingError

# the multi-core sort's buffers hold at least 4096 pairs (its merge rounds), so 128 KiB of UB is the smallest
# that runs it: sort loops of 4096 keys, a 4200-slot sort is multi-core (key 2)
SMALL_SORT = get_soc("ascend910b", ub_size=131072 + 256, aiv_num=4)
# a 4096-float row does not fit: key 3; 20 KiB is about the least the non-aligned path's scatter (256-row
# blocks of 32 bytes in and out) fits in
SPLIT_D = get_soc("ascend910b", ub_size=20480 + 256, aiv_num=3)


CASES = {
    # id: (tokens, hidden, experts, topk, dtype, probs_dtype, map, full_topk, soc, key)
    "bf16_k1_aligned": (6, 40, 4, 2, "bf16", None, "bool", True, "ascend910b", 1),
    "bf16_k1_non_topk": (6, 40, 4, 2, "bf16", None, "bool", False, "ascend910b", 1),
    "bf16_fp32probs_int8": (9, 24, 5, 3, "bf16", "fp32", "int8", False, "ascend910_93", 1),
    "fp16_sparse_copy": (7, 300, 3, 2, "fp16", None, "int8", False, "ascend950", 1),
    "fp32_noprobs_aligned": (5, 16, 6, 6, "fp32", "none", "bool", True, "ascend910b", 1),
    "fp32_multicore_sort": (2100, 8, 6, 2, "fp32", None, "bool", True, SMALL_SORT, 2),
    "fp32_multicore_non_topk": (2100, 8, 6, 2, "fp32", None, "int8", False, SMALL_SORT, 2),
    "bf16_topk1": (5, 16, 3, 1, "bf16", None, "bool", True, "ascend910b", 1),
    "fp16_topk512_aligned": (2, 16, 512, 512, "fp16", None, "bool", True, "ascend910b", 1),
    "bf16_topk512_non_topk": (3, 16, 512, 512, "bf16", "fp32", "int8", False, "ascend950", 1),
    "fp32_split_d_non_topk": (5, 4096, 4, 2, "fp32", None, "bool", False, SPLIT_D, 3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_golden(case):
    n, h, e, k, dt, pdt, map_dt, full, soc, key = CASES[case]
    a = make_inputs(n, h, e, topk=k, dtype=dt, probs_dtype=None if pdt in (None, "none") else pdt,
                    with_probs=pdt != "none", routing_map_dtype=map_dt, full_topk=full, seed=n + h)
    outs = allocate_outputs(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"])
    for o in outs:
        if o is not None:
            o.view(np.uint8).fill(0x5A)                       # rows the kernel must not write stay 0x5A
    size, ex = get_workspace_size(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"], False, *outs,
                                  soc=soc)
    assert ex.tiling.tiling_key == key
    run(np.empty(size, np.uint8), size, ex)
    gt, gp, gs, rows = permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"])
    pt, pp, si = outs
    assert np.array_equal(si, gs)
    assert_bits_equal(pt[:rows], gt[:rows])
    assert np.all(pt[rows:].view(np.uint8) == 0x5A)
    if gp is not None:
        assert_bits_equal(pp[:rows], gp[:rows])
        assert np.all(pp[rows:].view(np.uint8) == 0x5A)
    assert full == (rows == n * k)
    vc = ["l0op::ViewCopy"] * (2 + (a["probs"] is not None))
    assert [s.name for s in ex.report.steps][-1 - len(vc):] == ["l0op::MoeTokenPermuteWithRoutingMap"] + vc


def test_friendly_defaults_to_every_routed_slot():
    a = make_inputs(4, 8, 3, topk=2, dtype="fp16", seed=3)
    pt, pp, si = moe_token_permute_with_routing_map(a["tokens"], a["routing_map"], a["probs"])
    gt, gp, gs, _ = permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], 8)
    assert np.array_equal(si, gs)
    assert_bits_equal(pt, gt)
    assert_bits_equal(pp, gp)


def _args(**over):
    a = make_inputs(4, 8, 3, topk=2, dtype="fp16", seed=1)
    outs = allocate_outputs(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"])
    args = dict(tokens=a["tokens"], routing_map=a["routing_map"], probs=a["probs"], num_out_tokens=8,
                drop_and_pad=False, permute_tokens_out=outs[0], permute_probs_out=outs[1], sorted_indices_out=outs[2])
    args.update(over)
    return args


F32 = np.float32
STATUS = {ParamNullptrError: 161001, ParamInvalidError: 161002, TilingError: 561002, InnerNullptrError: 561103}
STATUS_CASES = {
    "null_tokens": (dict(tokens=None), ParamNullptrError),
    "null_sorted": (dict(sorted_indices_out=None), ParamNullptrError),
    "null_map": (dict(routing_map=None), ParamNullptrError),
    "null_permute_out": (dict(permute_tokens_out=None), ParamNullptrError),
    "probs_without_out": (dict(permute_probs_out=None), ParamNullptrError),
    "tokens_int32": (dict(tokens=np.zeros((4, 8), np.int32)), ParamInvalidError),
    "out_dtype_differs": (dict(permute_tokens_out=np.zeros((8, 8), F32)), ParamInvalidError),
    "map_float": (dict(routing_map=np.zeros((4, 3), F32)), ParamInvalidError),
    "out_int8": (dict(permute_tokens_out=np.zeros((8, 8), np.int8)), ParamInvalidError),
    "probs_int32": (dict(probs=np.zeros((4, 3), np.int32), permute_probs_out=np.zeros(8, np.int32)), ParamInvalidError),
    "probs_1d": (dict(probs=np.zeros(12, np.float16)), ParamInvalidError),
    "sorted_int64": (dict(sorted_indices_out=np.zeros(8, np.int64)), ParamInvalidError),
    "probs_fp32_with_fp16_tokens": (dict(probs=np.zeros((4, 3), F32), permute_probs_out=np.zeros(8, F32)),
                                    ParamInvalidError),
    "probs_out_dtype": (dict(permute_probs_out=np.zeros(8, F32)), ParamInvalidError),
    "map_1d": (dict(routing_map=np.zeros(12, bool)), ParamInvalidError),
    "probs_shape": (dict(probs=np.zeros((4, 4), np.float16)), ParamInvalidError),
    "tokens_3d": (dict(tokens=np.zeros((4, 2, 4), np.float16)), ParamInvalidError),
    "num_out_negative": (dict(num_out_tokens=-1), ParamInvalidError),
    "num_out_too_big": (dict(num_out_tokens=13), ParamInvalidError),
    "out_rows": (dict(permute_tokens_out=np.zeros((7, 8), np.float16)), ParamInvalidError),
    "probs_out_rows": (dict(permute_probs_out=np.zeros(4, np.float16)), ParamInvalidError),
    "tokens_rows_mismatch": (dict(tokens=np.zeros((5, 8), np.float16)), TilingError),
    "out_cols": (dict(permute_tokens_out=np.zeros((8, 9), np.float16)), InnerNullptrError),
    "sorted_len": (dict(sorted_indices_out=np.zeros(9, np.int32)), InnerNullptrError),
    "probs_out_2d": (dict(permute_probs_out=np.zeros((8, 1), np.float16)), InnerNullptrError),
    "num_out_not_multiple_of_n": (dict(num_out_tokens=9, permute_tokens_out=np.zeros((9, 8), np.float16)),
                                  ParamInvalidError),
}


@pytest.mark.parametrize("case", list(STATUS_CASES))
def test_status_codes(case):
    over, err = STATUS_CASES[case]
    with pytest.raises(err) as e:
        get_workspace_size(**_args(**over))
    assert e.value.status == STATUS[err]


def test_topk_above_512_is_a_tiling_failure():
    x = np.zeros((1, 4), np.float16)
    rm = np.ones((1, 513), bool)
    with pytest.raises(TilingError, match="topK"):
        get_workspace_size(x, rm, None, 513, False, np.zeros((513, 4), np.float16), None, np.zeros(513, np.int32))


def test_experts_at_the_sort_limit_are_rejected():
    rm = np.zeros((1, 16777215), bool)
    with pytest.raises(ParamInvalidError, match="16777215") as e:
        get_workspace_size(np.zeros((1, 4), np.float16), rm, None, 1, False, np.zeros((1, 4), np.float16), None,
                           np.zeros(1, np.int32))
    assert e.value.status == 161002


def test_too_many_slots_is_a_tiling_failure():
    """N * topK >= 16777215 slots (N and E themselves below the limit): the tiling fails -> 561002. The arrays
    are zero pages never touched (the check comes before any work)."""
    n, k = 32768, 512
    with pytest.raises(TilingError, match="16777215") as e:
        get_workspace_size(np.zeros((n, 1), np.float16), np.zeros((n, k), bool), None, n * k, False,
                           np.zeros((n * k, 1), np.float16), None, np.zeros(n * k, np.int32))
    assert e.value.status == 561002


def test_empty_routing_map_is_a_no_op():
    size, ex = get_workspace_size(np.zeros((0, 4), np.float16), np.zeros((0, 3), bool), None, 0, False,
                                  np.zeros((0, 4), np.float16), None, np.zeros(0, np.int32))
    assert size == 0
    run(None, 0, ex)


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_routing_maps_never_crash(seed):
    rng = np.random.default_rng(seed)
    n, e = int(rng.integers(1, 9)), int(rng.integers(1, 6))
    rm = rng.integers(-2, 3, size=(n, e)).astype(np.int8)          # bytes other than 0 / 1, too many ones
    k = int(rng.integers(0, e + 1))
    x = rng.standard_normal((n, 8)).astype(np.float16)
    try:
        moe_token_permute_with_routing_map(x, rm, None, n * k)
    except (AclnnError, SimulatorError):
        pass


# --- drop and pad ----------------------------------------------------------------------------------------------
FEW_CORES = get_soc("ascend910b", aiv_num=3)          # E > cores: front / tail task split
PAD_CASES = {
    # id: (tokens, hidden, experts, topk, capacity, extra num_out, dtype, probs dtype, map, soc, key)
    "bf16_cap1_fp32probs": (12, 16, 5, 2, 1, 0, "bf16", "fp32", "bool", "ascend910b", 9),
    "fp16_cap_n_int8": (9, 24, 4, 2, 9, 0, "fp16", None, "int8", "ascend910_93", 9),
    "fp32_cap_between_noprobs": (20, 8, 6, 3, 7, 0, "fp32", "none", "bool", "ascend950", 19),
    "bf16_e_gt_cores_uneven": (15, 16, 7, 2, 4, 3, "bf16", None, "int8", FEW_CORES, 9),
    "fp16_950_simd": (10, 640, 3, 1, 5, 2, "fp16", None, "bool", "ascend950", 9),
    "fp32_cap0": (6, 8, 5, 1, 0, 3, "fp32", None, "bool", "ascend910b", 9),
}


@pytest.mark.parametrize("case", list(PAD_CASES))
def test_pad_matches_golden(case):
    n, h, e, k, cap, extra, dt, pdt, map_dt, soc, key = PAD_CASES[case]
    a = make_inputs(n, h, e, topk=k, capacity=cap, dtype=dt, probs_dtype=None if pdt in (None, "none") else pdt,
                    with_probs=pdt != "none", routing_map_dtype=map_dt, drop_and_pad=True, full_topk=False,
                    seed=n + e)
    num_out = a["num_out_tokens"] + extra                       # rounded down to a multiple of E
    outs = allocate_outputs(a["tokens"], a["routing_map"], a["probs"], num_out, True)
    assert outs[0].shape[0] == e * cap
    size, ex = get_workspace_size(a["tokens"], a["routing_map"], a["probs"], num_out, True, *outs, soc=soc)
    assert ex.tiling.tiling_key == key and ex.tiling.fields["capacity"] == cap
    run(np.empty(size, np.uint8), size, ex)
    gt, gp, gs, rows = permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], num_out, True)
    pt, pp, si = outs
    assert rows == e * cap and np.array_equal(si, gs)
    assert_bits_equal(pt, gt)
    if gp is not None:
        assert_bits_equal(pp, gp)
    # on ascend950 the kernel gathers the tokens itself; elsewhere the aclnn's GatherV2 does
    # (then the ViewCopy steps of master's aclnn: sortedIndices, permuteProbs, [GatherV2], permuteTokens)
    tail = (["l0op::MoeTokenPermuteWithRoutingMap", "l0op::ViewCopy"] + ["l0op::ViewCopy"] * (gp is not None)
            + ([] if get_soc(soc).is_regbase else ["l0op::GatherV2"]) + ["l0op::ViewCopy"])
    assert [s.name for s in ex.report.steps][-len(tail):] == tail
    assert "l0op::GatherV2" not in [s.name for s in ex.report.steps][:-2]


def test_pad_golden_formula_by_hand():
    """The pad golden itself on a tiny map worked out by hand: per expert, routed tokens first (ascending),
    then the others (ascending), the first `capacity` kept."""
    rm = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], bool)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    _, _, gs, rows = permute_with_routing_map_golden(x, rm, None, 6, True)
    assert rows == 6 and gs.tolist() == [0, 2, 1, 1, 2, 0]
    pt, _, si = moe_token_permute_with_routing_map(x, rm, None, 6, True)
    assert si.tolist() == [0, 2, 1, 1, 2, 0] and np.array_equal(pt, x[[0, 2, 1, 1, 2, 0]])


PAD_STATUS_CASES = {
    "out_rows_not_multiple_of_e": (dict(permute_tokens_out=np.zeros((8, 8), np.float16)), ParamInvalidError),
    "probs_out_rows": (dict(permute_probs_out=np.zeros(3, np.float16)), ParamInvalidError),
    "num_out_too_big": (dict(num_out_tokens=13), ParamInvalidError),
    "probs_out_2d": (dict(permute_probs_out=np.zeros((6, 1), np.float16)), InnerNullptrError),
    "sorted_len": (dict(sorted_indices_out=np.zeros(7, np.int32)), InnerNullptrError),
    "tokens_rows_mismatch": (dict(tokens=np.zeros((5, 8), np.float16)), TilingError),
}


@pytest.mark.parametrize("case", list(PAD_STATUS_CASES))
def test_pad_status_codes(case):
    over, err = PAD_STATUS_CASES[case]
    a = make_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp16", drop_and_pad=True, seed=1)
    outs = allocate_outputs(a["tokens"], a["routing_map"], a["probs"], 7, True)       # 7 -> 6 rows
    args = dict(tokens=a["tokens"], routing_map=a["routing_map"], probs=a["probs"], num_out_tokens=7,
                drop_and_pad=True, permute_tokens_out=outs[0], permute_probs_out=outs[1], sorted_indices_out=outs[2])
    args.update(over)
    with pytest.raises(err) as e:
        get_workspace_size(**args)
    assert e.value.status == STATUS[err]


def test_pad_tiling_sees_the_l0_rounded_num_out_tokens():
    # the l0 op rounds numOutTokens 11 down to 8 (a multiple of E = 4) and tiles with it: topK = 8 div 3 = 2
    x = np.ones((3, 16), np.float16)
    rm = np.ones((3, 4), bool)
    outs = allocate_outputs(x, rm, None, 11, True)
    assert outs[0].shape == (8, 16)
    _, ex = get_workspace_size(x, rm, None, 11, True, *outs)
    assert (ex.tiling.fields["top_k"], ex.tiling.fields["capacity"]) == (2, 2)


@pytest.mark.parametrize("seed", range(3))
def test_pad_fuzzed_routing_maps_never_crash(seed):
    rng = np.random.default_rng(100 + seed)
    n, e = int(rng.integers(1, 9)), int(rng.integers(1, 6))
    rm = rng.integers(-2, 3, size=(n, e)).astype(np.int8)
    x = rng.standard_normal((n, 8)).astype(np.float16)
    probs = rng.standard_normal((n, e)).astype(np.float16)
    try:
        pt, pp, si = moe_token_permute_with_routing_map(x, rm, probs, int(rng.integers(0, n * e + 1)), True)
        assert si.size == 0 or (si.min() >= 0 and si.max() < n)
    except (AclnnError, SimulatorError):
        pass


# --- round trip ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt,k", [("bf16", 2)], ids=["bf16_k2"])     # one dtype: the unpermute compiles per dtype
def test_round_trip_with_unpermute(dt, k):
    """permute then unpermute (no probs) gives every token summed over its topK copies: K * tokens."""
    unpermute = pytest.importorskip("ops.unpermute_with_routing_map")
    a = make_inputs(6, 16, 4, topk=k, dtype=dt, seed=7)
    pt, _, si = moe_token_permute_with_routing_map(a["tokens"], a["routing_map"], None)
    out = unpermute.moe_token_unpermute_with_routing_map(pt, si, a["routing_map"], None, False, (6, 16))[0]
    want = (a["tokens"].astype(np.float64) * k).astype(a["tokens"].dtype)      # exact: K x a small-mantissa value
    assert_bits_equal(out, want)
