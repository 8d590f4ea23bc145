"""MoeTokenUnpermuteWithRoutingMapGrad end to end: bit-exact against the golden over a sweep of modes,
dtypes, routing-map dtypes, chip profiles and edge shapes (including core-count / UB overrides that reach
multi-batch, topK > 256 and many-piece paths); inputs at the edges of the index conventions; every
documented error with its status; UB overflows; fuzzed bad indices fault exactly where the kernel
dereferences them, otherwise match the golden, and never change an input."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import ops
from ascend_sim import OutOfBoundsError, UBOverflowError
from ops._framework import recorded_runs
from ops.unpermute_with_routing_map_grad.examples import make_inputs
from ops.unpermute_with_routing_map_grad.golden import golden, reduce_sum_rows
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad
from tiling.common import ceil_div
from tiling.status import AclnnError

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
    # deep kernel paths, reached through core-count / UB overrides; only the modes that have them
    # keys 1/101: 900 slots on one core = 4 batches of indicesReserveNum 255 (the last one 135 slots)
    "multi-batch-300tok-k3-1core": (300, 40, 8, 3, None, {"aiv_num": 1, "full_topk": False, "modes": ("probs",)}),
    # keys 1/101 with topK > 256: indicesReserveNum = topK, 512-entry scalar arrays used in full
    "topk300-5tok-2core": (5, 40, 320, 300, None, {"aiv_num": 2, "full_topk": False, "modes": ("probs",)}),
    "topk512-3tok-2core": (3, 40, 512, 512, None, {"aiv_num": 2, "full_topk": False, "modes": ("probs",)}),
    # keys 11/111: ReduceSumFunc over the per-piece partial sums in its > 64 and > 512 tiers
    "pad-100-pieces-ub4k": (6, 8000, 3, None, 2, {"aiv_num": 2, "ub_size": 4096, "modes": ("probs-pad",)}),
    "pad-563-pieces-ub4k": (4, 45000, 2, None, 2, {"aiv_num": 2, "ub_size": 4096, "modes": ("probs-pad",),
                                                   "dtypes": ("fp16", "bf16", "bf16-fp32probs")}),
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
        if mode not in extra.get("modes", MODES) or dt not in extra.get("dtypes", DTYPES):
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
    extra = SHAPES[shape][5]
    return get_soc(profile, ub_size=extra.get("ub_size"), aiv_num=extra.get("aiv_num"))


@pytest.mark.parametrize("mode,dt,shape,profile,rm", list(_cases()))
def test_matches_golden_bit_for_bit(mode, dt, shape, profile, rm):
    args = _make(mode, dt, shape, rm)
    soc = _soc(profile, shape)
    result = tiling_uwrm_grad(*args.values(), soc=soc)
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    want_grad, want_probs_grad = golden(*args.values(), hidden_piece=result.fields["hidden_size_align"])
    where = f"{mode} {dt} {shape} {profile} routing_map {rm} (tilingKey {result.tiling_key})"
    assert grad.dtype == args["unpermuted_tokens_grad"].dtype and grad.shape == want_grad.shape, where
    assert_bits_equal(grad, want_grad, f"{where}: permuted_tokens_grad")
    if MODES[mode][1]:
        assert probs_grad.dtype == args["probs"].dtype
        assert_bits_equal(probs_grad, want_probs_grad, f"{where}: probs_grad")
    else:
        assert probs_grad is None


def test_sweep_has_at_least_200_cases():
    assert len(list(_cases())) >= 200


def _deep_path_reached(shape, f):
    """What each deep-path shape must make the tiling do, or the sweep silently stops testing that path."""
    if shape.startswith("multi-batch"):
        batches = ceil_div(f["row_id_map_each_core"], f["indices_reserve_num"])
        return batches >= 3 and f["row_id_map_each_core"] % f["indices_reserve_num"] != 0
    if shape.startswith("topk"):
        return f["top_k"] > 256 and f["indices_reserve_num"] == f["top_k"]
    if shape.startswith("pad-100"):
        return 64 < f["hidden_size_loop_times"] <= 512
    if shape.startswith("pad-563"):
        return f["hidden_size_loop_times"] > 512
    return True


def test_sweep_reaches_the_deep_kernel_paths():
    """The override shapes reach: several index batches per core (keys 1/101), topK > 256, and more than
    64 / 512 hidden pieces summed by ReduceSumFunc (keys 11/111) -- on every profile and dtype they run with."""
    seen = set()
    for case in _cases():
        mode, dt, shape, profile, rm = case.values
        if "aiv_num" not in SHAPES[shape][5]:
            continue
        f = tiling_uwrm_grad(*_make(mode, dt, shape, rm).values(), soc=_soc(profile, shape)).fields
        assert _deep_path_reached(shape, f), f"{shape} {dt} {profile}: {f}"
        seen.add(shape)
    assert len(seen) == 5


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


# --- inputs at the edges of the index conventions: the golden covers them and agrees with the kernel ----
def _kernel_and_golden(args, soc):
    soc = get_soc(soc)
    piece = tiling_uwrm_grad(*args.values(), soc=soc).fields["hidden_size_align"]
    got = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    return got, golden(*args.values(), hidden_piece=piece)


EDGE_DTYPES = {"bf16": (BF16, BF16), "bf16-fp32probs": (BF16, F32), "fp32": (F32, F32)}
EDGE_PROFILES = ("ascend910b", "ascend950")


@pytest.mark.parametrize("profile", EDGE_PROFILES)
@pytest.mark.parametrize("dt", EDGE_DTYPES)
def test_probs_slots_past_tokens_times_topk_are_never_read(dt, profile):
    """M = N * topK + 3: the kernel handles rowIdMap = N * topK slots, so the 3 extra slots may hold any
    index (here out of range) and their rows stay 0."""
    g_dt, p_dt = EDGE_DTYPES[dt]
    base = make_inputs(8, 40, 5, topk=2, dtype=g_dt, probs_dtype=p_dt, full_topk=False, seed=21)
    extra_rows = np.random.default_rng(1).uniform(-2, 2, (3, 40)).astype(g_dt)
    args = dict(base, out_index=np.append(base["out_index"], [2**31 - 1, -7, 10**6]).astype(np.int32),
                permute_token_id=np.append(base["permute_token_id"], [99, -1, 5]).astype(np.int32),
                permuted_tokens=np.concatenate([base["permuted_tokens"], extra_rows]))
    (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(args, profile)
    assert_bits_equal(grad, want_grad)
    assert_bits_equal(probs_grad, want_probs_grad)
    # the golden of the extended call is the golden of the first N * topK slots, plus 3 zero rows
    base_grad, base_probs_grad = golden(*base.values())
    assert_bits_equal(want_grad[:16], base_grad)
    assert not want_grad[16:].astype(F32).any()
    assert_bits_equal(want_probs_grad, base_probs_grad)


@pytest.mark.parametrize("profile", EDGE_PROFILES)
def test_probs_with_fewer_slots_than_tokens_gives_zeros(profile):
    """M < N makes topK = 0: no slot is handled, both gradients stay 0 whatever the routing map says."""
    args = make_inputs(8, 24, 4, topk=1, dtype=BF16, seed=22)
    args.update(out_index=np.array([3, 0, 4, 1, 2], np.int32), permute_token_id=np.arange(5, dtype=np.int32),
                permuted_tokens=args["permuted_tokens"][:5])
    (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(args, profile)
    assert_bits_equal(grad, want_grad)
    assert_bits_equal(probs_grad, want_probs_grad)
    assert not grad.astype(F32).any() and not probs_grad.astype(F32).any()


@pytest.mark.parametrize("profile", EDGE_PROFILES)
def test_no_probs_with_fewer_slots_than_tokens_copies_token_0(profile):
    """Without probs, topK = 0 makes every slot's token SafeDiv(r, 0) = 0; the -1 slot is skipped."""
    args = make_inputs(8, 24, 4, topk=1, dtype=F16, with_probs=False, seed=23)
    args.update(out_index=np.array([3, 0, -1, 1, 2], np.int32), permute_token_id=np.arange(5, dtype=np.int32))
    (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(args, profile)
    assert_bits_equal(grad, want_grad)
    assert probs_grad is None and want_probs_grad is None
    g0 = args["unpermuted_tokens_grad"][0]
    for r in (0, 1, 2, 3):
        assert_bits_equal(grad[r], g0, f"row {r}")
    assert not grad[4].any()


@pytest.mark.parametrize("extra_row", [-1, 0], ids=["skipped", "dereferenced"])
def test_no_probs_slot_past_tokens_times_topk(extra_row):
    """Without probs all M slots are handled: slot N * topK reads token N, one past the last. The kernel gets
    there only if out_index does not skip the slot; then it faults and the golden refuses the input."""
    args = make_inputs(8, 24, 4, topk=2, dtype=BF16, with_probs=False, seed=26)
    args.update(out_index=np.append(args["out_index"], extra_row).astype(np.int32),
                permute_token_id=np.append(args["permute_token_id"], 0).astype(np.int32))
    if extra_row < 0:
        (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(args, "ascend910b")
        assert_bits_equal(grad, want_grad)
        assert probs_grad is None and not grad[16].astype(F32).any()
        return
    with pytest.raises(OutOfBoundsError, match="unpermuted_tokens_grad"):
        ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    with pytest.raises(ValueError, match="outside golden domain: token"):
        golden(*args.values())


@pytest.mark.parametrize("mode", MODES)
def test_zero_hidden_size(mode):
    """H = 0: every mode gives an (M, 0) gradient and an all-zero probs gradient -- except that the
    dropAndPad + probs kernel (key 11) would cast one element out of its 0-byte partial-sum buffer
    (hiddenSizeLoopTimesAlign = 0): refused with 561002 before the launch."""
    pad, probs = MODES[mode]
    args = make_inputs(8, 0, 4, topk=2, capacity=2, dtype=BF16, drop_and_pad=pad, with_probs=probs, seed=24)
    want_grad, want_probs_grad = golden(*args.values())
    assert want_grad.shape == (args["out_index"].size, 0)
    assert want_probs_grad is None if not probs else not want_probs_grad.astype(F32).any()
    if pad and probs:
        with recorded_runs() as runs, pytest.raises(AclnnError, match="hidden_size 0") as info:
            ops.moe_token_unpermute_with_routing_map_grad(*args.values())
        assert info.value.status == 561002 and runs == []
        return
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert_bits_equal(grad, want_grad)
    assert_bits_equal(probs_grad, want_probs_grad)


def _pad_inputs_with_spill(g_dt, p_dt, spill_token=None):
    """dropAndPad with 2 experts x capacity 2 plus one slot at row 4 (M = 5, capacity still 2): that slot's
    probs offset is token * 2 + 4 // 2, i.e. expert 0 of the next token."""
    args = make_inputs(6, 40, 2, capacity=2, dtype=g_dt, probs_dtype=p_dt, drop_and_pad=True, seed=25)
    rm = args["routing_map"]
    if spill_token is None:   # a token whose successor does not route to expert 0: its element is free
        spill_token = next(t for t in range(5) if not rm[t + 1, 0])
    row = np.random.default_rng(2).uniform(-2, 2, (1, 40)).astype(g_dt)
    args.update(out_index=np.append(args["out_index"], 4).astype(np.int32),
                permute_token_id=np.append(args["permute_token_id"], spill_token).astype(np.int32),
                permuted_tokens=np.concatenate([args["permuted_tokens"], row]))
    return args, spill_token


@pytest.mark.parametrize("profile", EDGE_PROFILES)
@pytest.mark.parametrize("dt", EDGE_DTYPES)
def test_pad_slots_past_experts_times_capacity_spill_into_the_next_token(dt, profile):
    g_dt, p_dt = EDGE_DTYPES[dt]
    args, t = _pad_inputs_with_spill(g_dt, p_dt)
    (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(args, profile)
    assert_bits_equal(grad, want_grad)
    assert_bits_equal(probs_grad, want_probs_grad)
    # the spilled slot uses (and writes) probs element (t + 1, 0)
    g = args["unpermuted_tokens_grad"][t].astype(np.float64)
    prob = args["probs"][t + 1, 0]
    assert_bits_equal(grad[4], (g.astype(F32) * F32(prob)).astype(g_dt))
    dot = float(np.dot(args["permuted_tokens"][4].astype(np.float64), g))
    assert float(probs_grad[t + 1, 0]) == pytest.approx(dot, rel=2e-2 if p_dt is BF16 else 1e-5, abs=1e-3)


def test_pad_spill_past_the_last_token_is_outside_both():
    """The same spill from the last token points past probs: the kernel faults, the golden refuses."""
    args, _ = _pad_inputs_with_spill(BF16, BF16, spill_token=5)
    with pytest.raises(OutOfBoundsError, match="probs"):
        ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    with pytest.raises(ValueError, match="outside golden domain: probs offset"):
        golden(*args.values())


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


@pytest.mark.parametrize("pad", [False, True], ids=["key1", "key11"])
def test_arch35_kernels_keep_the_membase_event_protocol(pad):
    """The arch35 keys 1/11 differ from membase in Fill/Duplicate and one VToMTE3Sync, which swaps one
    EnQue/DeQue pair for one SetFlag/WaitFlag pair: one core, same input, same event count."""
    args = make_inputs(2, 64, 2, topk=None if pad else 1, capacity=1 if pad else None, dtype=BF16,
                       drop_and_pad=pad, with_probs=True, seed=4)
    events = []
    for soc in ("ascend910b", "ascend950"):
        out, pg = _outputs(args)
        size, executor = aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
            *args.values(), None, out, pg, soc=get_soc(soc, aiv_num=1))
        aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor)
        events.append(executor.report.total.events)
    assert events[0] == events[1] > 0


def test_non_contiguous_inputs_are_accepted():
    args = make_inputs(20, 64, 6, topk=2, dtype=F16, with_probs=True, seed=5)
    wide = np.zeros((20, 128), dtype=F16)
    wide[:, ::2] = args["unpermuted_tokens_grad"]
    strided = dict(args, unpermuted_tokens_grad=wide[:, ::2])
    a = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    b = ops.moe_token_unpermute_with_routing_map_grad(*strided.values())
    assert_bits_equal(a[0], b[0])
    assert_bits_equal(a[1], b[1])


def test_results_do_not_depend_on_thread_count(monkeypatch):
    args = make_inputs(100, 200, 8, topk=3, dtype=BF16, with_probs=True, seed=9)
    monkeypatch.setenv("ASCEND_SIM_THREADS", "1")
    a = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    monkeypatch.setenv("ASCEND_SIM_THREADS", "2")
    b = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert_bits_equal(a[0], b[0])
    assert_bits_equal(a[1], b[1])


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


def test_fp32_probs_with_wide_rows_overflow_the_ub_at_256_reserved_slots():
    """bf16 grads + fp32 probs (key 101): outQueueProbGrad holds 256 fp32 where the tiling budgeted 256 bf16;
    with rows of 8192 the launch fails before any byte moves. With 30 tokens (240 slots) it fits and runs."""
    soc = get_soc("ascend910b", aiv_num=1)
    args = make_inputs(32, 8192, 8, topk=8, dtype=BF16, probs_dtype=F32, seed=6)
    out, pg = _outputs(args)
    size, executor = aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(*args.values(), None, out,
                                                                                        pg, soc=soc)
    assert executor.tiling.tiling_key == 101 and not executor.tiling.ub_fits
    with pytest.raises(UBOverflowError) as info:
        aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor)
    assert info.value.tiling_key == 101 and "outQueueProbGrad" in info.value.detail
    assert info.value.capacity_bytes == soc.ub_size
    assert not pg.any() and not out.astype(F32).any()
    # 30 tokens = 240 slots: the plan fits with 32 bytes to spare and the kernel runs bit-exact
    fits = make_inputs(30, 8192, 8, topk=8, dtype=BF16, probs_dtype=F32, seed=6)
    assert tiling_uwrm_grad(*fits.values(), soc=soc).ub_plan_bytes == soc.ub_size - 32
    (grad, probs_grad), (want_grad, want_probs_grad) = _kernel_and_golden(fits, soc)
    assert_bits_equal(grad, want_grad)
    assert_bits_equal(probs_grad, want_probs_grad)


# --- fuzzing: a corrupted index is skipped, faults, or gives the golden's answer; inputs stay untouched ------
FUZZ_TOKENS, FUZZ_HIDDEN, FUZZ_EXPERTS, FUZZ_TOPK, FUZZ_CAPACITY = 6, 24, 4, 2, 3   # 12 slots in every mode


def _fault_expected(mode, which, value, slots, tokens):
    """Whether the kernel dereferences the corrupted value, by the real kernels' skip rules: keys 0/1 never
    read permute_token_id and skip a slot whose out_index is negative; keys 10/11 skip nothing."""
    pad, _ = MODES[mode]
    if which == "routing_map":
        return False
    if not pad:
        return which == "out_index" and value >= slots
    return not 0 <= value < (slots if which == "out_index" else tokens)


def _decided_by_one_slot(mode, args, arch35):
    """Masks (grad rows, probs-grad elements) whose value one slot alone decides.

    Several slots writing one element race across cores on hardware (and in the simulator's thread pool).
    On arch35 the keys-1/101 kernel never zeroes its per-slot partial sums, so a slot that has an expert
    but a negative out_index leaves that probs-grad element undefined (membase and the golden give 0).
    """
    o = args["out_index"].astype(np.int64)
    m = o.size
    pad, probs = MODES[mode]
    rows_ok = np.bincount(o if pad else o[o >= 0], minlength=m) <= 1
    if not probs:
        return rows_ok, None
    n, e = args["probs"].shape
    if pad:
        flat = args["permute_token_id"].astype(np.int64) * e + o // (m // e)
        return rows_ok, (np.bincount(flat, minlength=n * e) <= 1).reshape(n, e)
    elements_ok = np.ones((n, e), dtype=bool)
    if arch35:
        chosen = [np.nonzero(row)[0] for row in np.asarray(args["routing_map"]) != 0]
        for q in np.nonzero(o < 0)[0]:
            t, k = divmod(int(q), FUZZ_TOPK)
            if k < chosen[t].size:
                elements_ok[t, chosen[t][k]] = False
    return rows_ok, elements_ok


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(sorted(MODES)), dt=st.sampled_from(sorted(DTYPES)),
       profile=st.sampled_from(["ascend910b", "ascend950"]), cores=st.integers(1, 4),
       which=st.sampled_from(["out_index", "permute_token_id", "routing_map"]), slot=st.integers(0, 11),
       value=st.one_of(st.integers(-2**31, -2), st.integers(-1, 16), st.integers(10**6, 2**31 - 1)))
def test_fuzzed_bad_indices(mode, dt, profile, cores, which, slot, value):
    pad, probs = MODES[mode]
    assume(probs or which != "routing_map")
    g_dt, p_dt = DTYPES[dt]
    args = make_inputs(FUZZ_TOKENS, FUZZ_HIDDEN, FUZZ_EXPERTS, topk=FUZZ_TOPK, capacity=FUZZ_CAPACITY, dtype=g_dt,
                       probs_dtype=p_dt, drop_and_pad=pad, with_probs=probs, seed=11)
    bad = args[which].copy()
    if which == "routing_map":   # a row selecting every expert: more than topK
        bad[slot % FUZZ_TOKENS] = True
    else:
        bad[slot % bad.size] = value
    args[which] = bad
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    soc = get_soc(profile, aiv_num=cores)
    piece = tiling_uwrm_grad(*args.values(), soc=soc).fields["hidden_size_align"]
    m = args["out_index"].size

    def run():
        return ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)

    if _fault_expected(mode, which, value, m, FUZZ_TOKENS):
        event("faults")
        with pytest.raises(OutOfBoundsError):
            run()
        with pytest.raises(ValueError, match="outside golden domain"):
            golden(*args.values(), hidden_piece=piece)
    elif which == "routing_map" and not pad:
        event("routing map outside the golden's domain")
        run()   # the kernel shifts the batch's probs (no fault, no defined result); the golden refuses
        with pytest.raises(ValueError, match="outside golden domain: routing_map row"):
            golden(*args.values(), hidden_piece=piece)
    else:
        event("compared with the golden")
        grad, probs_grad = run()
        want_grad, want_probs_grad = golden(*args.values(), hidden_piece=piece)
        rows_ok, elements_ok = _decided_by_one_slot(mode, args, soc.is_regbase)
        assert_bits_equal(grad[rows_ok], want_grad[rows_ok])
        if probs:
            assert_bits_equal(probs_grad[elements_ok], want_probs_grad[elements_ok])
        else:
            assert probs_grad is None and want_probs_grad is None
    for k, v in before.items():
        assert_bits_equal(args[k], v, f"the call changed input {k}")
