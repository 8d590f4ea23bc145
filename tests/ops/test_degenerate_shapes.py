"""Every operator with each zero-size dimension (tokens 0, hidden 0, topK / experts 0, numOutTokens 0 or below N,
all-False routing maps) on Ascend 910B and 950: the real op's answer (empty outputs, zeros, the values the other
outputs still carry, or its status), never an error from inside a kernel. Whether a kernel is launched at all is
decided in one place (ops._framework.launches): not on zero cores, and not when every array it writes is empty."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import ops
from ops import aclnn
from ops._framework import launches, recorded_runs
from ops.permute import allocate_outputs as permute_outputs
from ops.permute import examples as permute_ex
from ops.permute import golden as permute_golden
from ops.permute_grad import examples as permute_grad_ex
from ops.permute_grad.golden import golden as permute_grad_golden
from ops.permute_with_routing_map import examples as pwrm_ex
from ops.permute_with_routing_map.golden import permute_with_routing_map_golden
from ops.permute_with_routing_map_grad import examples as pwrm_grad_ex
from ops.permute_with_routing_map_grad.golden import golden as pwrm_grad_golden
from ops.unpermute import examples as unpermute_ex
from ops.unpermute_grad import examples as unpermute_grad_ex
from ops.unpermute_with_routing_map import examples as uwrm_ex
from ops.unpermute_with_routing_map_grad import examples as uwrm_grad_ex
from tests.bits import assert_bits_equal
from tiling.status import AclnnError

N, H, E, K, CAP = 6, 16, 4, 2, 2
SOCS = ("ascend910b", "ascend950")
ZERO = "zeros"          # a success whose non-empty outputs are all zero


def _permute(change=None, **kw):
    x, idx = permute_ex.make_inputs(N, H, E, topk=K)
    x, idx = change(x, idx) if change else (x, idx)
    def golden(soc=None):
        if soc == "ascend950":      # the MoeInitRoutingV3 chain (hidden 0: its EMPTY_TENSOR branch)
            total = idx.size
            rows = permute_golden.num_out_rows(kw.get("num_out_tokens", 0), total)
            return permute_golden.golden_950(x, idx, rows)[:2]
        return permute_golden.golden(x, idx, kw.get("num_out_tokens", 0))
    return lambda soc: ops.moe_token_permute(x, idx, soc=soc, **kw), golden


def _permute_v1(change):
    """The V1 aclnn (the friendly call runs V2)."""
    x, idx = change(*permute_ex.make_inputs(N, H, E, topk=K))

    def call(soc):
        outs = permute_outputs(x, idx, soc=soc)[:2]
        size, ex = aclnn.moe_token_permute_get_workspace_size(x, idx, 0, False, *outs, soc=soc)
        aclnn.moe_token_permute(np.empty(size, np.uint8), size, ex)
        return outs
    return call, lambda: permute_golden.golden(x, idx)


def _permute_grad(change):
    a = permute_grad_ex.make_inputs(N, H, K)
    g, s = change(a["permuted_output_grad"], a["sorted_indices"])
    return lambda soc: ops.moe_token_permute_grad(g, s, K, soc=soc), lambda: permute_grad_golden(g, s, K)


def _unpermute(**change):
    a = unpermute_ex.make_inputs(N, H, E, K)
    a.update({k: v(a) for k, v in change.items()})
    return lambda soc: ops.moe_token_unpermute(**a, soc=soc), None


def _unpermute_grad(**change):
    a = unpermute_grad_ex.make_inputs(N, H, topk=K)
    a.update({k: v(a) for k, v in change.items()})
    return lambda soc: ops.moe_token_unpermute_grad(**a, soc=soc), None


def _pwrm(pad=False, **change):
    a = pwrm_ex.make_inputs(N, H, E, capacity=CAP, drop_and_pad=True) if pad else pwrm_ex.make_inputs(N, H, E, topk=K)
    a.update({k: v(a) for k, v in change.items()})

    def want():
        m = ops.permute_with_routing_map.resolve_num_out_tokens(a["routing_map"], a["num_out_tokens"], pad)
        return permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], m, pad)[:3]
    return lambda soc: ops.moe_token_permute_with_routing_map(**a, soc=soc), want


def _pwrm_grad(pad=False, **change):
    kw = dict(capacity=CAP, drop_and_pad=True) if pad else dict(topk=K)
    a = pwrm_grad_ex.make_inputs(N, H, E, **kw)
    a.update({k: v(a) for k, v in change.items()})
    return (lambda soc: ops.moe_token_permute_with_routing_map_grad(*a.values(), soc=soc),
            lambda: pwrm_grad_golden(*a.values()))


def _uwrm(pad=False, **change):
    a = uwrm_ex.make_inputs(N, H, E, capacity=CAP, drop_and_pad=True) if pad else uwrm_ex.make_inputs(N, H, E, topk=K)
    a.update({k: v(a) for k, v in change.items()})
    return lambda soc: ops.moe_token_unpermute_with_routing_map(**a, soc=soc), None


def _uwrm_grad(pad=False, **change):
    kw = dict(capacity=CAP, drop_and_pad=True) if pad else dict(topk=K)
    a = uwrm_grad_ex.make_inputs(N, H, E, **kw)
    a.update({k: v(a) for k, v in change.items()})
    return lambda soc: ops.moe_token_unpermute_with_routing_map_grad(*a.values(), soc=soc), None


def _no_tokens(rows_of):
    return {k: (lambda a, k=k: a[k][:0]) for k in rows_of}


def _no_hidden(*names):
    return {k: (lambda a, k=k: a[k][:, :0]) for k in names}


def _no_columns(*names):
    return {k: (lambda a, k=k: a[k][:, :0]) for k in names}


def _all_false(a):
    return np.zeros_like(a["routing_map"])


# id: (make the call and its golden, expected per chip: a tuple of output shapes (compared with the golden when
# there is one, else ZERO when every value must be 0), a status, or an exception class)
CASES = {
    # MoeTokenPermute (V2 friendly call) and V1
    "permute-tokens-0": (lambda: _permute(lambda x, i: (x[:0], i[:0])), ((0, H), (0,), (0,))),
    "permute-topk-0": (lambda: _permute(lambda x, i: (x, i[:, :0])), ((0, H), (0,), (0,))),
    "permute-hidden-0": (lambda: _permute(lambda x, i: (x[:, :0], i)), ((N * K, 0), (N * K,), (0,))),
    "permute-num-out-0": (lambda: _permute(num_out_tokens=-N * K), ((0, H), (N * K,), (0,))),
    "permute-v1-tokens-0": (lambda: _permute_v1(lambda x, i: (x[:0], i[:0])), ((0, H), (0,))),
    "permute-v1-hidden-0": (lambda: _permute_v1(lambda x, i: (x[:, :0], i)), ((N * K, 0), (N * K,))),
    "permute-v1-topk-0": (lambda: _permute_v1(lambda x, i: (x, i[:, :0])), ((0, H), (0,))),
    # MoeTokenPermuteGrad: 950's l0 refuses activeNum 0 (a gradient of 0 rows) when out has rows
    "permute-grad-rows-0": (lambda: _permute_grad(lambda g, s: (g[:0], s)), {"ascend910b": ZERO,
                                                                               "ascend950": 561103}),
    "permute-grad-hidden-0": (lambda: _permute_grad(lambda g, s: (g[:, :0], s)), ((N, 0),)),
    "permute-grad-tokens-0": (lambda: _permute_grad(lambda g, s: (g, s[:0])), ((0, H),)),
    # MoeTokenUnpermute: topK 0 is refused on both (910B: kernel G reads slot 0 unconditionally; 950: the l0
    # tiling needs K > 0)
    "unpermute-tokens-0": (lambda: _unpermute(**_no_tokens(("sorted_indices", "probs"))), ((0, H),)),
    "unpermute-hidden-0": (lambda: _unpermute(**_no_hidden("permuted_tokens")), ((N, 0),)),
    "unpermute-topk-0": (lambda: _unpermute(sorted_indices=lambda a: a["sorted_indices"][:0],
                                            probs=lambda a: a["probs"][:, :0]),
                         {"ascend910b": 561002, "ascend950": 561103}),
    "unpermute-permuted-rows-0": (lambda: _unpermute(**_no_tokens(("permuted_tokens",))), ZERO),
    # MoeTokenUnpermuteGrad: the 910B tiling refuses every zero dimension; 950 launches nothing for empty
    # outputs, and hidden 0 with a non-empty probs gradient fails MoeFinalizeRoutingV2Grad's tiling (the l0
    # returns nullptr)
    "unpermute-grad-tokens-0": (lambda: _unpermute_grad(**_no_tokens(("permuted_tokens", "unpermuted_tokens_grad",
                                                                       "sorted_indices", "probs"))),
                                {"ascend910b": 561002, "ascend950": ((0, H), (0, K))}),
    "unpermute-grad-hidden-0": (lambda: _unpermute_grad(**_no_hidden("permuted_tokens", "unpermuted_tokens_grad")),
                                {"ascend910b": 561002, "ascend950": 561103}),
    "unpermute-grad-topk-0": (lambda: _unpermute_grad(permuted_tokens=lambda a: a["permuted_tokens"][:0],
                                                      sorted_indices=lambda a: a["sorted_indices"][:0],
                                                      probs=lambda a: a["probs"][:, :0]),
                              {"ascend910b": 561002, "ascend950": ((0, H), (N, 0))}),
    # MoeTokenPermuteWithRoutingMap
    "pwrm-tokens-0": (lambda: _pwrm(**_no_tokens(("tokens", "routing_map", "probs")), num_out_tokens=lambda a: 0),
                      ((0, H), (0,), (0,))),
    "pwrm-hidden-0": (lambda: _pwrm(**_no_hidden("tokens")), ((N * K, 0), (N * K,), (N * K,))),
    "pwrm-experts-0": (lambda: _pwrm(**_no_columns("routing_map", "probs"), num_out_tokens=lambda a: 0),
                       ((0, H), (0,), (0,))),
    "pwrm-all-false-map": (lambda: _pwrm(routing_map=_all_false, num_out_tokens=lambda a: None),
                           ((0, H), (0,), (0,))),
    "pwrm-num-out-0": (lambda: _pwrm(num_out_tokens=lambda a: 0), ((0, H), (0,), (0,))),
    "pwrm-num-out-below-n": (lambda: _pwrm(num_out_tokens=lambda a: N - 1), ((0, H), (0,), (0,))),
    "pwrm-pad-num-out-below-e": (lambda: _pwrm(True, num_out_tokens=lambda a: E - 1), ((0, H), (0,), (0,))),
    "pwrm-pad-hidden-0": (lambda: _pwrm(True, **_no_hidden("tokens")), ((E * CAP, 0), (E * CAP,), (E * CAP,))),
    "pwrm-pad-all-false-map": (lambda: _pwrm(True, routing_map=_all_false), ((E * CAP, H), (E * CAP,), (E * CAP,))),
    # MoeTokenPermuteWithRoutingMapGrad: an empty permuted_token_output_grad makes the real aclnn return before
    # any step, so probs_grad_out keeps what the caller passed (the friendly call's zeros)
    "pwrm-grad-hidden-0": (lambda: _pwrm_grad(**_no_hidden("permuted_token_output_grad")), ZERO),
    "pwrm-grad-all-false-map": (lambda: _pwrm_grad(routing_map=_all_false), ((N, H), (N, E))),
    "pwrm-grad-rows-0": (lambda: _pwrm_grad(**_no_tokens(("permuted_token_output_grad", "permuted_probs_output_grad",
                                                           "sorted_indices"))), ZERO),
    "pwrm-grad-num-experts-0": (lambda: _pwrm_grad(num_experts=lambda a: 0), 161002),
    "pwrm-grad-tokens-num-0": (lambda: _pwrm_grad(tokens_num=lambda a: 0), 161002),
    "pwrm-grad-pad-hidden-0": (lambda: _pwrm_grad(True, **_no_hidden("permuted_token_output_grad")), ZERO),
    "pwrm-grad-pad-rows-0": (lambda: _pwrm_grad(True, **_no_tokens(("permuted_token_output_grad",
                                                                     "permuted_probs_output_grad",
                                                                     "sorted_indices"))), ((N, H), (N, E))),
    # MoeTokenUnpermuteWithRoutingMap: the l0 tilings refuse 0 experts / 0 tokens (561103)
    "uwrm-hidden-0": (lambda: _uwrm(**_no_hidden("permuted_tokens"), restore_shape=lambda a: (N, 0)),
                      ((N, 0), (N * K,), (N * K,), (N * K,))),
    "uwrm-slots-0": (lambda: _uwrm(**_no_tokens(("sorted_indices", "permuted_tokens"))), ZERO),
    "uwrm-all-false-map": (lambda: _uwrm(routing_map=_all_false), ((N, H), (N * K,), (N * K,), (N * K,))),
    "uwrm-experts-0": (lambda: _uwrm(**_no_columns("routing_map", "probs")), 561103),
    "uwrm-tokens-0": (lambda: _uwrm(**_no_tokens(("routing_map", "probs")), restore_shape=lambda a: (0, H)),
                      561103),
    "uwrm-pad-hidden-0": (lambda: _uwrm(True, **_no_hidden("permuted_tokens"), restore_shape=lambda a: (N, 0)),
                          ((N, 0), (E * CAP,), (E * CAP,), (E * CAP,))),
    "uwrm-pad-slots-0": (lambda: _uwrm(True, **_no_tokens(("sorted_indices", "permuted_tokens"))), ZERO),
    "uwrm-pad-all-false-map": (lambda: _uwrm(True, routing_map=_all_false),
                               ((N, H), (E * CAP,), (E * CAP,), (E * CAP,))),
    # MoeTokenUnpermuteWithRoutingMapGrad: with drop-and-pad and probs, slots need an expert and a hidden piece
    "uwrm-grad-hidden-0": (lambda: _uwrm_grad(**_no_hidden("unpermuted_tokens_grad", "permuted_tokens")),
                           ((N * K, 0), (N, E))),
    "uwrm-grad-slots-0": (lambda: _uwrm_grad(**_no_tokens(("out_index", "permute_token_id", "permuted_tokens"))),
                          ZERO),
    "uwrm-grad-all-false-map": (lambda: _uwrm_grad(routing_map=_all_false), ((N * K, H), (N, E))),
    "uwrm-grad-pad-all-false-map": (lambda: _uwrm_grad(True, routing_map=_all_false), ((E * CAP, H), (N, E))),
    "uwrm-grad-experts-0": (lambda: _uwrm_grad(**_no_columns("routing_map", "probs")), 561002),
    "uwrm-grad-pad-hidden-0": (lambda: _uwrm_grad(True, **_no_hidden("unpermuted_tokens_grad", "permuted_tokens")),
                               561002),
    "uwrm-grad-pad-experts-0": (lambda: _uwrm_grad(True, **_no_columns("routing_map", "probs")), 561002),
}


@pytest.mark.parametrize("soc", SOCS)
@pytest.mark.parametrize("case", CASES)
def test_zero_size_dimension_gives_the_real_answer(case, soc):
    make, expected = CASES[case]
    if isinstance(expected, dict):
        expected = expected[soc]
    call, golden = make()
    if isinstance(expected, int):
        with pytest.raises(AclnnError) as info:
            call(soc)
        assert info.value.status == expected, f"{case}: {info.value}"
        return
    if isinstance(expected, type):
        with pytest.raises(expected):
            call(soc)
        return
    with recorded_runs() as runs:
        got = call(soc)
    got = [o for o in (got if isinstance(got, tuple) else (got,)) if o is not None]
    if expected == ZERO:
        assert got and all(not o.any() for o in got), case
    else:
        assert tuple(o.shape for o in got) == expected, case
        if golden is not None and any(o.size for o in got):
            takes_soc = "soc" in inspect.signature(golden).parameters
            want = [w for w in (golden(soc) if takes_soc else golden()) if w is not None]
            for k, (o, w) in enumerate(zip(got, want)):
                if o.size:
                    assert_bits_equal(o, np.asarray(w).reshape(o.shape), f"{case}: output {k}")
    for run in runs:       # an executor with nothing to write launched nothing
        report = run.executor.report
        if report is not None and all(o.size == 0 for o in got):
            # the 950 permute chain's MoeInitRoutingV3 runs its EMPTY_TENSOR branch anyway: it zeroes the expert
            # counts, an intermediate of the chain the caller never sees
            ran = [r for r in getattr(report, "kernel_runs", [report]) if r.kernel != "EMPTY_TENSOR"]
            assert not ran, f"{case}: a kernel ran with nothing to write"


@pytest.mark.parametrize("block_dim,writes,want", [
    (0, (np.zeros(4),), False),
    (4, (np.zeros((0, 16)), None), False),
    (4, (np.zeros((0, 16)), np.zeros(3)), True),
    (4, (), True),
], ids=["no-core", "all-empty", "one-non-empty", "writes-unknown"])
def test_launches_is_the_one_rule_for_nothing_to_launch(block_dim, writes, want):
    assert launches(block_dim, writes) is want
