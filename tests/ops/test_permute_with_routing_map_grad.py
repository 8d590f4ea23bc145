"""MoeTokenPermuteWithRoutingMapGrad end to end: bit-exact against the independent goldens over modes, dtypes,
routing-map types, topK 1..512, capacities, -1 slots, hidden splits, core splits and the three profiles; the
composite's steps in the aclnn's order; the deterministic switch; every status of the checks; the adjoint
identity with the forward permute; bad indices and routing maps never crash."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import SimulatorError
from ops.permute_with_routing_map_grad import allocate_outputs, get_workspace_size, run
from ops.permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad as pwrm_grad
from ops.permute_with_routing_map_grad.examples import make_inputs
from ops.permute_with_routing_map_grad.golden import forward_permute, golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.status import AclnnError

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)


def _call(args, soc="ascend910b", deterministic=False):
    return pwrm_grad(args["permuted_token_output_grad"], args["permuted_probs_output_grad"], args["sorted_indices"],
                     args["routing_map"], args["num_experts"], args["tokens_num"], args["drop_and_pad"], soc=soc,
                     deterministic=deterministic)


def _check(args, **kw):
    tokens_grad, probs_grad = _call(args, **kw)
    want_tokens, want_probs = golden(**args)
    assert_bits_equal(tokens_grad, want_tokens)
    if want_probs is None:
        assert probs_grad is None
    else:
        assert_bits_equal(probs_grad, want_probs)
    return tokens_grad, probs_grad


# id: make_inputs arguments (+ "soc")
CASES = {
    "nonpad-bf16-probs-bool": dict(tokens=13, hidden=40, experts=6, topk=3),
    "nonpad-fp16-int8map-minus1": dict(tokens=13, hidden=40, experts=6, topk=3, dtype="fp16", routing_map_dtype="int8",
                                       full_topk=False),
    "nonpad-fp32-noprobs": dict(tokens=9, hidden=24, experts=4, topk=2, dtype="fp32", with_probs=False),
    "nonpad-bf16-fp32probs-minus1": dict(tokens=11, hidden=33, experts=5, topk=4, probs_dtype="fp32",
                                         full_topk=False),
    "nonpad-topk1-910_93": dict(tokens=7, hidden=16, experts=3, topk=1, soc="ascend910_93"),
    "nonpad-topk512": dict(tokens=2, hidden=8, experts=512, topk=512, dtype="fp32"),
    "nonpad-fp16-950": dict(tokens=10, hidden=48, experts=5, topk=2, dtype="fp16", soc="ascend950"),
    "nonpad-bf16-fp32probs-int8map-950": dict(tokens=12, hidden=24, experts=7, topk=3, probs_dtype="fp32",
                                              routing_map_dtype="int8", full_topk=False, soc="ascend950"),
    # 1200 tokens x 8 experts: MoeMaskedScatter's 9600 mask bytes over ceil(9600 / 1024) = 10 cores
    "nonpad-bf16-multicore-scatter-950": dict(tokens=1200, hidden=8, experts=8, topk=2, soc="ascend950"),
    "pad-bf16-probs": dict(tokens=10, hidden=40, experts=4, topk=2, drop_and_pad=True),
    "pad-fp16-int8map-capacity1": dict(tokens=10, hidden=20, experts=4, capacity=1, dtype="fp16", drop_and_pad=True,
                                       routing_map_dtype="int8"),
    "pad-fp32-capacity-all-tokens": dict(tokens=6, hidden=16, experts=3, capacity=6, dtype="fp32", drop_and_pad=True),
    "pad-bf16-fp32probs-950": dict(tokens=9, hidden=24, experts=5, capacity=3, probs_dtype="fp32", drop_and_pad=True,
                                   soc="ascend950"),
    "pad-bf16-noprobs-910_93": dict(tokens=8, hidden=16, experts=3, capacity=4, drop_and_pad=True, with_probs=False,
                                    soc="ascend910_93"),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_golden_bit_for_bit(case):
    spec = dict(CASES[case])
    soc = spec.pop("soc", "ascend910b")
    _check(make_inputs(**spec, seed=len(case)), soc=soc)


# custom profiles: (make_inputs arguments, get_soc overrides, the tiling figures the case must reach)
SPLITS = {
    "hidden-split-bf16": (dict(tokens=5, hidden=1300, experts=4, topk=3), dict(aiv_num=2, ub_size=15376),
                          dict(hidden_splited_length=512, hidden_splited_num=2, hidden_splited_remain=276)),
    "uneven-cores": (dict(tokens=37, hidden=32, experts=6, topk=2, full_topk=False), dict(aiv_num=8),
                     dict(tokens_core_length=4, tokens_core_remain=5)),
    "token-chunks-fp32": (dict(tokens=41, hidden=40, experts=100, topk=80, dtype="fp32", with_probs=False),
                          dict(aiv_num=2, ub_size=13776), dict(tokens_splited_length=15, tokens_splited_num=1,
                                                                            tokens_splited_remain=5)),
    "pad-multi-core-uneven": (dict(tokens=9, hidden=16, experts=3, capacity=5, drop_and_pad=True), dict(aiv_num=4),
                              dict(single_core_len=3, last_core_len=6)),
}


@pytest.mark.parametrize("case", SPLITS)
def test_splits_over_hidden_tokens_and_cores(case):
    spec, overrides, figures = SPLITS[case]
    soc = get_soc("ascend910b", **overrides)
    args = make_inputs(**spec, seed=3)
    tokens_grad, probs_grad = allocate_outputs(args["permuted_token_output_grad"], args["permuted_probs_output_grad"],
                                               args["num_experts"], args["tokens_num"])
    _, executor = get_workspace_size(*args.values(), tokens_grad, probs_grad, soc=soc)
    assert {k: executor.tiling.fields[k] for k in figures} == figures
    _check(args, soc=soc)


@pytest.mark.parametrize("dtype,deterministic,index_add", [
    ("fp32", False, "l0op::MoeInplaceIndexAddAiCore"),
    ("fp32", True, "l0op::MoeInplaceIndexAddWithSorted"),
    ("bf16", False, "l0op::MoeInplaceIndexAddWithSorted"),
], ids=["fp32-default-aicore", "fp32-deterministic-sorted", "bf16-sorted"])
def test_pad_steps_follow_the_aclnn_and_the_deterministic_switch(dtype, deterministic, index_add):
    args = make_inputs(8, 16, 3, capacity=4, dtype=dtype, drop_and_pad=True, seed=5)
    outs = allocate_outputs(args["permuted_token_output_grad"], args["permuted_probs_output_grad"], 3, 8)
    size, executor = get_workspace_size(*args.values(), *outs, deterministic=deterministic)
    run(np.empty(size, np.uint8), size, executor)
    assert [s.name for s in executor.report.steps] == [
        "l0op::ZerosLike", "l0op::ZerosLike", "l0op::MoeTokenPermuteWithRoutingMapGrad", "l0op::ViewCopy",
        "l0op::Sort" if index_add.endswith("Sorted") else index_add, *([index_add] if index_add.endswith("Sorted")
                                                                       else []), "l0op::ViewCopy"]
    assert executor.report.main.tiling_key == 1000
    want = golden(**args)
    assert_bits_equal(outs[0], want[0])
    assert_bits_equal(outs[1], want[1])


# the scatter: CANN's MaskedScatter (a host step) on 910B; MoeMaskedScatter's arch35 kernel on 950, whose workspace
# (16 MiB + (cores used + E * N) int32 counts) is the largest of the chain's
# (l0op::Cast of the map to bool is a step for an int8 map only: CANN's l0 Cast returns a bool map unchanged)
@pytest.mark.parametrize("map_dtype", ["bool", "int8"])
@pytest.mark.parametrize("soc,scatter,size", [
    ("ascend910b", ("l0op::MaskedScatter", "host"), 16 * 1024 * 1024),
    ("ascend950", ("l0op::MoeMaskedScatter", "kernel"), 16 * 1024 * 1024 + (1 + 4 * 6) * 4),
], ids=["910b-host-masked-scatter", "950-moe-masked-scatter-kernel"])
def test_non_pad_steps_in_aclnn_order(soc, scatter, size, map_dtype):
    args = make_inputs(6, 16, 4, topk=2, seed=2, routing_map_dtype=map_dtype)
    outs = allocate_outputs(args["permuted_token_output_grad"], args["permuted_probs_output_grad"], 4, 6)
    got_size, executor = get_workspace_size(*args.values(), *outs, soc=soc)
    assert got_size == size
    run(np.empty(size, np.uint8), size, executor)
    assert [(s.name, s.kind) for s in executor.report.steps] == [
        ("l0op::ZerosLike", "host"), ("l0op::ZerosLike", "host"), ("l0op::MoeTokenPermuteWithRoutingMapGrad", "kernel"),
        ("l0op::ViewCopy", "host"), *([("l0op::Cast", "host")] if map_dtype == "int8" else []),
        ("l0op::Transpose", "host"), ("l0op::Transpose", "host"), scatter, ("l0op::Transpose", "host"),
        ("l0op::ViewCopy", "host")]
    assert executor.report.main.tiling_key == 0
    want = golden(**args)
    assert_bits_equal(outs[0], want[0])
    assert_bits_equal(outs[1], want[1])


# --- the adjoint identity: <F x, g> = <x, B g> ---------------------------------------------------------------
@pytest.mark.parametrize("pad", [False, True], ids=["nonpad", "pad"])
def test_gradient_is_the_adjoint_of_the_forward(pad):
    rng = np.random.default_rng(11)
    n, h, e = 12, 16, 5
    spec = make_inputs(n, h, e, topk=3, capacity=4, dtype="fp32", drop_and_pad=pad, full_topk=False, seed=4)
    routing = spec["routing_map"]
    m = spec["permuted_token_output_grad"].shape[0]
    x = rng.standard_normal((n, h))
    p = rng.standard_normal((n, e))
    fx, fp, sorted_indices = forward_permute(x, routing, p, m, pad)
    assert np.array_equal(sorted_indices, spec["sorted_indices"])
    gt = rng.standard_normal((m, h)).astype(np.float32)
    gp = rng.standard_normal(m).astype(np.float32)
    if not pad:          # rows beyond the routed ones do not exist in the forward: their gradient is never read
        routed = int(routing.sum())
        gt[routed:] = 0
        gp[routed:] = 0
    bt, bp = pwrm_grad(gt, gp, sorted_indices, routing, e, n, pad)
    assert np.isclose(np.vdot(fx, gt.astype(np.float64)), np.vdot(x, bt.astype(np.float64)), rtol=1e-5)
    assert np.isclose(np.vdot(fp, gp.astype(np.float64)), np.vdot(p, bp.astype(np.float64)), rtol=1e-6)


@pytest.mark.slow   # compiles the forward's kernels (several minutes cold); their own tests cover them
def test_numpy_forward_agrees_with_the_simulated_forward():
    forward = pytest.importorskip("ops.permute_with_routing_map")
    args = make_inputs(10, 8, 4, topk=2, dtype="fp32", seed=8)
    x = np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32)
    probs = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    permuted, permuted_probs, sorted_indices = forward.moe_token_permute_with_routing_map(x, args["routing_map"], probs)
    want = forward_permute(x, args["routing_map"], probs, 20, False)
    assert np.array_equal(sorted_indices, want[2])
    assert np.array_equal(permuted, want[0].astype(np.float32)) and np.array_equal(permuted_probs, want[1])


# --- checks and their status codes ----------------------------------------------------------------------------
def _base(pad=False, dtype="bf16", probs_dtype=None):
    args = make_inputs(6, 16, 4, topk=2, capacity=3, dtype=dtype, probs_dtype=probs_dtype, drop_and_pad=pad, seed=9)
    outs = allocate_outputs(args["permuted_token_output_grad"], args["permuted_probs_output_grad"], 4, 6)
    return {**args, "tokens_grad_out": outs[0], "probs_grad_out": outs[1]}


def _with(**changes):
    args = _base(changes.pop("pad", False))
    args.update(changes)
    return args


BAD = {
    # id: (arguments, status, message fragment)
    "num-experts-zero": (_with(num_experts=0), 161002, "num_experts"),
    "tokens-num-negative": (_with(tokens_num=-1), 161002, "tokens_num"),
    "grad-missing": (_with(permuted_token_output_grad=None), 161001, "permuted_token_output_grad"),
    "indices-missing": (_with(sorted_indices=None), 161001, "sorted_indices"),
    "tokens-grad-out-missing": (_with(tokens_grad_out=None), 161001, "tokens_grad_out"),
    "probs-without-routing-map": (_with(routing_map=None), 161001, "routing_map"),
    "grad-int32": (_with(permuted_token_output_grad=np.zeros((12, 16), np.int32)), 161002, "one of"),
    "out-dtype-differs": (_with(tokens_grad_out=np.zeros((6, 16), np.float16)), 161002, "tokens_grad_out dtype"),
    "probs-int8": (_with(permuted_probs_output_grad=np.zeros(12, np.int8)), 161002, "permuted_probs_output_grad"),
    "probs-out-dtype-differs": (_with(probs_grad_out=np.zeros((6, 4), np.float32)), 161002, "probs_grad_out dtype"),
    "probs-fp16-with-bf16-grad": (_with(permuted_probs_output_grad=np.zeros(12, np.float16),
                                        probs_grad_out=np.zeros((6, 4), np.float16)), 161002, "or be float32"),
    "routing-map-int32": (_with(routing_map=np.zeros((6, 4), np.int32)), 161002, "bool or int8"),
    "indices-int64": (_with(sorted_indices=np.zeros(12, np.int64)), 161002, "int32"),
    "grad-3d": (_with(permuted_token_output_grad=np.zeros((12, 16, 1), BF16)), 161002, "2-D"),
    "routing-map-1d": (_with(routing_map=np.zeros(24, np.bool_)), 161002, "2-D"),
    "probs-2d": (_with(permuted_probs_output_grad=np.zeros((12, 1), BF16)), 161002, "1-D"),
    "indices-short": (_with(sorted_indices=np.zeros(11, np.int32)), 161002, "sorted_indices must have shape"),
    "tokens-grad-out-shape": (_with(tokens_grad_out=np.zeros((6, 15), BF16)), 161002, "tokens_grad_out must"),
    "probs-grad-out-shape": (_with(probs_grad_out=np.zeros((6, 5), BF16)), 161002, "probs_grad_out must"),
    "routing-map-shape": (_with(routing_map=np.ones((6, 5), np.bool_)), 161002, "routing_map must"),
    "rows-over-tokens": (_with(tokens_num=5), 161002, "write past"),
    "too-many-routed-pairs": (_with(routing_map=np.ones((6, 4), np.bool_)), 161002, "MaskedScatter"),
    "topk-above-512": (_with(permuted_token_output_grad=np.zeros((513 * 6, 2), BF16),
                             permuted_probs_output_grad=None, sorted_indices=np.zeros(513 * 6, np.int32),
                             tokens_grad_out=np.zeros((6, 2), BF16), probs_grad_out=None), 161002, "topK 513"),
}


@pytest.mark.parametrize("case", BAD)
def test_each_check_gives_its_status(case):
    args, status, fragment = BAD[case]
    with pytest.raises(AclnnError, match=fragment) as info:
        get_workspace_size(*args.values())
    assert info.value.status == status


def test_fp32_probs_with_fp16_grad_is_refused():
    args = _base(dtype="fp16", probs_dtype="fp32")
    with pytest.raises(AclnnError, match="float32 or bfloat16") as info:
        get_workspace_size(*args.values())
    assert info.value.status == 161002


@pytest.mark.parametrize("pad", [False, True], ids=["nonpad", "pad"])
def test_empty_gradient_succeeds_with_no_workspace(pad):
    args = _with(pad=pad, permuted_token_output_grad=np.zeros((0, 16), BF16))
    size, executor = get_workspace_size(*args.values())
    assert size == 0
    run(None, 0, executor)
    assert not executor.report.steps


# --- bad data never crashes --------------------------------------------------------------------------------
def _fuzzed_indices(rng, m, pad):
    s = rng.integers(-3, 3 * m, size=m).astype(np.int32)
    s[rng.integers(0, m)] = np.iinfo(np.int32).max if pad else np.iinfo(np.int32).min
    return s


@pytest.mark.parametrize("pad", [False, True], ids=["nonpad", "pad"])
@pytest.mark.parametrize("seed", range(3))
def test_fuzzed_indices_end_in_an_error_or_the_skip_rule(pad, seed):
    rng = np.random.default_rng(seed)
    args = _base(pad)
    m = args["sorted_indices"].size
    args["sorted_indices"] = _fuzzed_indices(rng, m, pad)
    try:
        get_workspace_size(*args.values())[1].run(np.empty(16 * 1024 * 1024, np.uint8))
    except (AclnnError, SimulatorError):
        assert pad            # non-pad kernel G skips every index outside [0, M)
        return
    assert not pad
    want = golden(*(args[k] for k in list(args)[:7]))
    assert_bits_equal(args["tokens_grad_out"], want[0])
