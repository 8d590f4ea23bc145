"""MoeTokenUnpermuteWithRoutingMapGrad on Ascend 950: the arch35 kernels (ops/unpermute_with_routing_map_grad/
arch35.py, from moe_token_unpermute_with_routing_map_grad_apt.cpp and op_kernel/arch35/ @ 25fb6b92890d).

Every key with multi-core tails (a remainder split and idle cores), in checked mode, bit for bit against the
formula golden (the arch35 ReduceSumFunc and piece order are the membase ones, so the same golden holds);
the two arch35 behaviours that differ from membase: the split zero Fill of probsGrad (keys 11 / 111) and the
per-piece partial sums that are never zeroed (keys 1 / 101). bf16 runs by default; fp16 / fp32 are `slow`
(fp16 shares the bf16 compiled code, fp32 compiles its own)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from ascend_sim.check import RaceWaiver
from ops.unpermute_with_routing_map_grad import arch35, kernel, kernels_of
from ops.unpermute_with_routing_map_grad.examples import make_inputs
from ops.unpermute_with_routing_map_grad.golden import golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad

aclnn = ops.aclnn
BF16, F16, F32 = ml_dtypes.bfloat16, np.float16, np.float32
KEYS = {  # tiling key: (drop_and_pad, with_probs, mixed bf16 grads + fp32 probs)
    0: (False, False, False), 10: (True, False, False), 1: (False, True, False), 11: (True, True, False),
    101: (False, True, True), 111: (True, True, True),
}
DTYPES = {"bf16": BF16, "fp16": F16, "fp32": F32}
CORES = {  # id: (tokens, hidden, experts, topk, capacity, aiv_num)
    # 37 tokens (111 slots without dropAndPad, 7 experts x capacity 5 = 35 with it) over 4 cores: the former
    # cores take one more token / slot than the tail cores
    "remainder-4core": (37, 300, 7, 3, 5, 4),
    # 5 tokens on 8 cores: some cores get no slot (keys 1 / 101) or no token row to zero
    "idle-cores-8core": (5, 70, 4, 2, 3, 8),
}


def _cases():
    for key, (_pad, _probs, mixed) in KEYS.items():
        for dt in DTYPES:
            if mixed and dt != "bf16":
                continue
            for shape in CORES:
                marks = () if dt == "bf16" else (pytest.mark.slow,)
                yield pytest.param(key, dt, shape, marks=marks, id=f"key{key}-{dt}-{shape}")


def _inputs(key, dt, shape, seed=0):
    pad, probs, mixed = KEYS[key]
    tokens, hidden, experts, topk, capacity, _ = CORES[shape]
    return make_inputs(tokens, hidden, experts, topk=topk, capacity=capacity, dtype=DTYPES[dt],
                       probs_dtype=F32 if mixed else None, drop_and_pad=pad, with_probs=probs, seed=seed)


def _u(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


def test_the_chip_picks_its_kernel_binary():
    """ascend950 registers the regbase config (opFile ..._apt): the arch35 table; 910B / 910_93 the membase one.
    Keys 0 / 10 run the membase stages (their arch35 headers are identical), keys 1 / 11 the arch35 ones."""
    assert kernels_of(get_soc("ascend950")) is arch35.KERNELS
    assert kernels_of(get_soc("ascend910b")) is kernels_of(get_soc("ascend910_93")) is kernel.KERNELS
    assert set(arch35.KERNELS) == set(kernel.KERNELS) == set(KEYS)
    for key in (0, 10):
        assert arch35.KERNELS[key].phases[0].schedule == kernel.KERNELS[key].phases[0].schedule
    for key in (1, 11):
        ours, membase = arch35.KERNELS[key], kernel.KERNELS[key]
        assert ours.name == membase.name and ours.phases[0].buffers == membase.phases[0].buffers
        stages = [{s for s in k.phases[0].schedule if callable(s)} for k in (ours, membase)]
        assert len(stages[0]) == 2 and not stages[0] & stages[1]
    # VToMTE3Sync() orders the fp32 copy-out: no race waiver (only the declared overlap of the split zero fill)
    assert not [w for w in arch35.KERNELS[11].waivers if isinstance(w, RaceWaiver)]


@pytest.mark.parametrize("key,dt,shape", list(_cases()))
def test_every_key_with_core_tails_in_checked_mode(key, dt, shape):
    args = _inputs(key, dt, shape)
    soc = get_soc("ascend950", aiv_num=CORES[shape][5])
    result = tiling_uwrm_grad(*args.values(), soc=soc)
    assert result.tiling_key == key
    f = result.fields
    if key in (1, 101):
        assert f["tail_core_num"] and (f["former_core_num"] or f["token_num_tail_core"] == 0)
    else:
        assert f["tail_core_num"] and (f["former_core_num"] or f["row_id_map_tail_core"] == 0)
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc, check="race")
    want_grad, want_probs_grad = golden(*args.values(), hidden_piece=f["hidden_size_align"])
    assert_bits_equal(grad, want_grad)
    if KEYS[key][1]:
        assert probs_grad.dtype == args["probs"].dtype
        assert_bits_equal(probs_grad, want_probs_grad)
    else:
        assert probs_grad is None


@pytest.mark.parametrize("profile", ["ascend910b", "ascend950"])
def test_pad_probs_grad_is_zeroed_whatever_the_output_held(profile):
    """Keys 11 / 111 write only the probs-gradient elements some slot owns; Init() zeroes the rest first. On
    the 950 the zero Fill is split over the cores (tokens * experts = 28 over 3 cores: 10 / 9 / 9), on membase
    every core zeroes the whole tensor; either way no element keeps what the output buffer held."""
    args = make_inputs(7, 40, 4, capacity=2, dtype=BF16, drop_and_pad=True, with_probs=True, seed=3)
    soc = get_soc(profile, aiv_num=3)
    g = args["unpermuted_tokens_grad"]
    out = np.full((args["out_index"].size, g.shape[1]), 7, dtype=g.dtype)
    probs_grad = np.full(args["probs"].shape, np.nan, dtype=BF16)
    size, executor = aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
        *args.values(), None, out, probs_grad, soc=soc)
    aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor, check="race")
    assert executor.report.tiling_key == 11
    want_grad, want_probs_grad = golden(*args.values(),
                                        hidden_piece=tiling_uwrm_grad(*args.values(), soc=soc).fields[
                                            "hidden_size_align"])
    owned = np.zeros(args["probs"].shape, dtype=bool)
    capacity = args["out_index"].size // args["probs"].shape[1]
    owned[args["permute_token_id"], args["out_index"] // capacity] = True
    assert (~owned).any() and np.all(probs_grad[~owned] == 0)
    assert_bits_equal(probs_grad, want_probs_grad)
    assert_bits_equal(out, want_grad)


def test_arch35_key1_never_zeroes_its_partial_sums():
    """Keys 1 / 101: the arch35 Process() drops membase's Duplicate of tmpBufferProbGradCast at each hidden
    piece. A slot that owns a selected expert but whose outIndex is -1 writes no partial sum, so the 950 adds
    what that UB element held (here the fresh launch's poison) into the expert's gradient; membase adds its
    zero. Every other element is the golden's on both chips."""
    args = make_inputs(6, 64, 4, topk=2, dtype=BF16, with_probs=True, seed=5)
    q = 3                                    # token 1's second selected expert
    t, k = divmod(q, 2)
    e = np.nonzero(args["routing_map"][t])[0][k]
    args["out_index"] = args["out_index"].copy()
    args["out_index"][q] = -1
    piece = tiling_uwrm_grad(*args.values(), soc="ascend950").fields["hidden_size_align"]
    want_grad, want_probs_grad = golden(*args.values(), hidden_piece=piece)
    assert float(want_probs_grad[t, e]) == 0.0
    others = np.ones(want_probs_grad.shape, dtype=bool)
    others[t, e] = False
    for profile in ("ascend910b", "ascend950"):
        grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(
            *args.values(), soc=get_soc(profile, aiv_num=1), check="race")
        assert_bits_equal(grad, want_grad)
        assert_bits_equal(probs_grad[others], want_probs_grad[others])
        if profile == "ascend910b":
            assert float(probs_grad[t, e]) == 0.0
        else:
            assert _u(probs_grad)[t, e] != _u(want_probs_grad)[t, e]
