"""The friendly calls (ops.moe_token_*): every bad argument ends in the status the aclnn call gives, from the
shared checks in ops/_validate.py, before any output is allocated or any kernel runs; `check=` runs the call in
checked mode and is validated like the aclnn call's."""
from __future__ import annotations

import numpy as np
import pytest

import ops
from ascend_sim import ConfigError
from ascend_sim.check import MODE_RACE
from ops._framework import recorded_runs
from ops._validate import MAX_OUTPUT_BYTES, output_array
from ops.permute import examples as permute_ex
from ops.permute_grad import examples as permute_grad_ex
from ops.permute_with_routing_map import examples as pwrm_ex
from ops.permute_with_routing_map_grad import examples as pwrm_grad_ex
from ops.unpermute import examples as unpermute_ex
from ops.unpermute_grad import examples as unpermute_grad_ex
from ops.unpermute_with_routing_map import examples as uwrm_ex
from ops.unpermute_with_routing_map_grad import examples as uwrm_grad_ex
from tests.bits import assert_bits_equal
from tiling.status import AclnnError

N, H, E, K = 8, 16, 4, 2


def _check(check) -> dict:
    """check= only when a test sets it (the other cases run as a caller without the keyword would)."""
    return {} if check is None else {"check": check}


def _permute(**change):
    x, idx = permute_ex.make_inputs(N, H, E, topk=K)
    args = dict(tokens=x, indices=idx)
    args.update(change)
    return lambda soc, check=None: ops.moe_token_permute(**args, soc=soc, **_check(check))


def _permute_grad(**change):
    a = permute_grad_ex.make_inputs(N, H, K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_permute_grad(**a, soc=soc, **_check(check))


def _unpermute(**change):
    a = unpermute_ex.make_inputs(N, H, E, K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_unpermute(**a, soc=soc, **_check(check))


def _unpermute_grad(**change):
    a = unpermute_grad_ex.make_inputs(N, H, topk=K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_unpermute_grad(**a, soc=soc, **_check(check))


def _pwrm(pad=False, **change):
    a = pwrm_ex.make_inputs(N, H, E, capacity=2, drop_and_pad=True) if pad else pwrm_ex.make_inputs(N, H, E, topk=K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_permute_with_routing_map(**a, soc=soc, **_check(check))


def _pwrm_grad(pad=True, **change):
    a = pwrm_grad_ex.make_inputs(N, H, E, capacity=2, drop_and_pad=True) if pad else \
        pwrm_grad_ex.make_inputs(N, H, E, topk=K)
    args = dict(zip(("permuted_tokens_grad", "permuted_probs_grad", "sorted_indices", "routing_map", "num_experts",
                     "tokens_num", "drop_and_pad"), a.values()))
    args.update(change)
    return lambda soc, check=None: ops.moe_token_permute_with_routing_map_grad(**args, soc=soc, **_check(check))


def _uwrm(pad=False, **change):
    a = uwrm_ex.make_inputs(N, H, E, capacity=2, drop_and_pad=True) if pad else uwrm_ex.make_inputs(N, H, E, topk=K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_unpermute_with_routing_map(**a, soc=soc, **_check(check))


def _uwrm_grad(**change):
    a = uwrm_grad_ex.make_inputs(N, H, E, topk=K)
    a.update(change)
    return lambda soc, check=None: ops.moe_token_unpermute_with_routing_map_grad(**a, soc=soc, **_check(check))


# id: (call with one bad argument, status, the argument the message must name)
BAD = {
    # tensors that are not arrays, or missing
    "permute-tokens-list": (_permute(tokens=[[1.0] * H] * N), 161002, "tokens"),
    "permute-indices-none": (_permute(indices=None), 161001, "indices"),
    "permute-grad-grad-list": (_permute_grad(permuted_output_grad=[[0.5] * H] * 16), 161002, "permuted_output_grad"),
    "permute-grad-indices-none": (_permute_grad(sorted_indices=None), 161001, "sorted_indices"),
    "unpermute-probs-list": (_unpermute(probs=[[0.5] * K] * N), 161002, "probs"),
    "unpermute-tokens-none": (_unpermute(permuted_tokens=None), 161001, "permuted_tokens"),
    "unpermute-grad-probs-list": (_unpermute_grad(probs=[[0.5] * K] * N), 161002, "probs"),
    "unpermute-grad-tokens-list": (_unpermute_grad(permuted_tokens=[[0.5] * H] * 16), 161002, "permuted_tokens"),
    "pwrm-probs-list": (_pwrm(probs=[[0.25] * E] * N), 161002, "probs"),
    "pwrm-map-list": (_pwrm(routing_map=[[True] * E] * N), 161002, "routing_map"),
    "pwrm-tokens-none": (_pwrm(tokens=None), 161001, "tokens"),
    "pwrm-grad-probs-list": (_pwrm_grad(permuted_probs_grad=[0.5] * 8), 161002, "permuted_probs_output_grad"),
    "uwrm-probs-list": (_uwrm(probs=[[0.25] * E] * N), 161002, "probs"),
    "uwrm-map-list": (_uwrm(routing_map=[[True] * E] * N), 161002, "routing_map"),
    "uwrm-grad-probs-list": (_uwrm_grad(probs=[[0.25] * E] * N), 161002, "probs"),
    "uwrm-grad-out-index-list": (_uwrm_grad(out_index=list(range(16))), 161002, "out_index"),
    "unpermute-grad-grad-none": (_unpermute_grad(unpermuted_tokens_grad=None), 161001, "unpermuted_tokens_grad"),
    "pwrm-grad-grad-none": (_pwrm_grad(permuted_tokens_grad=None), 161001, "permuted_token_output_grad"),
    "uwrm-indices-none": (_uwrm(sorted_indices=None), 161001, "sorted_indices"),
    "uwrm-grad-grad-none": (_uwrm_grad(unpermuted_tokens_grad=None), 161001, "unpermuted_tokens_grad"),
    # attributes that are not whole numbers
    "permute-num-out-string": (_permute(num_out_tokens="3"), 161002, "num_out_tokens"),
    "permute-grad-topk-float": (_permute_grad(num_topk=2.0), 161002, "num_topk"),
    "pwrm-num-out-float": (_pwrm(num_out_tokens=16.0), 161002, "num_out_tokens"),
    "pwrm-grad-tokens-num-string": (_pwrm_grad(tokens_num="8"), 161002, "tokens_num"),
    "uwrm-restore-shape-float": (_uwrm(pad=True, restore_shape=[8.0, 16]), 161002, "restore_shape"),
    "unpermute-restore-shape-string": (_unpermute(restore_shape="ab"), 161002, "restore_shape"),
    "unpermute-grad-restore-shape-2**64": (_unpermute_grad(restore_shape=[2 ** 64, 16]), 161002, "restore_shape"),
    "uwrm-grad-restore-shape-nested": (_uwrm_grad(restore_shape=[[8, 16]]), 161002, "restore_shape"),
    "pwrm-grad-num-experts-bool": (_pwrm_grad(num_experts=True), 161002, "num_experts"),
    # sizes no output can have: negative, or beyond what a device (or this host) holds
    "pwrm-num-out-minus-1": (_pwrm(num_out_tokens=-1), 161002, "num_out_tokens"),
    "pwrm-num-out-2**62": (_pwrm(num_out_tokens=2 ** 62), 161002, "num_out_tokens"),
    "pwrm-capacity-10**12": (_pwrm(pad=True, num_out_tokens=10 ** 12 * E), 161002, "num_out_tokens"),
    "pwrm-grad-tokens-num-2**40": (_pwrm_grad(tokens_num=2 ** 40), 161002, "tokens_num"),
    "pwrm-grad-num-experts-2**40": (_pwrm_grad(num_experts=2 ** 40), 161002, "num_experts"),
    "pwrm-grad-tokens-num-minus-3": (_pwrm_grad(tokens_num=-3), 161002, "tokens_num"),
    "uwrm-restore-shape-2**40": (_uwrm(pad=True, restore_shape=[2 ** 40, 64]), 161002, "restore_shape"),
    "uwrm-restore-shape-negative": (_uwrm(pad=True, restore_shape=[-1, 64]), 161002, "restore_shape"),
    "uwrm-noprobs-restore-shape-2**40": (_uwrm(probs=None, routing_map=None, restore_shape=[2 ** 40, 64]), 161002,
                                         "restore_shape"),
}


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("case", BAD)
def test_bad_arguments_give_the_aclnn_status_before_anything_runs(case, soc):
    call, status, name = BAD[case]
    with recorded_runs() as runs, pytest.raises(AclnnError) as info:
        call(soc)
    e = info.value
    assert e.status == status, f"{case}: {e}"
    assert name in e.message, f"{case}: the message does not name {name}: {e}"
    assert runs == [], f"{case}: a kernel ran before the argument was refused"


# id: (operator module, call whose sizing argument breaks one of the aclnn's own rules while the output it would
# size stays small, the rule's words). The friendly call must apply the rule before it allocates that output.
SIZED_BY_A_BAD_ATTRIBUTE = {
    "pwrm-num-out-above-n-times-e": (ops.permute_with_routing_map, _pwrm(num_out_tokens=N * E + N),
                                     "num_out_tokens must be in [0, tokens * experts"),
    "pwrm-pad-num-out-above-n-times-e": (ops.permute_with_routing_map, _pwrm(pad=True, num_out_tokens=N * E + E),
                                         "num_out_tokens must be in [0, tokens * experts"),
    "pwrm-grad-tokens-num-not-the-map's": (ops.permute_with_routing_map_grad,
                                           _pwrm_grad(pad=False, tokens_num=4 * N),
                                           "routing_map must have shape (tokens_num, num_experts)"),
    "pwrm-grad-num-experts-not-the-map's": (ops.permute_with_routing_map_grad,
                                            _pwrm_grad(pad=False, num_experts=3 * E),
                                            "routing_map must have shape (tokens_num, num_experts)"),
    "pwrm-grad-num-experts-0": (ops.permute_with_routing_map_grad, _pwrm_grad(num_experts=0),
                                "num_experts must be greater than 0"),
}


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("case", SIZED_BY_A_BAD_ATTRIBUTE)
def test_the_aclnn_rules_on_sizing_attributes_run_before_any_output_is_allocated(case, soc, monkeypatch):
    module, call, rule = SIZED_BY_A_BAD_ATTRIBUTE[case]

    def no_allocation(name, dims, dtype):
        raise AssertionError(f"{case}: {name} allocated before the aclnn's rule refused the call")
    monkeypatch.setattr(module, "output_array", no_allocation)
    with pytest.raises(AclnnError) as info:
        call(soc)
    assert info.value.status == 161002 and rule in info.value.message, f"{case}: {info.value}"


@pytest.mark.parametrize("dims,fragment", [
    ([(-1, "num_out_tokens"), (16, "tokens")], "num_out_tokens gives out a dim 0 of -1"),
    ([(2 ** 63, "tokens_num")], "tokens_num gives out a dim 0"),
    ([(8, "tokens"), (True, "hidden")], "hidden gives out a dim 1"),
    ([(2 ** 40, "restore_shape[0]"), (64, "permuted_tokens")], "restore_shape[0] gives out the shape"),
    ([(2 ** 31, "num_experts"), (2 ** 31, "tokens_num")], "bytes, more than the"),
], ids=["negative", "beyond-int64", "bool", "too-many-bytes", "product-too-large"])
def test_output_array_names_the_argument_behind_a_bad_dimension(dims, fragment):
    with pytest.raises(AclnnError) as info:
        output_array("out", dims, np.float32)
    assert info.value.status == 161002 and fragment in info.value.message, info.value.message


def test_output_array_turns_a_host_memory_error_into_the_status(monkeypatch):
    """Below the 64 GiB limit the host may still be unable to allocate: still 161002 naming the argument."""
    def no_memory(shape, dtype=None):
        raise MemoryError(f"cannot allocate {shape}")
    monkeypatch.setattr(np, "zeros", no_memory)
    with pytest.raises(AclnnError, match="tokens_num gives out the shape .* which this host cannot allocate") as info:
        output_array("out", [(2 ** 30, "tokens_num"), (4, "hidden")], np.float32)
    assert info.value.status == 161002


def test_output_array_allocates_up_to_the_limit_zeroed():
    out = output_array("out", [(3, "a"), (0, "b")], np.int32)
    assert out.shape == (3, 0) and out.dtype == np.int32
    out = output_array("out", [(4, "a"), (2, "b")], np.float16)
    assert out.shape == (4, 2) and not out.any()
    assert MAX_OUTPUT_BYTES == 64 * 1024 ** 3


# --- check= ---------------------------------------------------------------------------------------------
FRIENDLY = {
    "permute": _permute(), "permute-grad": _permute_grad(), "unpermute": _unpermute(),
    "unpermute-grad": _unpermute_grad(), "pwrm": _pwrm(), "pwrm-grad": _pwrm_grad(), "uwrm": _uwrm(),
    "uwrm-grad": _uwrm_grad(),
}


@pytest.mark.parametrize("value", ["races", "RACE", 1, 0.5], ids=repr)
@pytest.mark.parametrize("call", FRIENDLY)
def test_a_bad_check_value_is_a_config_error_naming_check(call, value):
    with recorded_runs() as runs, pytest.raises(ConfigError, match="check must be"):
        FRIENDLY[call]("ascend910b", check=value)
    assert runs == []


def _reports(run):
    """The RunReports of one recorded aclnn run (a composite's kernel steps, or the one kernel)."""
    report = run.executor.report
    return report.kernel_runs if hasattr(report, "kernel_runs") else [report]


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_check_race_runs_the_friendly_call_checked(soc):
    call = _unpermute()
    with recorded_runs() as plain:
        want = call(soc)
    with recorded_runs() as checked:
        got = call(soc, check="race")
    assert_bits_equal(got, want)
    assert all(r.extra == {} for run in plain for r in _reports(run))
    reports = [r for run in checked for r in _reports(run)]
    assert reports and all(r.extra["checked"] == MODE_RACE for r in reports)


def test_check_race_counts_the_waived_races_of_the_real_kernel():
    """UnpermuteWithRoutingMapGrad key 1 has races the original kernel has too (waived at their source lines):
    only a checked run counts them."""
    call = _uwrm_grad()
    with recorded_runs() as runs:
        call("ascend910b", check="race")
    assert runs[0].executor.tiling.tiling_key == 1
    assert runs[0].executor.report.extra["waived_races"] > 0
