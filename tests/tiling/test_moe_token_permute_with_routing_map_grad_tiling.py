"""MoeTokenPermuteWithRoutingMapGrad tiling: the real op's host UT figures (UB_SIZE 262144, 64 cores), the
drop-and-pad core split, the topK limit, and the UB plans of both kernels."""
from __future__ import annotations

import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling.moe_token_permute_with_routing_map_grad import FIELDS
from tiling.moe_token_permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad as tile

UT_SOC = get_soc("ascend910b", aiv_num=64, ub_size=262144)     # tiling sees 261888 bytes


def _data(result) -> str:
    return " ".join(str(v) for v in result.data())


# UT name: (Gp shape, dtype, num_experts, tokens_num, padded_mode, key, tiling data)
UT_CASES = {
    "test_tiling_bf16_mix": ((1024, 7168), "bf16", 512, 512, False, 0, "7168 2 1024 7168 1 0 8 0 8 1 0 4 0 0 0 0 0"),
    "test_tiling_fp32": ((1024, 7168), "fp32", 512, 512, True, 1000, "0 0 0 0 0 0 0 0 0 0 0 0 2 512 512 16 16"),
    "test_tiling_fp16": ((1024, 7168), "fp16", 512, 512, True, 1000, "0 0 0 0 0 0 0 0 0 0 0 0 2 512 512 16 16"),
    "test_tiling_bf16": ((1024, 7168), "bf16", 512, 512, True, 1000, "0 0 0 0 0 0 0 0 0 0 0 0 2 512 512 16 16"),
}


@pytest.mark.parametrize("case", UT_CASES)
def test_host_ut_figures(case):
    shape, dtype, experts, tokens, pad, key, data = UT_CASES[case]
    result = tile(T(shape, dtype), None, T((shape[0],), "int32"), None, experts, tokens, pad, soc=UT_SOC)
    assert (result.tiling_key, _data(result), result.workspace_size) == (key, data, 16 * 1024 * 1024)
    assert list(result.fields) == list(FIELDS)
    assert result.block_dim == 64


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_non_pad_ut_cases_succeed_with_key_0(dtype):
    # test_tiling_non_pad_fp32 / _fp16 / _small_tokens / _long_hidden: key 0, every token on its own core
    for tokens, hidden in ((16, 64), (8, 128), (16, 32768)):
        result = tile(T((tokens * 2, hidden), dtype), None, None, None, 2, tokens, False, soc=UT_SOC)
        assert result.tiling_key == 0 and result.block_dim == tokens
        assert result.fields["top_k"] == 2 and result.fields["tokens_core_length"] == 1
        assert result.ub_fits


def test_small_ub_gives_zero_hidden_fields_and_succeeds():
    # test_tiling_non_pad_small_ub: ub_size 8192, fp16 [512, 8192], topK 4
    small = get_soc("910b", aiv_num=64, ub_size=8192)
    result = tile(T((512, 8192), "fp16"), None, None, None, 4, 128, False, soc=small)
    f = result.fields
    assert result.tiling_key == 0
    assert (f["hidden_splited_length"], f["hidden_splited_num"], f["hidden_splited_remain"]) == (0, 0, 0)


def test_topk_above_512_fails_without_drop_and_pad_only():
    # test_tiling_topk_exceed_max: 1024 rows for one token
    with pytest.raises(TilingError, match="topK 1024"):
        tile(T((1024, 64), "fp32"), None, None, None, 1024, 1, False, soc=UT_SOC)
    assert tile(T((1024, 64), "fp32"), None, None, None, 1024, 1, True, soc=UT_SOC).tiling_key == 1000
    assert tile(T((512, 64), "fp32"), None, None, None, 1024, 1, False, soc=UT_SOC).fields["top_k"] == 512


# id: (rows M, experts E, cores) -> (block dim, capacity, single_core_len, last_core_len)
DROP_PAD_SPLITS = {
    "single-core-when-slots-fit": ((8, 4, 64), (1, 2, 8, 8)),          # test_tiling_drop_pad_single_core
    "slots-equal-cores-one-core": ((8, 4, 8), (1, 2, 8, 8)),
    "uneven-last-core": ((15, 3, 4), (4, 5, 3, 6)),
    "rows-not-multiple-of-experts": ((17, 4, 3), (3, 4, 5, 6)),
    "capacity-zero": ((3, 4, 2), (1, 0, 0, 0)),
}


@pytest.mark.parametrize("case", DROP_PAD_SPLITS)
def test_drop_pad_core_split(case):
    (rows, experts, cores), (block_dim, cap, single, last) = DROP_PAD_SPLITS[case]
    result = tile(T((rows, 16), "bf16"), T((rows,), "bf16"), None, None, experts, 9, True,
                  soc=get_soc("910b", aiv_num=cores))
    f = result.fields
    assert (result.block_dim, f["capacity"], f["single_core_len"], f["last_core_len"]) == (block_dim, cap, single, last)
    assert (f["expert_num"], f["token_num"]) == (experts, 9)
    assert [tuple(r[:3]) for r in result.ub_plan] == [("ProbGradOutQue", 32, 1)]


@pytest.mark.parametrize("dtype,names", [
    ("fp32", ["tokens_inque", "indices_inque", "outque"]),
    ("bf16", ["tokens_inque", "indices_inque", "outque", "temp_buffer0", "temp_buffer1"]),
])
def test_gather_ub_plan_has_no_probs_buffers(dtype, names):
    result = tile(T((40, 300), dtype), None, None, None, 4, 10, False, soc="ascend950")
    assert [r.name for r in result.ub_plan] == names
    assert result.ub_fits and result.block_dim == 10


def test_not_2d_gradient_fails():
    with pytest.raises(TilingError, match="2-D"):
        tile(T((40,), "bf16"), None, None, None, 4, 10, False)
