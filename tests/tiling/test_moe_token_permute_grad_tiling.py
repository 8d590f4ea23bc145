"""MoeTokenPermuteGrad tiling: every host UT of moe_token_permute_grad/tests/ut/op_host/
test_moe_token_permute_grad_tiling.cpp (default context: 64 cores, UB_SIZE 262144, so tiling sees 261888),
the optional probs input the UTs pass as input 2, num_topk -1, and the UB plan."""
from __future__ import annotations

import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling.moe_token_permute_grad import FIELDS
from tiling.moe_token_permute_grad import moe_token_permute_grad as tile

UT_SOC = get_soc("ascend910b", aiv_num=64, ub_size=262144)

# UT name: (grad shape, dtype, num_topk, probs (shape, dtype) or None, (cores, ub_size) or None, key, data)
UT_CASES = {
    "test_tiling_bf16": ((49152, 5120), "bf16", 8, None, None, 0, "5120 8 49152 5120 1 0 96 0 96 1 0 4"),
    "test_tiling_fp16": ((49152, 5120), "fp16", 8, None, None, 2, "5120 8 49152 5120 1 0 96 0 96 1 0 4"),
    "test_tiling_fp32": ((49152, 5120), "fp32", 8, None, None, 4, "5120 8 49152 5120 1 0 96 0 96 1 0 4"),
    "test_tiling_small_tokens": ((32, 5120), "bf16", 8, None, None, 0, "5120 8 32 5120 1 0 1 0 1 1 0 4"),
    "test_tiling_split_hidden_bf16": ((49152, 8192), "bf16", 8, None, None, 0, "8192 8 49152 8192 1 0 96 0 96 1 0 4"),
    "test_tiling_split_hidden_fp32": ((49152, 8192), "fp32", 8, None, None, 4, "8192 8 49152 8192 1 0 96 0 96 1 0 4"),
    "test_tiling_small_ub_large_topk": ((49152, 5120), "bf16", 64, None, (64, 65536), 0,
                                        "5120 64 49152 4096 1 1024 12 0 12 1 0 2"),
    "test_tiling_small_ub_token_split": ((196608, 5120), "bf16", 512, None, (64, 32768), 0,
                                         "5120 512 196608 1536 3 512 6 0 3 2 0 3"),
    "test_tiling_split_hidden_fp32_large": ((49152, 32768), "fp32", 8, None, None, 4,
                                            "32768 8 49152 20992 1 11776 96 0 96 1 0 2"),
    "test_tiling_with_probs_bf16": ((49152, 5120), "bf16", 8, ((6144, 8), "bf16"), None, 1,
                                    "5120 8 49152 5120 1 0 96 0 96 1 0 4"),
    "test_tiling_with_probs_fp32_mix": ((49152, 5120), "bf16", 8, ((6144, 8), "fp32"), None, 25,
                                        "5120 8 49152 5120 1 0 96 0 96 1 0 4"),
}


@pytest.mark.parametrize("case", UT_CASES)
def test_host_ut_figures(case):
    shape, dtype, topk, probs, chip, key, data = UT_CASES[case]
    soc = UT_SOC if chip is None else get_soc("ascend910b", aiv_num=chip[0], ub_size=chip[1])
    result = tile(T(shape, dtype), T((shape[0],), "int32"), topk, False,
                  probs=None if probs is None else T(*probs), soc=soc)
    assert (result.tiling_key, " ".join(map(str, result.data())), result.workspace_size) == \
        (key, data, 16 * 1024 * 1024)
    assert list(result.fields) == list(FIELDS)
    tokens = probs[0][0] if probs else shape[0] // topk
    assert result.block_dim == min(64, tokens)


def test_tiling_data_field_order():
    # MoeTokenPermuteGrad_tiling_data_field_access: the struct's fields in declaration order
    assert FIELDS[:3] == ("hidden_size", "top_k", "num_out_tokens") and FIELDS[-1] == "buffer_num"
    assert len(FIELDS) == 12


@pytest.mark.parametrize("topk,tokens", [(-1, 24), (1, 24), (3, 8), (0, 0)], ids=["minus1-as-1", "topk1", "topk3",
                                                                                  "topk0-no-tokens"])
def test_num_topk_gives_tokens_and_block_dim(topk, tokens):
    result = tile(T((20, 64), "fp16"), T((24,), "int32"), topk, soc="ascend910b")
    f = result.fields
    assert f["top_k"] == (1 if topk == -1 else topk)
    assert f["tokens_core_length"] * result.block_dim + f["tokens_core_remain"] == tokens
    assert result.block_dim == min(tokens, 48) and f["num_out_tokens"] == 20 and result.tiling_key == 2


@pytest.mark.parametrize("dtype,names", [
    ("fp32", ["tokens_inque", "indices_inque", "outque"]),
    ("bf16", ["tokens_inque", "indices_inque", "outque", "temp_buffer0", "temp_buffer1"]),
])
def test_ub_plan_is_kernel_g_without_probs(dtype, names):
    result = tile(T((40, 300), dtype), T((40,), "int32"), 4, soc="ascend950")
    assert [r.name for r in result.ub_plan] == names
    assert result.ub_fits and result.block_dim == 10


def test_probs_plan_and_keys():
    result = tile(T((48, 64), "fp16"), T((48,), "int32"), 5, probs=T((12, 4), "bf16"))
    assert result.tiling_key == 2 + 1 + 8 and result.fields["top_k"] == 4
    assert [r.name for r in result.ub_plan][-2:] == ["probs_inque", "temp_buffer2"]


def test_not_2d_gradient_fails():
    with pytest.raises(TilingError, match="2-D"):
        tile(T((40,), "bf16"), T((40,), "int32"), 4)
