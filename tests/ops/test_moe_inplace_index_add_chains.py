"""The two chains that launch l0op::MoeInplaceIndexAddAiCore: on ascend950 the simulated MoeInplaceIndexAdd kernel
(SIMT / SIMD / SIMD-sort / SIMT-sort templates), on 910B the host step standing in for InplaceIndexAdd of another
CANN library; on 950 with the deterministic switch the deterministic template (its id split adds nothing without an
alpha input: the real kernel's Muls by alphaValue_ = 0).

Goldens: the chains' own goldens add the rows of a token in slot order in fp32 (ops/*/golden.py). SIMD adds in that
order (bit-exact); SIMT's atomics land in an order that depends on the cores (within ((1+u)^k - 1) * sum |terms|
of the exact sum, u = 2**-24).
"""
from __future__ import annotations

import numpy as np
import pytest

import ops.unpermute_with_routing_map as uwrm
from ops.permute_with_routing_map_grad import allocate_outputs, get_workspace_size, run
from ops.permute_with_routing_map_grad.examples import make_inputs as grad_inputs
from ops.permute_with_routing_map_grad.golden import golden as grad_golden
from ops.unpermute_with_routing_map.examples import make_inputs as unpermute_inputs
from ops.unpermute_with_routing_map.golden import golden as unpermute_golden
from tests.bits import assert_bits_equal

STEP = "l0op::MoeInplaceIndexAddAiCore"


def _index_add(report):
    (step,) = [s for s in report.steps if s.name == STEP]
    return step


def _within_order_bound(got, want, terms_abs):
    """got vs want (both sums of the same fp32 terms per element, want in slot order); terms_abs: (N, H) sum of
    |terms|, k the adds per element (the bound holds for the error of each against the exact sum)."""
    k, magnitude = terms_abs
    bound = 2 * ((1 + 2.0 ** -24) ** k[:, None] - 1) * magnitude
    assert np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= bound)


def _grad(tokens, hidden, experts, capacity, soc, check=None, deterministic=False):
    a = grad_inputs(tokens, hidden, experts, capacity=capacity, dtype="fp32", drop_and_pad=True, seed=7)
    outs = allocate_outputs(a["permuted_token_output_grad"], a["permuted_probs_output_grad"], experts, tokens)
    size, ex = get_workspace_size(*a.values(), *outs, soc=soc, deterministic=deterministic)
    run(np.empty(size, np.uint8), size, ex, check=check)
    return a, outs, ex


def _grad_terms(a, tokens):
    s, g = a["sorted_indices"], a["permuted_token_output_grad"].astype(np.float64)
    k, mag = np.zeros(tokens), np.zeros((tokens, g.shape[1]))
    np.add.at(k, s, 1)
    np.add.at(mag, s, np.abs(g))
    return k, mag


# tokens, hidden, experts, capacity -> the template MoeInplaceIndexAdd takes (capacity * experts div tokens < 5)
GRAD_CASES = {
    "simt-1core": (8, 40, 3, 4, 100000),
    "simt-5cores": (64, 300, 4, 8, 100000),
    "simd-64cores": (8, 8192, 2, 4, 400000),
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_permute_grad_fp32_on_950_runs_the_kernel(case):
    tokens, hidden, experts, capacity, key = GRAD_CASES[case]
    a, outs, ex = _grad(tokens, hidden, experts, capacity, "ascend950")
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == key
    want = grad_golden(**a)
    if key == 400000:
        assert_bits_equal(outs[0], want[0])
    else:
        _within_order_bound(outs[0], want[0], _grad_terms(a, tokens))
    assert_bits_equal(outs[1], want[1])


def test_permute_grad_on_950_checked_mode_is_clean():
    _, _, ex = _grad(64, 300, 4, 8, "ascend950", check="race")
    assert _index_add(ex.report).kind == "kernel"


def test_permute_grad_host_step_on_910b():
    a, outs, ex = _grad(8, 64, 3, 4, "ascend910b")       # InplaceIndexAdd of another library
    assert _index_add(ex.report).kind == "host"
    assert_bits_equal(outs[0], grad_golden(**a)[0])


# tokens, hidden, experts, capacity: ids repeating 5 times or more, rows under 128 bytes: the SIMT-sort template
SIMT_SORT_CASES = {
    "6tokens-40slots-64byte-rows": (6, 16, 8, 5),
    "topk8-512tokens-4096slots-64byte-rows": (512, 16, 64, 64),
}


# tokens, hidden, experts, capacity: ids repeat capacity * experts / tokens >= 5 times, rows of 128 bytes or more
SORT_CASES = {
    "6tokens-40slots": (6, 64, 8, 5),
    "topk8-512tokens-4096slots": (512, 256, 64, 64),       # 8 slots per token, as a top-8 router fills them
    # 8256 slots: 129 ids per core, more than 128, so the cores sort their windows (the ids come sorted: one run
    # of about 8 slots per token)
    "topk8-1032tokens-sorted-windows": (1032, 32, 64, 129),
}


# (template, case): the kernel's tilingKey and name, and the case's shape
SORT_TEMPLATE_CASES = ([("simt-sort", case, 500000, "MoeInplaceIndexAddSimtSort", shape)
                        for case, shape in SIMT_SORT_CASES.items()]
                       + [("simd-sort", case, 200000, "MoeInplaceIndexAddSimdSort", shape)
                          for case, shape in SORT_CASES.items()])


@pytest.mark.parametrize("template, case, key, kernel, shape", SORT_TEMPLATE_CASES,
                         ids=[f"{t}-{c}" for t, c, *_ in SORT_TEMPLATE_CASES])
def test_permute_grad_on_950_runs_the_sort_kernels(template, case, key, kernel, shape):
    tokens, hidden, experts, capacity = shape
    a, outs, ex = _grad(tokens, hidden, experts, capacity, "ascend950")
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == key and step.run.kernel == kernel
    want = grad_golden(**a)
    _within_order_bound(outs[0], want[0], _grad_terms(a, tokens))   # ids split over cores: atomics meet
    assert_bits_equal(outs[1], want[1])


def _simd_sort_split(composite):
    """(isSplitAfterAxis, isSplitIndicesAxis) of the chain's MoeInplaceIndexAddAiCore launch."""
    (step,) = [s for s in composite.steps if s.name == STEP]
    f = step.executor.tiling.fields
    return f["is_split_after_axis"], f["is_split_indices_axis"]


def test_permute_grad_on_950_runs_the_simd_sort_column_split():
    """16384 fp32 columns (1 KiB per core on 64 cores), 40 slots for 6 tokens: the SIMD-sort template's column
    split (ProcessAfter), simulated: every core sorts the id windows itself for its 256 columns."""
    tokens, hidden, experts, capacity = 6, 16384, 8, 5
    a, outs, ex = _grad(tokens, hidden, experts, capacity, "ascend950")
    assert _simd_sort_split(ex) == (1, 0)
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == 200000 and step.run.kernel == "MoeInplaceIndexAddSimdSort"
    want = grad_golden(**a)
    _within_order_bound(outs[0], want[0], _grad_terms(a, tokens))   # run sums against the golden's slot order
    assert_bits_equal(outs[1], want[1])


# --- UnpermuteWithRoutingMap, padded ---------------------------------------------------------------------------
def _unpermute(tokens, hidden, experts, capacity, dtype, probs_dtype, soc, deterministic=False, check=None):
    a = unpermute_inputs(tokens, hidden, experts, capacity=capacity, dtype=dtype, probs_dtype=probs_dtype,
                         drop_and_pad=True, seed=9)
    outs = uwrm.allocate_outputs(*a.values())
    size, ex = uwrm.get_workspace_size(*a.values(), *outs, soc=soc, deterministic=deterministic)
    uwrm.run(np.empty(size, np.uint8), size, ex, check=check)
    return a, outs, ex


@pytest.mark.parametrize("dtype,probs_dtype", [("fp32", "fp32"), ("bf16", "fp32")], ids=["fp32", "bf16-fp32probs"])
@pytest.mark.parametrize("tokens,hidden,experts,capacity,key", [(23, 40, 5, 7, 100000), (9, 8192, 2, 4, 400000)],
                         ids=["simt", "simd"])
def test_unpermute_padded_fp32_accumulator_on_950_runs_the_kernel(tokens, hidden, experts, capacity, key, dtype,
                                                                 probs_dtype):
    a, outs, ex = _unpermute(tokens, hidden, experts, capacity, dtype, probs_dtype, "ascend950")
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == key
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    # one core adds in slot order here (SIMT: 35 * 40 elements fit one core's 2048 threads)
    assert_bits_equal(outs[0], want[0])
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])


def _unpermute_terms(a, outs):
    """(adds, sum |terms|) per output row: slot i adds permuted_tokens[i] * probs[sorted_indices[i], expert of i]."""
    s = a["sorted_indices"].astype(np.int64)
    capacity = s.size // a["probs"].shape[1]
    slot_probs = a["probs"].astype(np.float64)[s, np.arange(s.size) // capacity]
    terms = np.abs(a["permuted_tokens"].astype(np.float64) * slot_probs[:, None])
    k, mag = np.zeros(outs[0].shape[0]), np.zeros(outs[0].shape)
    np.add.at(k, s, 1)
    np.add.at(mag, s, terms)
    return k, mag


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_unpermute_padded_on_950_runs_the_simd_sort_kernel_at_a_top8_shape(dtype):
    a, outs, ex = _unpermute(512, 256, 64, 64, dtype, "fp32", "ascend950")
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == 200000
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    k, mag = _unpermute_terms(a, outs)
    got, ref = outs[0].astype(np.float64), want[0].astype(np.float64)
    # both round the same fp32 sum to the output type at the end: half an ulp of it on top of the fp32 bound
    half_ulp = 0.0 if dtype == "fp32" else np.abs(ref) * 2.0 ** -8
    bound = 2 * ((1 + 2.0 ** -24) ** k[:, None] - 1) * mag + 2 * half_ulp
    assert np.all(np.abs(got - ref) <= bound)
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_unpermute_padded_on_950_runs_the_simt_sort_kernel_at_a_top8_shape(dtype):
    """16 fp32 columns of accumulator (64-byte rows), 8 slots per token: SIMT sort."""
    a, outs, ex = _unpermute(512, 16, 64, 64, dtype, "fp32", "ascend950")
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == 500000
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    k, mag = _unpermute_terms(a, outs)
    got, ref = outs[0].astype(np.float64), want[0].astype(np.float64)
    half_ulp = 0.0 if dtype == "fp32" else np.abs(ref) * 2.0 ** -8
    bound = 2 * ((1 + 2.0 ** -24) ** k[:, None] - 1) * mag + 2 * half_ulp
    assert np.all(np.abs(got - ref) <= bound)
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])


def test_unpermute_on_950_checked_mode_is_clean():
    _, _, ex = _unpermute(23, 40, 5, 7, "fp32", "fp32", "ascend950", check="race")
    assert _index_add(ex.report).kind == "kernel"


def test_unpermute_host_step_on_910b():
    """910B: InplaceIndexAdd of another CANN library, a host step."""
    a, outs, ex = _unpermute(23, 40, 5, 7, "fp32", "fp32", "ascend910b")
    assert _index_add(ex.report).kind == "host"
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    assert_bits_equal(outs[0], want[0])


def test_unpermute_deterministic_id_split_on_950_adds_nothing():
    """950 with the switch and 16 columns (<= 64 cores / 2) for 35 slots: the deterministic template's id split,
    MoeInplaceIndexAddDeterminstic. Its last step multiplies by alphaValue_, which is 0 without an alpha input (the
    chain passes none), so the zero-filled accumulator stays zero: the real kernel's result, not the sum."""
    a, outs, ex = _unpermute(23, 16, 5, 7, "fp32", "fp32", "ascend950", deterministic=True)
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.kernel == "MoeInplaceIndexAddDeterminstic"
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    assert np.count_nonzero(want[0]) > 0 and not np.any(outs[0])
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tokens,hidden,experts,capacity", [(23, 40, 5, 7), (512, 256, 64, 64)],
                         ids=["23tokens-40cols", "topk8-512tokens-256cols"])
def test_unpermute_padded_deterministic_on_950_runs_the_deterministic_kernel(tokens, hidden, experts, capacity,
                                                                              dtype):
    """The switch on, more than 32 columns: the deterministic template's column split (NotQuant kernel), every
    output element added in slot order in fp32 by one core: the chain's golden, bit for bit."""
    a, outs, ex = _unpermute(tokens, hidden, experts, capacity, dtype, "fp32", "ascend950", deterministic=True)
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == 300000
    assert step.run.kernel == "MoeInplaceIndexAddDeterminsticNotQuant"
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    assert_bits_equal(outs[0], want[0])
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])


def test_unpermute_padded_on_950_runs_the_simd_sort_column_split():
    """16384 fp32 accumulator columns, 40 slots for 6 tokens: the column split (ProcessAfter), simulated."""
    a, outs, ex = _unpermute(6, 16384, 8, 5, "fp32", "fp32", "ascend950")
    assert _simd_sort_split(ex) == (1, 0)
    step = _index_add(ex.report)
    assert step.kind == "kernel" and step.run.tiling_key == 200000 and step.run.kernel == "MoeInplaceIndexAddSimdSort"
    want = unpermute_golden(*a.values(), out_shape=outs[0].shape)
    k, mag = _unpermute_terms(a, outs)
    bound = 2 * ((1 + 2.0 ** -24) ** k[:, None] - 1) * mag
    assert np.all(np.abs(outs[0].astype(np.float64) - want[0].astype(np.float64)) <= bound)
    assert np.array_equal(outs[1], want[1]) and np.array_equal(outs[2], want[2])
