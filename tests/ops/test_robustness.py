"""Operators under stress: concurrent friendly calls with mixed profiles, and fuzzed profiles and
arguments that may only ever end in the library's own errors."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ops
from ascend_sim import ConfigError, SimulatorError
from ops.permute import examples as permute_examples
from ops.permute import golden as permute_golden
from ops.unpermute_with_routing_map_grad import examples as uwrm_examples
from ops.unpermute_with_routing_map_grad import golden as uwrm_golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.status import AclnnError

ALLOWED = (AclnnError, ConfigError, SimulatorError)


def test_friendly_calls_from_many_threads_with_mixed_profiles():
    socs = [get_soc("910b"), get_soc("950"), get_soc("910_93", aiv_num=7), get_soc("910b", aiv_num=3, ub_size=98304)]
    jobs = []
    for k in range(12):
        soc = socs[k % len(socs)]
        if k % 2:
            x, idx = permute_examples.make_inputs(40 + k, 24, 8, topk=2, seed=k)
            jobs.append(("permute", soc, (x, idx), permute_golden.golden(x, idx)))
        else:
            args = uwrm_examples.make_inputs(24, 48, 6, topk=2, dtype="bf16", with_probs=True, seed=k)
            jobs.append(("uwrm", soc, args, None))
    # warm the compiled kernels once, so the threads race on launches, not on the compiler
    ops.moe_token_permute(*jobs[1][2], soc=jobs[1][1])
    ops.moe_token_unpermute_with_routing_map_grad(*jobs[0][2].values(), soc=jobs[0][1])
    failures, done = [], []

    def work(job):
        kind, soc, args, want = job
        try:
            for _ in range(3):
                if kind == "permute":
                    got = ops.moe_token_permute(*args, soc=soc)[:2]
                else:
                    got = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
                    want = uwrm_golden.golden(*args.values(), hidden_piece=_hidden_piece(args, soc))
                for i, (g, w) in enumerate(zip(got, want)):
                    assert_bits_equal(g, w, f"{kind} on {soc.name}, output {i}")
            done.append(kind)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            failures.append((kind, soc.name, repr(e)))

    threads = [threading.Thread(target=work, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and len(done) == len(jobs)


def _hidden_piece(args, soc) -> int:
    from tiling import moe_token_unpermute_with_routing_map_grad as tiling_fn
    return tiling_fn(*args.values(), soc=soc).fields["hidden_size_align"]


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 65, 2 ** 65), st.floats(allow_nan=True),
                     st.text(max_size=3), st.just(np.array([1, 0])), st.just(np.int64(3)), st.just([1, 2]),
                     st.just(np.array(1.5)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ub=st.one_of(st.none(), st.integers(-10, 2 ** 26), st.floats(0, 3e5), st.just("196608")),
       aiv=st.one_of(st.none(), st.integers(-2, 5000), st.floats(0, 64)),
       num_out=_SCALARS, padded=_SCALARS, quant=_SCALARS, soc_name=st.sampled_from(["910b", "950", "910c", ""]))
def test_fuzzed_profiles_and_permute_attributes_end_in_library_errors(ub, aiv, num_out, padded, quant, soc_name):
    x, idx = permute_examples.make_inputs(8, 16, 4, topk=2, seed=1)
    try:
        soc = get_soc(soc_name, ub_size=ub, aiv_num=aiv)
        ops.moe_token_permute(x, idx, num_out_tokens=num_out, padded_mode=padded, quant_mode=quant, soc=soc)
    except ALLOWED:
        pass


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drop=_SCALARS, restore=st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3)),
       grad_dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.float64, ">f4", np.int32]),
       index_dtype=st.sampled_from([np.int32, np.int64, ">i4", np.float32]),
       aiv=st.one_of(st.none(), st.integers(1, 80)), ub=st.one_of(st.none(), st.integers(288, 300000)))
def test_fuzzed_routing_map_grad_arguments_end_in_library_errors(drop, restore, grad_dtype, index_dtype, aiv, ub):
    args = uwrm_examples.make_inputs(8, 16, 4, topk=2, dtype="fp32", with_probs=True, seed=2)
    args["unpermuted_tokens_grad"] = args["unpermuted_tokens_grad"].astype(grad_dtype)
    args["out_index"] = args["out_index"].astype(index_dtype)
    args["drop_and_pad"] = drop
    args["restore_shape"] = restore
    try:
        soc = get_soc("910b", ub_size=ub, aiv_num=aiv)
        ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    except ALLOWED:
        pass


@pytest.mark.parametrize("ub", [288, 512, 1024, 4096, 16384])
def test_tiny_ub_sizes_end_in_tiling_or_ub_errors(ub):
    soc = get_soc("910b", ub_size=ub)
    x, idx = permute_examples.make_inputs(64, 256, 8, topk=2, seed=3)
    args = uwrm_examples.make_inputs(16, 256, 4, topk=2, dtype="bf16", with_probs=True, seed=3)
    for call in (lambda: ops.moe_token_permute(x, idx, soc=soc),
                 lambda: ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)):
        try:
            call()
        except (AclnnError, SimulatorError) as e:
            assert getattr(e, "status", 561002) == 561002 or isinstance(e, SimulatorError)
