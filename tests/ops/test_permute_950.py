"""MoeTokenPermute / MoeTokenPermuteV2 on Ascend 950: the real aclnn chains (MoeInitRoutingV3 for V2 and V1 with int8
tokens, MoeInitRoutingV2 for V1 with fp16 / bf16 / fp32 tokens), their steps, tilingKeys, the drop of expert ids
outside [0, 10240) on the V3 chain, a custom small-UB profile, and checked mode. Results are compared bit for bit
against goldens written from the op's definition (ops/permute/golden.py)."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import ops
from ascend_sim import UBOverflowError
from ops.permute import allocate_outputs, get_workspace_size, get_workspace_size_v2
from ops.permute.examples import make_inputs
from ops.permute.golden import golden, golden_950
from tests.bits import assert_bits_equal
from tiling import get_soc

aclnn = ops.aclnn
BF16 = ml_dtypes.bfloat16
DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": BF16, "int8": np.int8}
# a UB below the stock 256 KB that both chains still fit: MoeInitRoutingV3's count TPipe takes 164 KB with 10240
# experts, MoeInitRoutingV2's multi-core sort 192 KB (int32 ids) / 224 KB (int64 ids) whatever the UB
SMALL_UB = dict(ub_size=232000, aiv_num=8)

# id: (tokens, hidden, experts, topK, numOutTokens, soc overrides, V1 fp key, V3 key)
SHAPES = {
    "one-core": (37, 300, 8, 3, 0, {}, 11001, 10000000),
    "hidden1-topk1": (20, 1, 6, 1, 0, {}, 11001, 10000000),
    "drop-rows": (37, 300, 8, 3, 50, {}, 11001, 10000000),
    "drop-rows-negative": (37, 300, 8, 3, -20, {}, 11001, 10000000),
    "multi-core": (900, 24, 64, 8, 0, {}, 11002, 11000000),
    "multi-core-drop": (900, 24, 64, 8, -1000, {}, 11002, 11000000),
    "small-ub-multi-core": (900, 40, 64, 8, 3000, SMALL_UB, 11002, 11000000),
    "small-ub-col-pieces": (6, 60000, 4, 2, 0, SMALL_UB, 11001, 10000000),
}


def _v1_run(tokens, indices, num_out, soc):
    permute_out, sorted_out, _ = allocate_outputs(tokens, indices, num_out, soc=soc)
    size, executor = get_workspace_size(tokens, indices, num_out, False, permute_out, sorted_out, soc=soc)
    aclnn.moe_token_permute(np.empty(size, np.uint8), size, executor)
    return permute_out, sorted_out, executor


def _cases():
    for (shape, spec), (dt, dtype), idx_dt in itertools.product(SHAPES.items(), DTYPES.items(), ("int32", "int64")):
        if shape.startswith("small-ub") and (dt, idx_dt) not in (("bf16", "int64"), ("int8", "int32")):
            continue
        yield pytest.param(shape, spec, dtype, idx_dt, id=f"{shape}-{dt}-{idx_dt}")


@pytest.mark.parametrize("shape,spec,dtype,idx_dt", list(_cases()))
def test_v1_runs_its_950_chain(shape, spec, dtype, idx_dt):
    """V1: int8 tokens through MoeInitRoutingV3 (every slot, the caller's rows sliced), the others through
    MoeInitRoutingV2 with numOutTokens; both give V1's result for ids in [0, 10240)."""
    n, h, e, k, num_out, overrides, v2_key, v3_key = spec
    soc = get_soc("ascend950", **overrides)
    tokens, indices = make_inputs(n, h, e, topk=k, dtype=dtype, indices_dtype=idx_dt, distinct=False,
                                  one_dim=k == 1, seed=n + h)
    permute_out, sorted_out, executor = _v1_run(tokens, indices, num_out, soc)
    int8 = np.dtype(dtype) == np.int8
    steps = [s.name for s in executor.report.steps]
    assert ("l0op::MoeInitRoutingV3" if int8 else "l0op::MoeInitRoutingV2") in steps
    assert executor.tiling.tiling_key == (v3_key if int8 else v2_key)
    want_tokens, want_sorted = golden(tokens, indices, num_out)
    assert_bits_equal(sorted_out, want_sorted, "sorted_indices")
    assert_bits_equal(permute_out, want_tokens, "permute_tokens")


@pytest.mark.parametrize("shape", ["one-core", "multi-core", "small-ub-multi-core"])
@pytest.mark.parametrize("idx_dt", ["int32", "int64"])
def test_v2_drops_expert_ids_outside_the_v3_range(shape, idx_dt):
    """MoeInitRoutingV3 keeps ids in [0, 10240): -1, -2^31, 10240 and above get sorted_indices -1 and no row; the
    rows of the kept slots come first, in id order; the caller's rows past the kept count are not written (they
    keep the intermediate's poison pattern)."""
    n, h, e, k, _, overrides, _, v3_key = SHAPES[shape]
    soc = get_soc("ascend950", **overrides)
    tokens, indices = make_inputs(n, h, e, topk=k, dtype=BF16, indices_dtype=idx_dt, distinct=False, seed=n)
    rng = np.random.default_rng(n)
    flat = indices.reshape(-1)
    out_of_range = np.array([-1, 10240, 10241, 2**31 - 1, -2**31, 20000], dtype=np.int64)
    picks = rng.choice(flat.size, size=flat.size // 5, replace=False)
    flat[picks] = rng.choice(out_of_range, picks.size).astype(flat.dtype)
    got = ops.moe_token_permute(tokens, indices, soc=soc)
    assert ops.aclnn and got[0].shape[0] == flat.size
    want_tokens, want_sorted, _, written = golden_950(tokens, indices, flat.size)
    assert written == flat.size - picks.size
    assert_bits_equal(got[1], want_sorted, "sorted_indices")
    assert_bits_equal(got[0][:written], want_tokens[:written], "permute_tokens")
    assert np.isnan(got[0][written:].astype(np.float32)).all()     # not written: the poison pattern (NaN in bf16)


def test_v1_int8_report_lists_the_v3_chain_steps():
    """BuildMoeInitRoutingV3Executor: no Cast for int32 ids, and V1 slices no scale."""
    tokens, indices = make_inputs(16, 64, 8, topk=2, dtype=np.int8, indices_dtype="int32")
    permute_out, sorted_out, _ = allocate_outputs(tokens, indices, 0, soc="950")
    size, executor = get_workspace_size(tokens, indices, 0, False, permute_out, sorted_out, soc="950")
    assert [s.name for s in executor.steps] == [
        "l0op::MoeInitRoutingV3", "l0op::Slice", "l0op::ViewCopy", "l0op::Slice", "l0op::ViewCopy"]


def test_v1_fp_report_lists_the_v2_chain_steps():
    tokens, indices = make_inputs(16, 64, 8, topk=2, dtype=np.float16, indices_dtype="int64")
    permute_out, sorted_out, _ = allocate_outputs(tokens, indices, 0, soc="950")
    size, executor = get_workspace_size(tokens, indices, 0, False, permute_out, sorted_out, soc="950")
    assert [s.name for s in executor.steps] == ["l0op::MoeInitRoutingV2", "l0op::ViewCopy", "l0op::ViewCopy"]


def test_v2_report_lists_the_chain_steps():
    tokens, indices = make_inputs(16, 64, 8, topk=2, indices_dtype="int64")
    outs = allocate_outputs(tokens, indices, 0, 3, soc="950")
    size, executor = get_workspace_size_v2(tokens, indices, 0, False, 3, *outs, soc="950")
    aclnn.moe_token_permute_v2(np.empty(size, np.uint8), size, executor)
    assert [s.name for s in executor.report.steps] == [
        "l0op::Cast", "l0op::MoeInitRoutingV3"] + ["l0op::Slice", "l0op::ViewCopy"] * 3
    assert [s.kind for s in executor.report.steps].count("kernel") == 1
    assert executor.tiling.tiling_key == 10030000 and executor.report.main.estimate is not None
    assert "MoeGatherOutMxfp8Quant" in str(executor.report)


@pytest.mark.parametrize("path", ["v2-mxfp8", "v2-mxfp4", "v2-none", "v1-fp16", "v1-int8"])
def test_950_chains_are_clean_in_checked_mode(path):
    """check='race' over each chain's simulated kernels (the real races are waived at their source)."""
    soc = get_soc("ascend950", aiv_num=4)
    dtype = np.int8 if path == "v1-int8" else (np.float16 if path == "v1-fp16" else BF16)
    tokens, indices = make_inputs(300, 64, 16, topk=4, dtype=dtype, distinct=False, seed=5)
    if path.startswith("v1"):
        permute_out, sorted_out, _ = allocate_outputs(tokens, indices, 0, soc=soc)
        size, executor = get_workspace_size(tokens, indices, 0, False, permute_out, sorted_out, soc=soc)
        aclnn.moe_token_permute(np.empty(size, np.uint8), size, executor, check="race")
        want = golden(tokens, indices)
        assert_bits_equal(permute_out, want[0], "permute_tokens")
        return
    quant = {"v2-mxfp8": 2, "v2-mxfp4": 9, "v2-none": -1}[path]
    got = ops.moe_token_permute(tokens, indices, quant_mode=quant, soc=soc, check="race")
    want = golden_950(tokens, indices, tokens.shape[0] * 4, quant)
    for g, w, what in zip(got, want, ("permute_tokens", "sorted_indices", "expanded_scale")):
        assert_bits_equal(g, w, what)


def test_tiling_of_the_950_permute_is_the_v3_launch():
    """tiling.moe_token_permute on a regbase profile: the MoeInitRoutingV3 tiling of V2's chain (MoeTokenPermute
    has no 950 kernel), with its UB plan."""
    from tiling import moe_token_permute as tiling_permute
    r = tiling_permute(np.zeros((4096, 7168), BF16), np.zeros((4096, 8), np.int32), 0, False, 2, soc="950")
    assert r.tiling_key == 11030000 and r.fields["expert_num"] == 10240 and r.fields["row_idx_type"] == 0
    assert {b.pipe for b in r.ub_plan} == {"sortPipe", "histogramPipe", "rowIdxPipe", "gatherPipe"}
    assert r.ub_fits


def test_v1_multi_core_sort_needs_its_fixed_merge_windows():
    """MoeInitRoutingV2's multi-core sort sizes its buffers for four 2048-pair merge windows whatever the UB: on a
    180 KB UB the launch is refused with the TPipe and buffer named (the real kernel would overrun its UB)."""
    soc = get_soc("ascend950", ub_size=180000, aiv_num=8)
    tokens, indices = make_inputs(900, 40, 64, topk=8, dtype=np.float16, distinct=False)
    with pytest.raises(UBOverflowError, match="sortPipe"):
        _v1_run(tokens, indices, 0, soc)
