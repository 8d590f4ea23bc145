"""MoeTokenUnpermuteWithRoutingMapGrad end to end: bit-exact against the golden over a sweep of modes,
dtypes, routing-map dtypes, chip profiles and edge shapes; every documented error with its status;
UB overflow; fuzzed bad indices never crash."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ops
from ascend_sim import SimulatorError, UBOverflowError
from ops.unpermute_with_routing_map_grad.examples import make_inputs
from ops.unpermute_with_routing_map_grad.golden import golden, reduce_sum_rows
from tiling import get_soc, moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad

aclnn = ops.aclnn
BF16, F16, F32 = ml_dtypes.bfloat16, np.float16, np.float32

MODES = {  # id: (drop_and_pad, with_probs)
    "noprobs": (False, False),
    "noprobs-pad": (True, False),
    "probs": (False, True),
    "probs-pad": (True, True),
}
DTYPES = {"fp32": (F32, F32), "fp16": (F16, F16), "bf16": (BF16, BF16), "bf16-fp32probs": (BF16, F32)}
SHAPES = {  # id: (tokens, hidden, experts, topk, capacity, extra)
    "basic": (37, 300, 8, 3, 5, {}),
    "hidden1": (20, 1, 6, 2, 4, {}),
    "hidden17": (20, 17, 6, 2, 4, {}),
    "topk1": (33, 64, 5, 1, 6, {}),
    "topk-eq-experts": (16, 48, 4, 4, 16, {}),
    "experts300": (12, 40, 300, 4, 1, {}),
    "capacity-eq-tokens": (9, 40, 3, 2, 9, {"pad_only": True}),
    "minus-one-slots": (40, 96, 8, 4, 5, {"full_topk": False, "no_pad_only": True}),
    "fewer-tokens-than-cores": (5, 130, 4, 2, 3, {}),
    "split-hidden-small-ub": (6, 5000, 4, 2, 3, {"ub_size": 16384}),
    "long-rows": (4, 5000, 4, 2, 2, {}),
}
PROFILES = ("ascend910b", "ascend910_93", "ascend950")


def _cases():
    for (mode, (pad, probs)), (dt, (g_dt, p_dt)), (shape, spec), profile in itertools.product(
            MODES.items(), DTYPES.items(), SHAPES.items(), PROFILES):
        extra = spec[5]
        if g_dt is not p_dt and not probs:
            continue
        if (extra.get("pad_only") and not pad) or (extra.get("no_pad_only") and pad):
            continue
        for rm in (("bool", "int8") if probs else ("bool",)):
            yield pytest.param(mode, dt, shape, profile, rm, id=f"{mode}-{dt}-{shape}-{profile}-rm_{rm}")


def _make(mode, dt, shape, rm, seed=0):
    pad, probs = MODES[mode]
    g_dt, p_dt = DTYPES[dt]
    tokens, hidden, experts, topk, capacity, extra = SHAPES[shape]
    return make_inputs(tokens, hidden, experts, topk=topk, capacity=capacity, dtype=g_dt, probs_dtype=p_dt,
                       drop_and_pad=pad, with_probs=probs, routing_map_dtype=rm,
                       full_topk=extra.get("full_topk", True), seed=seed)


def _soc(profile, shape):
    return get_soc(profile, ub_size=SHAPES[shape][5].get("ub_size"))


def _bits(a):
    return a.view(np.uint8)


@pytest.mark.parametrize("mode,dt,shape,profile,rm", list(_cases()))
def test_matches_golden_bit_for_bit(mode, dt, shape, profile, rm):
    args = _make(mode, dt, shape, rm)
    soc = _soc(profile, shape)
    result = tiling_uwrm_grad(*args.values(), soc=soc)
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    want_grad, want_probs_grad = golden(*args.values(), hidden_piece=result.fields["hidden_size_align"])
    where = f"{mode} {dt} {shape} {profile} routing_map {rm} (tilingKey {result.tiling_key})"
    assert grad.dtype == args["unpermuted_tokens_grad"].dtype and grad.shape == want_grad.shape, where
    bad = np.nonzero(_bits(grad) != _bits(want_grad))[0]
    assert bad.size == 0, f"{where}: permuted_tokens_grad differs first at byte {bad[0]}"
    if MODES[mode][1]:
        assert probs_grad.dtype == args["probs"].dtype
        bad = np.nonzero(_bits(probs_grad) != _bits(want_probs_grad))[0]
        assert bad.size == 0, f"{where}: probs_grad differs first at byte {bad[0]}"
    else:
        assert probs_grad is None


def test_sweep_has_at_least_200_cases():
    assert len(list(_cases())) >= 200


@pytest.mark.parametrize("length", [1, 7, 64, 65, 100, 511, 512, 513, 1000, 4096, 4097, 8192, 8193, 20000])
def test_golden_tree_sum_is_a_sum(length, rng):
    """The golden's tree order is an fp32 sum: close to the float64 sum, and exact for integers."""
    x = rng.standard_normal((3, length)).astype(np.float32)
    np.testing.assert_allclose(reduce_sum_rows(x), x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-3)
    ints = rng.integers(-50, 50, (3, length)).astype(np.float32)
    assert np.array_equal(reduce_sum_rows(ints), ints.sum(axis=1))


def test_golden_against_a_direct_loop(rng):
    """The vectorised golden agrees with the formula written as a plain loop (float64 sums, rounded)."""
    args = make_inputs(9, 33, 5, topk=3, dtype=F32, with_probs=True, full_topk=False, seed=3)
    g, o, _, rm, p, pr, _ = args.values()
    grad, probs_grad = golden(*args.values())
    k = 3
    for t in range(9):
        experts = np.nonzero(rm[t])[0]
        for r, e in enumerate(experts):
            row = o[t * k + r]
            assert np.array_equal(grad[row], (g[t] * pr[t, e]).astype(F32))
            assert probs_grad[t, e] == pytest.approx(float(np.dot(p[row].astype(np.float64), g[t])), rel=1e-5)
        others = np.setdiff1d(np.arange(5), experts)
        assert not probs_grad[t, others].any()


def _outputs(args):
    g = args["unpermuted_tokens_grad"]
    out = np.zeros((args["out_index"].size, g.shape[1]), dtype=g.dtype)
    pg = None if args["probs"] is None else np.zeros(args["probs"].shape, dtype=args["probs"].dtype)
    return out, pg


def test_two_phase_api_reports_tiling_and_run():
    args = make_inputs(64, 256, 16, topk=4, dtype=BF16, with_probs=True)
    out, pg = _outputs(args)
    size, executor = aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(*args.values(), None, out,
                                                                                        pg, soc="ascend910b")
    assert size == 16 * 1024 * 1024 and executor.tiling.tiling_key == 1 and executor.report is None
    aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor)
    rep = executor.report
    assert rep.block_dim == 48 and rep.tiling_key == 1 and len(rep.cores) == 48
    t = rep.total
    n, m, h, e, b = 64, 64 * 4, 256, 16, 2
    # MTE2: each token's G row once, each slot's permuted-token row, each token's routing-map row
    assert t.mte2_bytes == n * h * b + m * h * b + n * e
    # MTE3: each slot's gradient row, each token's probs-grad row, and InitOutput zeroing probsGrad
    assert t.mte3_bytes == m * h * b + n * e * b + n * e * b
    assert t.vec_elem_ops > 0 and t.scalar_gm_reads >= 64 * 4 and t.sync_all == 48
    assert 0 < t.ub_hwm_bytes <= rep.ub_plan_bytes <= 196608


def test_non_contiguous_inputs_are_accepted():
    args = make_inputs(20, 64, 6, topk=2, dtype=F16, with_probs=True, seed=5)
    wide = np.zeros((20, 128), dtype=F16)
    wide[:, ::2] = args["unpermuted_tokens_grad"]
    strided = dict(args, unpermuted_tokens_grad=wide[:, ::2])
    a = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    b = ops.moe_token_unpermute_with_routing_map_grad(*strided.values())
    assert np.array_equal(_bits(a[0]), _bits(b[0])) and np.array_equal(_bits(a[1]), _bits(b[1]))


def test_results_do_not_depend_on_thread_count(monkeypatch):
    args = make_inputs(100, 200, 8, topk=3, dtype=BF16, with_probs=True, seed=9)
    monkeypatch.setenv("ASCEND_SIM_THREADS", "1")
    a = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    monkeypatch.setenv("ASCEND_SIM_THREADS", "2")
    b = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert np.array_equal(_bits(a[0]), _bits(b[0])) and np.array_equal(_bits(a[1]), _bits(b[1]))


# --- errors ----------------------------------------------------------------------------------------
def _call(args, out=None, pg=None, **kw):
    if out is None:
        out = _outputs(args)[0]
    if pg is None and args["probs"] is not None:
        pg = np.zeros(args["probs"].shape, dtype=args["probs"].dtype)
    return aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
        *args.values(), kw.pop("restore_shape", None), out, pg, **kw)


def _args(**changes):
    args = make_inputs(8, 32, 4, topk=2, dtype=BF16, with_probs=True, seed=2)
    args.update(changes)
    return args


ERRORS = {
    # id: (callable, status)
    "null-grad": (lambda: _call(_args(unpermuted_tokens_grad=None), out=np.zeros((16, 32), BF16)), 161001),
    "null-out-index": (lambda: _call(_args(out_index=None), out=np.zeros((16, 32), BF16)), 161001),
    "null-permute-token-id": (lambda: _call(_args(permute_token_id=None)), 161001),
    "null-output": (lambda: aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
        *_args().values(), None, None, None), 161001),
    "probs-without-probs-grad-output": (lambda: aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
        *_args().values(), None, np.zeros((16, 32), BF16), None), 161001),
    "int8-grads": (lambda: _call(_args(unpermuted_tokens_grad=np.zeros((8, 32), np.int8))), 161002),
    "int64-out-index": (lambda: _call(_args(out_index=np.zeros(16, np.int64))), 161002),
    "fp16-grads-fp32-probs": (lambda: _call(make_inputs(8, 32, 4, topk=2, dtype=F16, probs_dtype=F32)), 161002),
    "float-routing-map": (lambda: _call(_args(routing_map=np.zeros((8, 4), F32))), 161002),
    "output-dtype-mismatch": (lambda: _call(_args(), out=np.zeros((16, 32), F16)), 161002),
    "non-contiguous-output": (lambda: _call(_args(), out=np.zeros((16, 64), BF16)[:, ::2]), 161002),
    "topK-over-512": (lambda: _call(make_inputs(1, 8, 513, topk=513, dtype=BF16)), 561002),
    "topK-over-experts": (lambda: _call(_args(routing_map=np.zeros((8, 1), bool), probs=np.zeros((8, 1), BF16)),
                                        pg=np.zeros((8, 1), BF16)), 561002),
    "capacity-over-tokens": (lambda: _call(make_inputs(4, 8, 2, capacity=4, dtype=BF16, drop_and_pad=True)
                                           | {"permute_token_id": np.zeros(10, np.int32),
                                              "out_index": np.zeros(10, np.int32),
                                              "permuted_tokens": np.zeros((10, 8), BF16)}), 561002),
    "grads-not-2d": (lambda: _call(_args(unpermuted_tokens_grad=np.zeros((8, 32, 1), BF16)),
                                   out=np.zeros((16, 32), BF16)), 561002),
    "wrong-output-shape": (lambda: _call(_args(), out=np.zeros((15, 32), BF16)), 561002),
    "permuted-tokens-wrong-rows": (lambda: _call(_args(permuted_tokens=np.zeros((10, 32), BF16))), 561002),
    "routing-map-shape-differs-from-probs": (lambda: _call(_args(routing_map=np.zeros((8, 5), bool))), 561002),
    "probs-grad-output-wrong-shape": (lambda: _call(_args(), pg=np.zeros((8, 5), BF16)), 561002),
}


@pytest.mark.parametrize("case", ERRORS)
def test_documented_errors_give_their_status(case):
    fn, status = ERRORS[case]
    with pytest.raises(ops.AclnnError) as info:
        fn()
    assert info.value.status == status, str(info.value)
    assert str(status) in str(info.value)


def test_phase_two_checks_workspace_and_executor():
    args = _args()
    size, executor = _call(args)
    with pytest.raises(ops.ParamNullptrError):
        aclnn.moe_token_unpermute_with_routing_map_grad(None, size, executor)
    with pytest.raises(ops.ParamInvalidError):
        aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size - 1, np.uint8), size - 1, executor)
    with pytest.raises(ops.ParamNullptrError):
        aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, None)


def test_top_k_above_256_with_wide_rows_overflows_the_ub():
    """With topK > 256 the kernel reserves indicesReserveNum = topK slots, more than the tiling budgeted:
    at the widest hidden piece the InitBuffer plan exceeds the 910B's UB before any byte moves."""
    args = make_inputs(1, 8000, 512, topk=512, dtype=BF16, seed=4)
    size, executor = _call(args)
    assert executor.tiling.fields["indices_reserve_num"] == 512 and not executor.tiling.ub_fits
    with pytest.raises(UBOverflowError) as info:
        aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor)
    assert info.value.op == "MoeTokenUnpermuteWithRoutingMapGrad" and info.value.tiling_key == 1
    assert "tmpBufferProbGradReduceSum" in info.value.detail


# --- fuzzing: bad index values end in an error, never in a crash --------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(sorted(MODES)), which=st.sampled_from(["out_index", "permute_token_id"]),
       slot=st.integers(0, 11), value=st.one_of(st.integers(-2**31, -2), st.integers(-1, 40),
                                                st.integers(10**6, 2**31 - 1)))
def test_fuzzed_bad_indices_never_crash(mode, which, slot, value):
    pad, probs = MODES[mode]
    args = make_inputs(6, 24, 4, topk=2, capacity=3, dtype=BF16, drop_and_pad=pad, with_probs=probs, seed=11)
    bad = args[which].copy()
    bad[slot % bad.size] = value
    args[which] = bad
    try:
        ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc="ascend910b")
    except (ops.AclnnError, SimulatorError):
        pass
