"""MoeTokenUnpermuteGrad tiling: all 13 host UTs of
moe/moe_token_unpermute_grad/tests/ut/op_host/test_moe_token_unpermute_grad_tiling.cpp @ 25fb6b92890d, the kernel UT's
figures, and the cases where the real tiling fails or quietly leaves its in-core fields at 0."""
from __future__ import annotations

import ml_dtypes
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling.moe_token_unpermute_grad import in_core_split_done
from tiling.moe_token_unpermute_grad import moe_token_unpermute_grad as tiling_ug

BF16, F16, F32 = ml_dtypes.bfloat16, "float16", "float32"
# the host UTs run with 64 AIV cores and ub_size 262144 (GetCoreMemSize gives 261888)
UT_SOC = get_soc("ascend910b", aiv_num=64, ub_size=262144)
WORKSPACE = 16 * 1024 * 1024


def _inputs(h, dtype, probs_dtype=None, probs=True):
    """The UTs' shapes: permuted (30, h), grad (10, h), sorted indices (30,), probs (10, 3)."""
    return (T((30, h), dtype), T((10, h), dtype), T((30,), "int32"),
            T((10, 3), probs_dtype or dtype) if probs else None)


UT_CASES = {
    # test name in test_moe_token_unpermute_grad_tiling.cpp: (inputs, key, tiling data)
    "test_tiling_prob_not_none_bf16_001": (_inputs(64, BF16), 1, "10 3 64 30 10 54 1 0 3 0 256 1 64 3 3 16 261888"),
    "test_tiling_prob_not_none_bf16_002": (_inputs(64, BF16, F32), 1, "10 3 64 30 10 54 1 0 3 0 256 1 64 3 3 8 261888"),
    "test_tiling_prob_none_bf16_001": (_inputs(64, BF16, probs=False), 0,
                                       "10 1 64 30 10 54 1 0 1 0 64 1 64 992 992 992 261888"),
    "test_tiling_prob_not_none_split_h_bf16_001": (_inputs(8192, BF16), 1,
                                                   "10 3 8192 30 10 54 1 0 3 0 8192 1 8192 1 3 16 261888"),
    "test_tiling_prob_not_none_fp16_001": (_inputs(64, F16), 1, "10 3 64 30 10 54 1 0 3 0 256 1 64 3 3 16 261888"),
    "test_tiling_prob_none_fp16_001": (_inputs(64, F16, probs=False), 0,
                                       "10 1 64 30 10 54 1 0 1 0 64 1 64 992 992 992 261888"),
    "test_tiling_prob_not_none_split_h_fp16_001": (_inputs(8192, F16), 1,
                                                   "10 3 8192 30 10 54 1 0 3 0 8192 1 8192 1 3 16 261888"),
    "test_tiling_prob_not_none_split_h_fp16_002": (_inputs(8192, F16, F32), 1,
                                                   "10 3 8192 30 10 54 1 0 3 0 8192 1 8192 1 3 8 261888"),
    "test_tiling_prob_not_none_fp32_001": (_inputs(64, F32), 1, "10 3 64 30 10 54 1 0 3 0 128 1 64 3 3 8 261888"),
    "test_tiling_prob_none_fp32_001": (_inputs(64, F32, probs=False), 0,
                                       "10 1 64 30 10 54 1 0 1 0 64 1 64 496 496 496 261888"),
    "test_tiling_prob_not_none_split_h_fp32_001": (_inputs(8192, F32), 1,
                                                   "10 3 8192 30 10 54 1 0 3 0 7168 2 1024 1 3 8 261888"),
    "test_tiling_prob_not_none_split_h_fp32_002": (_inputs(8192, F32, BF16), 1,
                                                   "10 3 8192 30 10 54 1 0 3 0 7168 2 1024 1 3 16 261888"),
    "test_tiling_prob_none_split_h_bf16_001": (_inputs(8192, BF16, probs=False), 0,
                                               "10 1 8192 30 10 54 1 0 1 0 8176 2 16 8 8 8 261888"),
}


@pytest.mark.parametrize("case", UT_CASES)
def test_host_ut_figures(case):
    inputs, key, data = UT_CASES[case]
    result = tiling_ug(*inputs, soc=UT_SOC)
    assert result.tiling_key == key
    assert result.data() == [int(v) for v in data.split()]
    assert result.workspace_size == WORKSPACE
    assert result.block_dim == 64
    assert result.ub_fits


def test_kernel_ut_reference():
    """The kernel UT's tiling (910B, totalUbSize 196352, 48 cores, bf16, N = 10, K = 3, H = 64)."""
    f = tiling_ug(None, T((10, 64), BF16), T((30,), "int32"), T((10, 3), BF16), soc="ascend910b").fields
    assert (f["former_core_num"], f["tail_core_num"], f["hidden_size_align"], f["indices_reserve_num"],
            f["indices_reserve_num_align"], f["input_reserve_num"], f["total_ub_size"]) == \
        (10, 38, 256, 3, 16, 3, 196352)


@pytest.mark.parametrize("case,inputs", [
    ("tokens_0", (None, T((0, 64), BF16), T((30,), "int32"), T((0, 3), BF16))),
    ("hidden_0", (None, T((10, 0), BF16), T((30,), "int32"), T((10, 3), BF16))),
    ("topk_0", (None, T((10, 64), BF16), T((0,), "int32"), T((10, 0), BF16))),
    ("sorted_indices_empty", (None, T((10, 64), BF16), T((0,), "int32"), None)),
    ("grad_1d", (None, T((10,), BF16), T((10,), "int32"), None)),
    ("topk_513", (None, T((2, 64), BF16), T((1026,), "int32"), T((2, 513), BF16))),
    ("grad_missing", (None, None, T((10,), "int32"), None)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_failures_are_561002(case, inputs):
    with pytest.raises(TilingError) as e:
        tiling_ug(*inputs, soc="ascend910b")
    assert e.value.status == 561002
    assert ("512" in e.value.message) if case == "topk_513" else True


def test_topk_512_is_accepted():
    r = tiling_ug(None, T((2, 16), BF16), T((1024,), "int32"), T((2, 512), BF16), soc="ascend910b")
    assert (r.fields["indices_reserve_num"], r.fields["top_k"]) == (512, 512) and in_core_split_done(r.fields)


@pytest.mark.parametrize("case,inputs", [
    ("int8_tokens", (None, T((10, 64), "int8"), T((10,), "int32"), None)),
    ("int8_probs", (None, T((10, 64), BF16), T((30,), "int32"), T((10, 3), "int8"))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_zero_byte_dtype_leaves_in_core_fields_zero(case, inputs):
    """The dtype-size check sits in the in-core split, whose status the real tiling ignores: success, fields 0."""
    r = tiling_ug(*inputs, soc="ascend910b")
    assert not in_core_split_done(r.fields)
    assert r.fields["hidden_size_align"] == r.fields["indices_reserve_num"] == 0
    assert r.fields["tokens_num"] == 10


def test_probs_split_failure_is_ignored_by_the_real_tiling():
    """A UB too small for one 512-byte hidden piece: the split returns false, the tiling succeeds with zeros."""
    r = tiling_ug(None, T((4, 64), F32), T((8,), "int32"), T((4, 2), F32), soc=get_soc("910b", ub_size=1024))
    assert r.fields["hidden_size_align"] == 0 and not in_core_split_done(r.fields)


def test_prob_none_hidden_division_by_zero_is_refused():
    """Tiny UB: hiddenSizeAlign comes out 0 and the real host code would divide by it."""
    with pytest.raises(TilingError, match="divides by zero"):
        tiling_ug(None, T((4, 64), BF16), T((4,), "int32"), None, soc=get_soc("910b", ub_size=360))


def test_prob_none_wrapped_unsigned_ub_keeps_the_row_whole():
    """(UB - 8 rows of indices) wraps around as uint64 when UB is tiny: no hidden split, as on the host."""
    r = tiling_ug(None, T((4, 16), F32), T((4,), "int32"), None, soc=get_soc("910b", ub_size=288))
    assert (r.fields["hidden_size_align"], r.fields["hidden_size_loop_times"], r.fields["indices_reserve_num"]) == \
        (16, 1, 8)
