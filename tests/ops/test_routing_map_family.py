"""The four routing-map operators checked against each other through the public API only (ops.*).

1. Round trip: MoeTokenPermuteWithRoutingMap then MoeTokenUnpermuteWithRoutingMap gives every token times
   the sum of the probs of the slots it kept (times the number of its slots without probs). The kept slots
   are derived here from the routing map alone (facts §7.a), never from an operator's output:
   * no dropAndPad: token t keeps every expert it routes to (fewer than topK for non-topK rows: -1 slots);
   * dropAndPad: expert e takes its routed tokens in ascending order, then, when it has fewer than capacity,
     non-routed tokens in ascending order (filler slots), and keeps the first `capacity`; a filler slot
     contributes probs[t, e] like any other slot (it is what the unpermute's gather reads).
2. Adjoints in fp64 on random fp32 data: <F x, g> = <x, B g> for F = PermuteWithRoutingMap (tokens and probs)
   with B = PermuteWithRoutingMapGrad, and F = UnpermuteWithRoutingMap without probs with
   B = UnpermuteWithRoutingMapGrad without probs; with probs, the unpermute is bilinear in (P, probs) and
   <F(P, probs), G> = <P, dP> = <probs, dprobs> with (dP, dprobs) from UnpermuteWithRoutingMapGrad.
3. Every profile (ascend910b, ascend910_93, ascend950) runs at least one case of each test.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from ops.permute_with_routing_map.examples import make_inputs
from tests.bits import assert_bits_equal

F32 = np.dtype(np.float32)
U32 = 2.0 ** -24                 # unit roundoff of fp32 (half its eps)


def _unit_roundoff(dtype) -> float:
    """Half the spacing of 1.0 in dtype: the relative error bound of one round-to-nearest."""
    return float(ml_dtypes.finfo(dtype).eps) / 2


def _gamma(n: int, u: float = U32) -> float:
    """Higham's gamma_n = n u / (1 - n u): relative bound of n successive roundings (sums and products)."""
    return n * u / (1 - n * u)


def _kept_slots(routing_map: np.ndarray, drop_and_pad: bool, capacity: int = 0) -> list[tuple[int, int]]:
    """(token, expert) of every slot the permute produces, from the routing map alone (module docstring)."""
    rm = routing_map.astype(bool)
    n, e = rm.shape
    if not drop_and_pad:
        return [(t, x) for t in range(n) for x in range(e) if rm[t, x]]
    slots = []
    for x in range(e):
        order = [t for t in range(n) if rm[t, x]] + [t for t in range(n) if not rm[t, x]]
        slots += [(t, x) for t in order[:capacity]]
    return slots


def _drop_trailing_experts(routing_map: np.ndarray, seed: int) -> np.ndarray:
    """A non-topK map from a topK one: every token keeps its first 1..topK routed experts (ascending
    expert order) and loses the rest, so its kept slots r = 0..cnt-1 line up with the full map's."""
    rng = np.random.default_rng(seed)
    rm = routing_map.astype(bool)
    rank = np.cumsum(rm, axis=1) - 1                     # r of each routed expert, ascending experts
    counts = rng.integers(1, rm.sum(axis=1) + 1)
    return (rm & (rank < counts[:, None])).astype(routing_map.dtype)


# ---------------------------------------------------------------------------------------------- round trip
ROUND_TRIP = {
    # id: (tokens, hidden, experts, topk, capacity, dtype, probs, routing, soc)
    # routing: "topk" = exactly topK ones per row; "non_topk" = examples' full_topk=False (no probs);
    # "minus_one" = the ATK convention for non-topK rows with probs: the permute gets the non-topK map, the
    # unpermute the full topK map with probs 0 on the dropped slots (its token-major masked select needs
    # exactly topK ones per row to line probs up with slots, facts §9.a)
    "nopad-topk-bf16-probs-910b": (32, 64, 6, 2, None, "bf16", True, "topk", "ascend910b"),
    "nopad-minus1-bf16-probs-910_93": (40, 48, 8, 3, None, "bf16", True, "minus_one", "ascend910_93"),
    "nopad-nontopk-fp16-noprobs-950": (36, 96, 6, 3, None, "fp16", False, "non_topk", "ascend950"),
    "nopad-nontopk-bf16-noprobs-910b": (24, 32, 4, 3, None, "bf16", False, "non_topk", "ascend910b"),
    "pad-bf16-probs-910b": (32, 64, 6, 2, 9, "bf16", True, "topk", "ascend910b"),
    "pad-fp32-probs-910_93": (24, 40, 4, 2, 11, "fp32", True, "topk", "ascend910_93"),
    "pad-fp16-noprobs-950": (30, 160, 5, 2, 10, "fp16", False, "topk", "ascend950"),
    "pad-bf16-noprobs-910_93": (24, 32, 4, 1, 6, "bf16", False, "topk", "ascend910_93"),
}


@pytest.mark.parametrize("case", list(ROUND_TRIP))
def test_round_trip(case):
    """Unpermute(Permute(x)) = x * (sum of kept probs), or x * (number of kept slots) without probs.

    Error bound with probs, against y = x * sum(p) in fp64 (probs >= 0, so |y| bounds the sum of |terms|):
    * no dropAndPad: the unpermute forms c <= topK fp32 products x*p and adds them in fp32 (c roundings
      in all: gamma_c), then rounds once to the token dtype (u_t): |out - y| <= (u_t + gamma_c (1 + u_t)) |y|;
    * dropAndPad: l0 Mul rounds each product to the token dtype (u_t), the index add sums the c terms in
      fp32 (gamma_c) and rounds once (u_t): |out - y| <= ((1 + u_t)^2 (1 + gamma_c) - 1) |y|;
    plus c halves of the token dtype's smallest subnormal for products that land below its normal range.
    Without probs every partial sum j*x (j <= 8) of a bf16 / fp16 x is exact in fp32, so the result is
    x*c rounded once to the token dtype: bit-exact (exact wherever x*c is representable).
    """
    n, h, e, k, cap, dt, with_probs, routing, soc = ROUND_TRIP[case]
    pad = cap is not None
    a = make_inputs(n, h, e, topk=k, capacity=cap, dtype=dt, drop_and_pad=pad, with_probs=with_probs,
                    full_topk=routing != "non_topk", seed=n * h + e)
    x, full_map, probs = a["tokens"], a["routing_map"], a["probs"]
    fwd_map = _drop_trailing_experts(full_map, seed=n) if routing == "minus_one" else full_map
    assert pad or routing == "topk" or not np.all(fwd_map.sum(axis=1) == k), "the case must have non-topK rows"
    if pad:     # the capacity cut must both drop routed tokens and add filler slots
        routed = fwd_map.astype(bool).sum(axis=0)
        assert routed.max() > cap > routed.min(), f"experts' routed counts {routed} vs capacity {cap}"

    permuted, permuted_probs, sorted_indices = ops.moe_token_permute_with_routing_map(
        x, fwd_map, probs, a["num_out_tokens"], pad, soc=soc)
    if with_probs:
        unpermute_map = full_map if routing == "minus_one" else fwd_map
        unpermute_probs = np.where(fwd_map.astype(bool), probs, 0).astype(probs.dtype)
        if pad:                        # filler slots read probs[t, e] of non-routed pairs: keep them all
            unpermute_probs = probs
        out = ops.moe_token_unpermute_with_routing_map(permuted, sorted_indices, unpermute_map, unpermute_probs,
                                                       pad, (n, h), soc=soc)[0]
    else:
        out = ops.moe_token_unpermute_with_routing_map(permuted, sorted_indices, None, None, pad, (n, h),
                                                       soc=soc)[0]
    assert out.shape == x.shape and out.dtype == x.dtype

    slots = _kept_slots(fwd_map, pad, cap or 0)
    count = np.zeros(n, dtype=np.int64)
    weight = np.zeros(n, dtype=np.float64)
    for t, ex in slots:
        count[t] += 1
        weight[t] += float(probs[t, ex]) if with_probs else 1.0
    x64 = x.astype(np.float64)
    if not with_probs:
        # one rounding of the exact multiple; + 0.0 turns the -0 of a negative x kept 0 times into the +0
        # of the zero-filled output
        want = (x64 * count[:, None] + 0.0).astype(x.dtype)
        assert_bits_equal(out, want, "x * (number of kept slots)")
        return
    y = x64 * weight[:, None]
    u_t = _unit_roundoff(x.dtype)
    c = int(count.max())
    rel = ((1 + u_t) ** 2 * (1 + _gamma(c)) - 1) if pad else (u_t + _gamma(c) * (1 + u_t))
    tiny = c * float(ml_dtypes.finfo(x.dtype).smallest_subnormal) / 2
    err = np.abs(out.astype(np.float64) - y)
    bound = rel * np.abs(y) + tiny
    bad = np.argwhere(err > bound)
    assert bad.size == 0, (f"{len(bad)} elements outside the bound, first (token, h) = {tuple(bad[0])}: "
                           f"got {out[tuple(bad[0])]}, want {y[tuple(bad[0])]} +- {bound[tuple(bad[0])]}")
    # the bound is tight enough to matter: a wrong prob (or a missing slot) moves y by far more
    assert rel < 0.02


# -------------------------------------------------------------------------------------------------- adjoints
def _check_adjoint(lhs_terms: np.ndarray, rhs_terms: np.ndarray, abs_terms: float, rounds: int, what: str):
    """sum(lhs_terms) == sum(rhs_terms) in fp64 within gamma_rounds (fp32) of the sum of |terms|: each output
    element the ops compute is a chain of at most `rounds` fp32 roundings of non-negative-weighted terms."""
    lhs, rhs = float(np.sum(lhs_terms)), float(np.sum(rhs_terms))
    tol = _gamma(rounds) * abs_terms + 1e-12 * abs_terms
    assert abs(lhs - rhs) <= tol, f"{what}: <F x, g> = {lhs!r}, <x, B g> = {rhs!r}, |diff| {abs(lhs - rhs):.3e} " \
                                  f"> tol {tol:.3e}"
    assert abs_terms > 0


PERMUTE_ADJOINT = {
    # id: (tokens, hidden, experts, topk, capacity, full_topk, soc)
    "nopad-topk-fp32-910b": (32, 48, 6, 2, None, True, "ascend910b"),
    "nopad-nontopk-fp32-950": (40, 32, 8, 3, None, False, "ascend950"),
    "pad-fp32-910_93": (28, 40, 5, 2, 8, True, "ascend910_93"),
    "pad-fp32-950": (24, 32, 4, 2, 9, True, "ascend950"),
}


@pytest.mark.parametrize("case", list(PERMUTE_ADJOINT))
def test_permute_adjoint(case):
    """PermuteWithRoutingMapGrad is the adjoint of PermuteWithRoutingMap, for the tokens and for the probs.

    The forward only copies (exact); the gradient sums at most max(topK, experts) rows per token in fp32
    and writes each probs gradient once (exact), so the tolerance is gamma_(terms) of the sum of |terms|."""
    n, h, e, k, cap, full, soc = PERMUTE_ADJOINT[case]
    pad = cap is not None
    a = make_inputs(n, h, e, topk=k, capacity=cap, dtype="fp32", drop_and_pad=pad, full_topk=full,
                    seed=3 * n + h)
    rng = np.random.default_rng(n + h + e)
    x = rng.uniform(-2, 2, (n, h)).astype(F32)
    p = rng.uniform(-1, 1, (n, e)).astype(F32)                 # any values: the map is linear in them
    rm = a["routing_map"]
    permuted, permuted_probs, sorted_indices = ops.moe_token_permute_with_routing_map(
        x, rm, p, a["num_out_tokens"], pad, soc=soc)
    m = permuted.shape[0]
    assert full or (sorted_indices < 0).any(), "the case must have -1 slots"
    g = rng.uniform(-2, 2, (m, h)).astype(F32)
    gp = rng.uniform(-1, 1, m).astype(F32)
    x_grad, p_grad = ops.moe_token_permute_with_routing_map_grad(g, gp, sorted_indices, rm, e, n, pad, soc=soc)
    assert x_grad.shape == x.shape and p_grad.shape == p.shape

    f64 = np.float64
    fx, gg = permuted.astype(f64), g.astype(f64)
    terms = e if pad else k                                     # most rows one token's gradient sums
    _check_adjoint(fx * gg, x.astype(f64) * x_grad.astype(f64), float(np.sum(np.abs(fx * gg))), terms + 1,
                   "tokens")
    fp, gpp = permuted_probs.astype(f64), gp.astype(f64)
    _check_adjoint(fp * gpp, p.astype(f64) * p_grad.astype(f64), float(np.sum(np.abs(fp * gpp))), 1, "probs")


UNPERMUTE_ADJOINT = {
    # id: (tokens, hidden, experts, topk, capacity, full_topk, probs, soc)
    "nopad-topk-fp32-noprobs-910_93": (32, 40, 6, 2, None, True, False, "ascend910_93"),
    "nopad-nontopk-fp32-noprobs-950": (36, 32, 8, 3, None, False, False, "ascend950"),
    "pad-fp32-noprobs-910b": (30, 48, 5, 2, 8, True, False, "ascend910b"),
    "nopad-topk-fp32-probs-910b": (24, 64, 4, 2, None, True, True, "ascend910b"),
    "pad-fp32-probs-950": (24, 40, 4, 2, 7, True, True, "ascend950"),
}


@pytest.mark.parametrize("case", list(UNPERMUTE_ADJOINT))
def test_unpermute_adjoint(case):
    """UnpermuteWithRoutingMapGrad is the adjoint of UnpermuteWithRoutingMap (sorted indices from the permute).

    Wiring (facts §10.a): without dropAndPad out_index = the permute's sorted_indices (slot -> permuted row,
    -1 skipped) and permute_token_id = slot // topK (unused by that kernel); with dropAndPad (out_index,
    permute_token_id) are the forward unpermute's own outputs. Without probs the forward sums at most
    max(topK, experts) rows in fp32 and the gradient copies. With probs, F(P, probs) is bilinear: each term
    is one fp32 product plus the row's sum (gamma_(terms+1)), each probs gradient an fp32 reduction of
    `hidden` products (gamma_(hidden+1))."""
    n, h, e, k, cap, full, with_probs, soc = UNPERMUTE_ADJOINT[case]
    pad = cap is not None
    a = make_inputs(n, h, e, topk=k, capacity=cap, dtype="fp32", drop_and_pad=pad, full_topk=full,
                    with_probs=False, seed=5 * n + h)
    rm = a["routing_map"]
    sorted_indices = ops.moe_token_permute_with_routing_map(a["tokens"], rm, None, a["num_out_tokens"], pad,
                                                            soc=soc)[2]
    m = sorted_indices.shape[0]
    assert full or (sorted_indices < 0).any(), "the case must have -1 slots"
    rng = np.random.default_rng(n * e + h)
    pt = rng.uniform(-2, 2, (m, h)).astype(F32)                # x = the permuted tokens
    g = rng.uniform(-2, 2, (n, h)).astype(F32)
    probs = rng.uniform(0, 1, (n, e)).astype(F32) if with_probs else None
    out, out_index, token_id, _ = ops.moe_token_unpermute_with_routing_map(
        pt, sorted_indices, rm if with_probs else None, probs, pad, (n, h), soc=soc)
    if not pad:
        out_index, token_id = sorted_indices, np.repeat(np.arange(n, dtype=np.int32), m // n)
    pt_grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(
        g, out_index, token_id, rm if with_probs else None, pt if with_probs else None, probs, pad, (n, h),
        soc=soc)
    assert pt_grad.shape == pt.shape

    f64 = np.float64
    lhs = out.astype(f64) * g.astype(f64)
    # sum of |terms| from the slots themselves (fp64, from the inputs): slot j gathers row p for token t
    if pad:
        rows, toks = np.arange(m), sorted_indices.astype(np.int64)
        experts = rows // (m // e)
    else:
        live = sorted_indices >= 0
        rows, toks = sorted_indices[live].astype(np.int64), (np.arange(m) // (m // n))[live]
        sel = [[x for x in range(e) if rm[t, x]] for t in range(n)]
        experts = np.array([sel[t][j % (m // n)] for j, t in zip(np.nonzero(live)[0], toks)])
    row_abs = np.sum(np.abs(pt[rows].astype(f64) * g[toks].astype(f64)), axis=1)
    w = np.abs(probs[toks, experts].astype(f64)) if with_probs else 1.0
    abs_terms = float(np.sum(w * row_abs))
    terms = e if pad else k
    _check_adjoint(lhs, pt.astype(f64) * pt_grad.astype(f64), abs_terms, terms + 2, "permuted tokens")
    if with_probs:
        assert probs_grad.shape == probs.shape
        _check_adjoint(lhs, probs.astype(f64) * probs_grad.astype(f64), abs_terms, max(terms + 2, h + 1),
                       "probs")


# ------------------------------------------------------------------------------------- routing-map dtypes
def _permute_call(rm, pad):
    a = make_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp16", drop_and_pad=pad)
    return lambda: ops.moe_token_permute_with_routing_map(a["tokens"], rm(a["routing_map"]), a["probs"],
                                                          a["num_out_tokens"], pad)


def _permute_grad_call(rm, pad):
    from ops.permute_with_routing_map_grad.examples import make_inputs as grad_inputs
    a = grad_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp16", drop_and_pad=pad)
    return lambda: ops.moe_token_permute_with_routing_map_grad(
        a["permuted_token_output_grad"], a["permuted_probs_output_grad"], a["sorted_indices"], rm(a["routing_map"]),
        a["num_experts"], a["tokens_num"], pad)


def _unpermute_call(rm, pad):
    from ops.unpermute_with_routing_map.examples import make_inputs as unpermute_inputs
    a = unpermute_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp16", drop_and_pad=pad)
    return lambda: ops.moe_token_unpermute_with_routing_map(a["permuted_tokens"], a["sorted_indices"],
                                                            rm(a["routing_map"]), a["probs"], pad, a["restore_shape"])


def _unpermute_grad_call(rm, pad):
    from ops.unpermute_with_routing_map_grad.examples import make_inputs as unpermute_grad_inputs
    a = unpermute_grad_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp16", drop_and_pad=pad)
    a["routing_map"] = rm(a["routing_map"])
    return lambda: ops.moe_token_unpermute_with_routing_map_grad(*a.values())


ROUTING_MAP_OPERATORS = {"permute": _permute_call, "permute_grad": _permute_grad_call, "unpermute": _unpermute_call,
                         "unpermute_grad": _unpermute_grad_call}


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.int32, np.float16],
                         ids=["float32", "int64", "uint8", "int32", "float16"])
@pytest.mark.parametrize("pad", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("op", list(ROUTING_MAP_OPERATORS))
def test_routing_maps_of_other_dtypes_are_refused(op, pad, dtype):
    """The OpDefs take bool / int8 maps only; any other dtype is 161002 naming it, before anything runs (a 4-byte
    map read as bytes would select the wrong pairs; MoeTokenUnpermuteWithRoutingMap used to return such tokens)."""
    call = ROUTING_MAP_OPERATORS[op](lambda m: m.astype(dtype), pad)
    with pytest.raises(ops.AclnnError) as e:
        call()
    assert e.value.status == 161002
    assert "routing_map" in e.value.message and np.dtype(dtype).name in e.value.message



# ------------------------------------------------------------------ the drop-and-pad index add of both chains
def _index_add_steps(composite):
    return [s for s in composite.steps if "IndexAdd" in s.name]


@pytest.mark.parametrize("deterministic", [False, True], ids=["switch-off", "switch-on"])
@pytest.mark.parametrize("soc", ["ascend910b", "ascend910_93", "ascend950"])
@pytest.mark.parametrize("dtype,probs_dtype", [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"),
                                               ("bf16", "fp32")], ids=["bf16", "fp16", "fp32", "bf16-fp32probs"])
def test_unpermute_index_add_path_and_key(dtype, probs_dtype, soc, deterministic):
    """aclnnMoeTokenUnpermuteWithRoutingMap, padded: the sorted index add when the accumulator is bf16 / fp16, or
    when the deterministic switch is on and the chip is 910B / 910_93 (is910Deterministic); else the AiCore index
    add. The accumulator is fp32 for fp32 tokens and for bf16 tokens with fp32 probs, so key 1 (fp32 atomics)
    is never reached: fp32 gets there only with the switch, which makes the tiling pick key 6."""
    from ops.unpermute_with_routing_map import allocate_outputs, get_workspace_size
    from ops.unpermute_with_routing_map.examples import make_inputs as unpermute_inputs
    a = unpermute_inputs(8, 16, 4, capacity=3, dtype=dtype, probs_dtype=probs_dtype, drop_and_pad=True)
    _, ex = get_workspace_size(*a.values(), *allocate_outputs(*a.values()), soc=soc, deterministic=deterministic)
    fp32_acc = dtype == "fp32" or probs_dtype == "fp32"
    sorted_path = not fp32_acc or (deterministic and soc != "ascend950")
    (step,) = _index_add_steps(ex)
    if sorted_path:
        assert step.name == "l0op::MoeInplaceIndexAddWithSorted"
        assert step.executor.tiling.tiling_key == {"bf16": 3, "fp16": 2}.get(dtype if not fp32_acc else "", 6)
    else:
        assert step.name == "l0op::MoeInplaceIndexAddAiCore"


@pytest.mark.parametrize("deterministic", [False, True], ids=["switch-off", "switch-on"])
@pytest.mark.parametrize("soc", ["ascend910b", "ascend910_93", "ascend950"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_permute_grad_index_add_path_and_key(dtype, soc, deterministic):
    """aclnnMoeTokenPermuteWithRoutingMapGrad, drop-and-pad: the sorted index add when the gradient is bf16 / fp16
    or the deterministic switch is on, on 910B / 910_93 and 950 alike; fp32 with the switch is key 6, never 1."""
    from ops.permute_with_routing_map_grad import allocate_outputs, get_workspace_size
    from ops.permute_with_routing_map_grad.examples import make_inputs as grad_inputs
    a = grad_inputs(8, 16, 4, topk=2, capacity=3, dtype=dtype, drop_and_pad=True)
    outs = allocate_outputs(a["permuted_token_output_grad"], a["permuted_probs_output_grad"], a["num_experts"],
                            a["tokens_num"])
    _, ex = get_workspace_size(*a.values(), *outs, soc=soc, deterministic=deterministic)
    (step,) = _index_add_steps(ex)
    if dtype != "fp32" or deterministic:
        assert step.name == "l0op::MoeInplaceIndexAddWithSorted"
        assert step.executor.tiling.tiling_key == {"bf16": 3, "fp16": 2, "fp32": 6}[dtype]
    else:
        assert step.name == "l0op::MoeInplaceIndexAddAiCore"


@pytest.mark.parametrize("probs_dtype", [np.int8, np.int64], ids=["int8", "int64"])
@pytest.mark.parametrize("pad", [False, True], ids=["nopad", "pad"])
@pytest.mark.parametrize("op", ["permute", "unpermute"])
def test_probs_the_opdef_lacks_are_161002_although_the_tiling_takes_them(op, pad, probs_dtype):
    """The real tilings succeed for int8 / int64 probs (tests/tiling); the aclnn refuses them first."""
    with pytest.raises(ops.AclnnError) as e:
        if op == "permute":
            a = make_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp32", drop_and_pad=pad)
            ops.moe_token_permute_with_routing_map(a["tokens"], a["routing_map"], a["probs"].astype(probs_dtype),
                                                   a["num_out_tokens"], pad)
        else:
            from ops.unpermute_with_routing_map.examples import make_inputs as unpermute_inputs
            a = unpermute_inputs(4, 8, 3, topk=2, capacity=2, dtype="fp32", drop_and_pad=pad)
            ops.moe_token_unpermute_with_routing_map(a["permuted_tokens"], a["sorted_indices"], a["routing_map"],
                                                     a["probs"].astype(probs_dtype), pad, a["restore_shape"])
    assert e.value.status == 161002 and "probs" in e.value.message and np.dtype(probs_dtype).name in e.value.message
