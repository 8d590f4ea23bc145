"""The shared masked select (ops/common/masked_select.py) against NumPy's boolean indexing, bit-exact.

Each case launches the masked-select phase alone on a chip profile, over the flat map and values the
real ops hand it (PWRM: routingMap^T and probs^T, expert-major; UWRM: token-major probs and map).
A small-UB profile forces several tiles per core; three cores with five mask rows give uneven
former / tail shares; idle cores beyond needCoreNum run too.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Kernel, OutOfBoundsError, PipePhase, launch
from ascend_sim._jit import global_aicore
from ascend_sim.dtypes import dt_of, gm_view
from ops.common.masked_select import (
    M_ACTUAL_OUT_TOKENS,
    masked_select_gm,
    masked_select_phase,
    masked_select_td,
    pwrm_template,
    uwrm_template,
)
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.masked_select import masked_select_tiling, masked_select_ub_plan

SMALL_UB = get_soc("ascend910b", ub_size=6256, aiv_num=4)   # tiles of 128 elements for 2- and 4-byte values
BIG_UB = get_soc("ascend910b", aiv_num=4)
SENTINEL = 0x5A


@global_aicore
def dump_members_stage(c, out):
    """Every core's actualOutTokens member, to GM (the test's window into the kernel object)."""
    asc.set_value(c, out, c.block_idx, asc.members(c)[M_ACTUAL_OUT_TOKENS])


def _gm(array, index):
    return asc.GlobalTensor(gm_view(array), index, 0)


def run_masked_select(mask, values, *, pwrm, soc, top_k=0, external=None, out_len=None):
    """Launch the masked select over the flat `mask` (rows x tokens) and `values`; returns
    (out_values, out_indices, actualOutTokens per core, report). PWRM with `external` runs the kFull phase
    and then the gather-external phase, as the non-topK path of the real op does."""
    rows, tokens = mask.shape
    elem_bytes = values.dtype.itemsize if values is not None else 2
    ub = soc.ub_size_for_tiling
    fields = masked_select_tiling(ub_bytes=ub // 32 * 32 if pwrm else ub, core_num=soc.aiv_num, num_tokens=tokens,
                                  num_experts=rows, elem_bytes=elem_bytes, skip_empty_tile=pwrm)
    td = masked_select_td(fields, top_k)
    out_len = mask.size if out_len is None else out_len
    out_values = np.full(out_len * elem_bytes, SENTINEL, dtype=np.uint8).view(values.dtype if values is not None
                                                                                 else np.uint16)
    out_indices = np.full(out_len, -7, dtype=np.int32)
    workspace = np.full(64, -1, dtype=np.int32)
    members = np.full(soc.aiv_num, -1, dtype=np.int64)
    gm = masked_select_gm(_gm(mask, 0), _gm(values, 1) if values is not None else None,
                          _gm(out_values, 2) if values is not None else None, _gm(out_indices, 3) if pwrm else None,
                          _gm(workspace, 4), _gm(external, 5) if external is not None else None)
    value_t = dt_of(values.dtype) if values is not None else asc.DT_FLOAT16
    has_values = values is not None
    tmpl = pwrm_template(value_t, has_values) if pwrm else uwrm_template(value_t)
    plan_args = dict(elem_bytes=elem_bytes, with_values=has_values, with_indices=pwrm)
    plan = list(masked_select_ub_plan(fields, pipe="ms", **plan_args))
    phases = [masked_select_phase("ms", lambda td, gm, t, _e: (td, gm, t), [b.name for b in plan])]
    if external is not None:
        ext_plan = masked_select_ub_plan(fields, pipe="msExt", **plan_args)
        plan += ext_plan
        phases += [PipePhase("sync", (), (SYNC_ALL,)),
                   masked_select_phase("msExt", lambda td, gm, _t, t: (td, gm, t), [b.name for b in ext_plan])]
    phases.append(PipePhase("dump", (), (SYNC_ALL, dump_members_stage), lambda *a: (asc.GlobalTensor(members, 6, 0),)))
    kernel = Kernel("MaskedSelectTest", "KernelMaskedSelectV3" if pwrm else "KernelMaskedSelect", tuple(phases))
    ext_tmpl = pwrm_template(value_t, has_values, gather_external=True)
    report = launch(kernel, block_dim=soc.aiv_num, plan=plan, args=(td, gm, tmpl, ext_tmpl), chip=soc,
                    gm_names=("mask", "values", "out_values", "out_indices", "workspace", "external_index"),
                    threads=2)
    return out_values, out_indices, members, report, fields


def _topk_map(rng, tokens, experts, top_k, dtype):
    """(tokens, experts) map with exactly top_k ones per token."""
    m = np.zeros((tokens, experts), dtype=dtype)
    for t in range(tokens):
        m[t, rng.choice(experts, top_k, replace=False)] = 1
    return m


def _values(rng, shape, dtype):
    if dtype is None:
        return None
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


VALUE_DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32, "no_probs": None}


@pytest.mark.parametrize("map_dtype", [np.bool_, np.int8], ids=["bool_map", "int8_map"])
@pytest.mark.parametrize("value_dtype", list(VALUE_DTYPES))
@pytest.mark.parametrize("tokens,experts,top_k,soc", [
    (300, 5, 2, SMALL_UB),   # 128-element tiles, ids wrap inside tiles; cores take 2, 2, 1 expert rows
    (100, 3, 3, SMALL_UB),   # a tile is one expert row: token ids built once in pass 1
], ids=["tiles_wrap", "tile_is_row"])
def test_pwrm_full_selects_probs_and_token_ids(tokens, experts, top_k, soc, value_dtype, map_dtype):
    rng = np.random.default_rng(tokens + experts)
    routing_map = _topk_map(rng, tokens, experts, top_k, map_dtype)
    probs = _values(rng, (tokens, experts), VALUE_DTYPES[value_dtype])
    mask_t = np.ascontiguousarray(routing_map.T)            # the aclnn transposes before the l0 kernel
    probs_t = np.ascontiguousarray(probs.T) if probs is not None else None
    out_values, out_indices, members, report, fields = run_masked_select(mask_t, probs_t, pwrm=True, soc=soc,
                                                                          top_k=top_k)
    assert fields["formertile_num"] > 1 or fields["formertile_length"] == tokens
    selected = mask_t.reshape(-1) != 0
    n = tokens * top_k
    assert np.array_equal(out_indices[:n], np.flatnonzero(selected) % tokens)
    assert np.all(out_indices[n:] == -7)
    if probs is not None:
        assert_bits_equal(out_values[:n], probs_t.reshape(-1)[selected])
    assert np.all(members == n)
    assert all(core.vec_instr > 0 for core in report.cores[: fields["need_core_num"]])


def test_pwrm_non_topk_skips_full_pass_then_gathers_external_index():
    rng = np.random.default_rng(7)
    tokens, experts, top_k = 300, 5, 2
    routing_map = _topk_map(rng, tokens, experts, top_k, np.bool_)
    routing_map[::3, :] = False                               # some tokens keep fewer than topK experts
    probs = _values(rng, (tokens, experts), np.float16)
    mask_t, probs_t = np.ascontiguousarray(routing_map.T), np.ascontiguousarray(probs.T)
    external = rng.integers(0, 10 ** 6, mask_t.size).astype(np.int32)
    out_values, out_indices, members, _, _ = run_masked_select(mask_t, probs_t, pwrm=True, soc=SMALL_UB,
                                                               top_k=top_k, external=external)
    selected = mask_t.reshape(-1)
    n = int(selected.sum())
    assert n < tokens * top_k and np.all(members == n)
    assert np.array_equal(out_indices[:n], external[selected])
    assert_bits_equal(out_values[:n], probs_t.reshape(-1)[selected])
    assert np.all(out_indices[n:] == -7)


@pytest.mark.parametrize("map_dtype", [np.bool_, np.int8], ids=["bool_map", "int8_map"])
@pytest.mark.parametrize("value_dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("tokens,experts,soc", [
    (300, 5, SMALL_UB),      # several 128-element tiles per core, 2-tier reduce
    (700, 3, BIG_UB),        # one 700-element tile per core: the >= 512 reduce tier
    (4100, 2, BIG_UB),       # the >= 4096 reduce tier
], ids=["small_ub_tiles", "tier_512", "tier_4096"])
def test_uwrm_selects_values_token_major(tokens, experts, soc, value_dtype, map_dtype):
    rng = np.random.default_rng(tokens)
    routing_map = (rng.random((tokens, experts)) < 0.35).astype(map_dtype)
    probs = _values(rng, (tokens, experts), VALUE_DTYPES[value_dtype])
    # masked_select.h splits the flat token-major array into `experts` chunks of `tokens` elements
    out_values, _, _, _, _ = run_masked_select(routing_map.reshape(experts, tokens), probs.reshape(experts, tokens),
                                               pwrm=False, soc=soc)
    selected = routing_map.reshape(-1) != 0
    n = int(selected.sum())
    assert_bits_equal(out_values[:n], probs.reshape(-1)[selected])
    assert np.all(out_values[n:].view(np.uint8) == SENTINEL)


@pytest.mark.parametrize("pwrm", [True, False], ids=["pwrm", "uwrm"])
def test_empty_selection_writes_nothing(pwrm):
    probs = np.ones((5, 300), dtype=np.float32)
    mask = np.zeros((5, 300), dtype=np.bool_)
    out_values, out_indices, members, _, _ = run_masked_select(mask, probs, pwrm=pwrm, soc=SMALL_UB, top_k=0)
    assert np.all(out_values.view(np.uint8) == SENTINEL) and np.all(out_indices == -7)
    if pwrm:
        assert np.all(members == 0)


def _byte_two_map():
    """An int8 token-major map whose core-0 chunk holds a 2 and a -1 (read as 255)."""
    rng = np.random.default_rng(3)
    m = (rng.random((5, 300)) < 0.3).astype(np.int8)
    m[0, 10], m[0, 20] = 2, -1
    return m


def test_int8_map_bytes_other_than_one_are_counted_not_selected():
    # pass 1 adds the bytes (2 + 255 = 257 extra) but CompareScalar == 1.0 rejects both: cores 1 and 2 write
    # 257 slots further on, leaving a gap after core 0's ones
    mask = _byte_two_map()
    probs = np.arange(mask.size, dtype=np.float32).reshape(mask.shape)
    out_values, _, _, _, fields = run_masked_select(mask, probs, pwrm=False, soc=SMALL_UB)
    u8 = mask.view(np.uint8).reshape(-1).astype(np.int64)
    bounds = [0]
    for core in range(fields["need_core_num"]):
        share = fields["former_length"] if core < fields["former_num"] else fields["tail_length"]
        bounds.append(bounds[-1] + share)
    flat = probs.reshape(-1)
    for core in range(fields["need_core_num"]):
        lo, hi = bounds[core], bounds[core + 1]
        start = int(u8[:lo].sum())
        ones = flat[lo:hi][u8[lo:hi] == 1]
        assert np.array_equal(out_values[start: start + ones.size], ones)
    core0_ones = int((u8[: bounds[1]] == 1).sum())
    assert np.all(out_values[core0_ones: core0_ones + 257].view(np.uint32) == 0x5A5A5A5A)


def test_int8_map_byte_sum_is_pwrm_actual_out_tokens():
    mask = _byte_two_map()
    _, out_indices, members, _, _ = run_masked_select(mask, None, pwrm=True, soc=SMALL_UB, top_k=1)
    assert np.all(members == mask.view(np.uint8).sum(dtype=np.int64))
    assert np.all(out_indices == -7)       # byte sum != topK * N: the kFull pass writes nothing


def test_int8_map_shift_past_the_output_end_is_out_of_bounds():
    mask = _byte_two_map()
    probs = np.ones(mask.shape, dtype=np.float16)
    with pytest.raises(OutOfBoundsError, match="out_values"):
        run_masked_select(mask, probs, pwrm=False, soc=SMALL_UB, out_len=int((mask == 1).sum()))
