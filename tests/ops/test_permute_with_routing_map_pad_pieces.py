"""The drop-and-pad (tilingKey 9) pieces of MoeTokenPermuteWithRoutingMap on their own: the last-dim sort
(MoeSortMultiLastDimCore<uint8_t>), SyncAll, MoePermuteProb, launched through ascend_sim.launch as
GENERAL_PAD_OP_IMPL runs them, bit-exact against a NumPy golden of the pad semantics; plus the pad tiling.

Golden (facts 7.a, pad): for expert e, the tokens ordered by routingMap[t, e] descending (as uint8), equal
values in ascending token order, the first `capacity` kept: sortedIndices[e * cap + c]; and
permuteProbs[e * cap + c] = probs[sortedIndices[e * cap + c], e]. Written as per-value buckets, not a sort.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import Kernel, SimulatorError, UBOverflowError, launch
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import gm_view
from ops.common.moe_sort_last_dim import LastDimSortTilingData, last_dim_sort_gm, last_dim_sort_phase
from ops.permute_with_routing_map.permute_prob import permute_prob_gm, permute_prob_phase
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_sort import sort_loop_max_element
from tiling.moe_sort_last_dim import (
    PWRM_VBS_FIELDS,
    last_dim_sort_tiling,
    last_dim_sort_ub_plan,
    last_dim_sort_workspace_bytes,
    permute_prob_ub_plan,
)

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
PROB_DTYPES = {"noprobs": None, "bf16": BF16, "fp16": F16, "fp32": F32}
GM_NAMES = ("routing_map", "sorted_indices", "workspace", "permute_probs", "probs")
SORT_PIPE, PROB_PIPE = "sortPipe2", "sortPipe"
UB_4096 = 131072 + 256     # tiling sees 131072 B: 4096 keys per loop, the smallest UB the sort's buffers fit

# id: tokens N, experts E, capacity, routed ones per token (topK), map dtype, chip overrides, expected tiling
SCENARIOS = {
    "one-expert-cap1": dict(n=40, e=1, cap=1, k=1),
    "cap-n-all-tokens": dict(n=45, e=3, cap=45, k=2, aiv_num=8),
    "cap-between-int8": dict(n=77, e=6, cap=20, k=3, map="int8", aiv_num=4,
                             expect=dict(front_core_num=2, tail_core_num=2, frontcore_task=2, tailcore_task=1)),
    "n-multiple-of-32": dict(n=64, e=5, cap=17, k=2, aiv_num=5),
    "e-gt-cores-uneven": dict(n=50, e=11, cap=13, k=4, aiv_num=3,
                              expect=dict(front_core_num=2, tail_core_num=1, frontcore_task=4, tailcore_task=3)),
    "e-lt-cores": dict(n=33, e=3, cap=30, k=1, aiv_num=16, expect=dict(need_core_num=3, last_core_elements=-33)),
    "few-routed-cap-beyond": dict(n=70, e=4, cap=65, k=1, aiv_num=2),
    "topk-all-experts": dict(n=30, e=9, cap=30, k=9, aiv_num=4),
    "two-loops": dict(n=4200, e=2, cap=3000, k=1, ub=UB_4096, aiv_num=2,
                      expect=dict(per_core_loops=2, per_core_per_loop_elements=4096, per_core_last_loop_elements=104)),
    "two-loops-cap-cut": dict(n=4200, e=3, cap=1100, k=2, ub=UB_4096, aiv_num=2, map="int8"),
    "five-loops-merge": dict(n=16500, e=2, cap=16500, k=1, ub=UB_4096, aiv_num=2, expect=dict(per_core_loops=5)),
}
SOCS = ("ascend910b", "ascend910_93", "ascend950")


def make_case(n, e, k, map_dtype, prob_dtype, seed=0):
    """A realistic (N, E) routing map (topK ones per token from a softmax-like router, some tokens with
    fewer) and probs (N, E) in prob_dtype (None: no probs)."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((n, e))
    top = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    routing = np.zeros((n, e), dtype=bool)
    np.put_along_axis(routing, top, True, axis=1)
    routing[rng.random(n) < 0.1, :] = False      # a few tokens routed nowhere
    probs = None
    if prob_dtype is not None:
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
        probs[rng.random((n, e)) < 0.05] = np.nan     # bit patterns must travel untouched
        probs = probs.astype(prob_dtype)
    return routing.astype(np.int8 if map_dtype == "int8" else bool), probs


def golden(routing, probs, capacity):
    """(sorted_indices (E*cap,), permute_probs (E*cap,) or None) from the pad formula: per expert, the
    tokens whose byte is 255, 254, ..., 0 in that order, each bucket ascending; the first capacity."""
    n, e = routing.shape
    u8 = routing.view(np.uint8)
    idx = np.empty((e, capacity), dtype=np.int32)
    for x in range(e):
        order = np.concatenate([np.flatnonzero(u8[:, x] == v) for v in range(255, -1, -1)])
        idx[x] = order[:capacity]
    pp = None if probs is None else probs[idx, np.arange(e)[:, None]].reshape(-1)
    return idx.reshape(-1), pp


def _gm(array, index):
    return GlobalTensor(gm_view(array), index, 0)


def pad_tiling(n, e, cap, soc):
    """The struct fields the pieces read, from the pad tiling (sortLoopMax with aivNum 0, as DoOpTiling)."""
    ub = (soc.ub_size_for_tiling - (40960 if soc.is_regbase else 0)) // 32 * 32
    t = last_dim_sort_tiling(num_tokens=n, num_experts=e, sort_loop_max=sort_loop_max_element(ub, 0),
                             core_num=soc.aiv_num)
    td = LastDimSortTilingData(n=n, capacity=cap, sort_out_one_loop_max_elements=t.sort_out_one_loop_max_elements,
                               **{f"vbs_{f}": t.vbs[f] for f in ("need_core_num", "per_core_elements",
                                                                   "per_core_loops", "per_core_per_loop_elements",
                                                                   "per_core_last_loop_elements", "frontcore_task",
                                                                   "tailcore_task", "front_core_num")})
    return t, td


def run_pad(routing, probs, cap, soc, *, td_override=None):
    """Launch sort (+ SyncAll + MoePermuteProb with probs) on the tiling's block dim; returns (indices, probs
    out, tiling). Unwritten output slots keep the fill value 0x7F.. so the test sees them."""
    n, e = routing.shape
    t, td = pad_tiling(n, e, cap, soc)
    if td_override:
        td = td._replace(**td_override)
    routing_t = np.ascontiguousarray(routing.T)
    out_idx = np.full(e * cap, 0x7F7F7F7F, dtype=np.int32)
    workspace = np.zeros(last_dim_sort_workspace_bytes(t.block_dim, n) // 4 + 64, dtype=np.float32)
    sort_gm = last_dim_sort_gm(_gm(routing_t, 0), _gm(out_idx, 1), _gm(workspace, 2))
    phases = [last_dim_sort_phase(lambda td, sg, pg: (td, sg), SORT_PIPE)]
    plan = list(last_dim_sort_ub_plan(SORT_PIPE, t.vbs["per_core_per_loop_elements"]))
    out_probs, prob_gm = None, None
    if probs is not None:
        probs_t = np.ascontiguousarray(probs.T)
        out_probs = np.full(e * cap * probs.dtype.itemsize, 0x7F, dtype=np.uint8).view(probs.dtype)
        prob_gm = permute_prob_gm(_gm(out_probs, 3), _gm(probs_t, 4), _gm(out_idx, 1))
        phases.append(permute_prob_phase(lambda td, sg, pg: (td, pg), PROB_PIPE))
        plan += permute_prob_ub_plan(PROB_PIPE, probs.dtype.itemsize)
    kernel = Kernel("MoeTokenPermuteWithRoutingMap", "MoeSortMultiLastDimCore<uint8_t> + MoePermuteProb",
                    tuple(phases))
    launch(kernel, block_dim=t.block_dim, plan=plan, args=(td, sort_gm, prob_gm), chip=soc, gm_names=GM_NAMES,
           tiling_key=9)
    return out_idx, out_probs, t


def _cases():
    for sc in SCENARIOS:
        for pname in PROB_DTYPES:
            # the big-N scenarios run once with and once without probs (the sort dominates their time)
            if SCENARIOS[sc].get("ub") and pname not in ("noprobs", "fp32" if "cut" in sc else "bf16"):
                continue
            yield pytest.param(sc, pname, id=f"{sc}-{pname}")


@pytest.mark.parametrize("scenario,pname", list(_cases()))
def test_pad_pieces_match_golden(scenario, pname):
    s = SCENARIOS[scenario]
    routing, probs = make_case(s["n"], s["e"], s["k"], s.get("map", "bool"), PROB_DTYPES[pname])
    soc = get_soc("ascend910b", ub_size=s.get("ub"), aiv_num=s.get("aiv_num"))
    idx, pp, t = run_pad(routing, probs, s["cap"], soc)
    for name, value in s.get("expect", {}).items():
        assert t.vbs[name] == value, f"{scenario}: tiling no longer gives {name} = {value}: {t.vbs}"
    want_idx, want_pp = golden(routing, probs, s["cap"])
    bad = np.flatnonzero(idx != want_idx)
    assert bad.size == 0, f"{scenario}: first wrong slot {bad[0]}: {idx[bad[0]]} != {want_idx[bad[0]]}"
    if probs is not None:
        assert_bits_equal(pp, want_pp, f"{scenario}: permuted probs")


@pytest.mark.parametrize("soc_name", SOCS)
def test_every_profile(soc_name):
    """Default profiles (48 / 64 cores): E > cores gives front and tail cores; mixed bf16 probs."""
    soc = get_soc(soc_name)
    n, e, cap = 37, soc.aiv_num + 5, 9
    routing, probs = make_case(n, e, 4, "bool", BF16, seed=3)
    idx, pp, t = run_pad(routing, probs, cap, soc)
    assert (t.vbs["front_core_num"], t.vbs["tail_core_num"], t.block_dim) == (5, soc.aiv_num - 5, soc.aiv_num)
    want_idx, want_pp = golden(routing, probs, cap)
    assert np.array_equal(idx, want_idx)
    assert_bits_equal(pp, want_pp)


def test_int8_map_values_sort_as_uint8():
    """Bytes other than 0 / 1 (a bad int8 map): the kernel compares them as uint8, so -1 (255) comes first,
    then 2, then 1; the output stays in bounds."""
    routing, probs = make_case(50, 3, 2, "int8", F16, seed=5)
    routing[[3, 9], 0] = -1
    routing[[4, 20], 1] = 2
    routing[7, 2] = -128
    idx, pp, _ = run_pad(routing, probs, 12, get_soc("ascend910b", aiv_num=2))
    want_idx, want_pp = golden(routing, probs, 12)
    assert list(idx[:2]) == [3, 9] and list(idx[12:14]) == [4, 20] and idx[24] == 7
    assert np.array_equal(idx, want_idx)
    assert_bits_equal(pp, want_pp)


def test_capacity_zero_writes_nothing():
    routing, probs = make_case(20, 4, 1, "bool", F32)
    idx, pp, _ = run_pad(routing, probs, 0, get_soc("ascend910b", aiv_num=4))
    assert idx.size == 0 and pp.size == 0


def test_window_reloads_across_1024_tokens():
    """N > 1024 with capacity N: indices jump back to small token ids after the routed ones, so the prob
    window is reloaded backwards and forwards; the outputs leave in chunks of 1024 and a short last one."""
    routing, probs = make_case(2500, 2, 1, "bool", BF16, seed=7)
    idx, pp, _ = run_pad(routing, probs, 2500, get_soc("ascend910b", aiv_num=2))
    want_idx, want_pp = golden(routing, probs, 2500)
    assert np.array_equal(idx, want_idx)
    assert_bits_equal(pp, want_pp)


# --- tiling -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,e,cores,loop_max,want", [
    # E < C: one task per core; lastCoreElements negative once two cores are used (sic)
    (100, 3, 40, 8160, dict(need_core_num=3, front_core_num=3, tail_core_num=0, frontcore_task=1, tailcore_task=0,
                            per_core_elements=100, per_core_loops=1, per_core_per_loop_elements=100,
                            per_core_last_loop_elements=100, last_core_elements=-100, last_core_loops=0,
                            last_core_per_loop_elements=-100, last_core_last_loop_elements=-200,
                            one_loop_max_elements=8160, last_core_ws_index=0)),
    # E divisible by C: every core front, no tail
    (10, 80, 40, 8160, dict(need_core_num=40, front_core_num=40, tail_core_num=0, frontcore_task=2,
                            tailcore_task=2)),
    # E > C with a remainder
    (20000, 83, 40, 6112, dict(need_core_num=40, front_core_num=3, tail_core_num=37, frontcore_task=3,
                               tailcore_task=2, per_core_loops=4, per_core_per_loop_elements=6112,
                               per_core_last_loop_elements=1664)),
    # one expert: the only case where the last-core fields are right
    (7, 1, 48, 6112, dict(need_core_num=1, last_core_elements=7, last_core_loops=1, last_core_last_loop_elements=7)),
], ids=["e-lt-cores", "e-divisible", "e-gt-cores-4-loops", "one-expert"])
def test_last_dim_tiling_fields(n, e, cores, loop_max, want):
    t = last_dim_sort_tiling(num_tokens=n, num_experts=e, sort_loop_max=loop_max, core_num=cores)
    assert set(t.vbs) == set(PWRM_VBS_FIELDS) and tuple(t.vbs) == PWRM_VBS_FIELDS
    assert t.block_dim == t.vbs["need_core_num"] and t.vms_middle_need_core_num == 0
    assert t.sort_out_one_loop_max_elements == 1024
    for name, value in want.items():
        assert t.vbs[name] == value, f"{name}: {t.vbs[name]} != {value}"


def test_workspace_and_ub_rows():
    assert last_dim_sort_workspace_bytes(3, 100) == 3 * 100 * 16
    rows = last_dim_sort_ub_plan("p", 100)
    assert [(r.name, r.bytes, r.count) for r in rows] == [
        ("sortDataCopyInQueue", 32768, 1), ("sortDataCopyOutQueue", 32768, 1), ("indexConcatBuffer", 32768, 1),
        ("sortedBuffer", 32768, 1)]
    assert [(r.name, r.bytes) for r in last_dim_sort_ub_plan("p", 6112)][0] == ("sortDataCopyInQueue", 6112 * 8)
    assert [(r.name, r.bytes) for r in permute_prob_ub_plan("p", 2)] == [
        ("inQue", 2048), ("indiceQue", 4096), ("outQue", 2048)]


def test_ub_too_small_for_the_sort_buffers():
    """The sort's four buffers need at least 4 x 32 KiB: a smaller UB fails before anything runs."""
    routing, _ = make_case(40, 2, 1, "bool", None)
    with pytest.raises(UBOverflowError):
        run_pad(routing, None, 5, get_soc("ascend910b", ub_size=120000, aiv_num=2))


@pytest.mark.parametrize("override", [
    dict(vbs_per_core_elements=10 ** 6),       # rows read far past the map
    dict(capacity=10 ** 6),                    # indices written far past the output
], ids=["rows-past-map", "capacity-past-output"])
def test_inconsistent_tiling_is_a_simulator_error(override):
    routing, probs = make_case(40, 2, 1, "bool", F16)
    with pytest.raises(SimulatorError):
        run_pad(routing, probs, 5, get_soc("ascend910b", aiv_num=2), td_override=override)
