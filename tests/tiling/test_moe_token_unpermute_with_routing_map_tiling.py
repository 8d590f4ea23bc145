"""Tiling of MoeTokenUnpermuteWithRoutingMap: every host tiling UT of
moe/moe_token_unpermute_with_routing_map/tests/ut/op_host/test_moe_token_unpermute_with_routing_map_tiling.cpp
@ 25fb6b92890d (inputs as the UTs pass them: storage shapes, routing map, restore_shape; test_tiling_parse has nothing
to simulate), the pad split's front/tail cores and its AlignDown quirk, the UB plan per key, and every place the
tiling fails."""
from __future__ import annotations

import pytest

from tiling import TensorDesc as D
from tiling import get_soc
from tiling.moe_token_unpermute_with_routing_map import FIELDS
from tiling.moe_token_unpermute_with_routing_map import moe_token_unpermute_with_routing_map as tiling
from tiling.status import TilingError

UT_SOC = get_soc("ascend910b", ub_size=262144, aiv_num=64)      # UT: 64 cores, UB 261888 for tiling


def test_ut_fp32_droppad():
    """test_tiling_fp32_droppad: key 1000, only the 14 pad fields set."""
    r = tiling(D((40968 * 8, 7168), "fp32"), D((2568 * 8,), "int32"), D((4096, 256), "int8"), D((4096, 8), "fp32"),
               True, (4096, 7168), soc=UT_SOC)
    assert r.tiling_key == 1000 and r.workspace_size == 16 * 1024 * 1024 and r.block_dim == 64
    assert r.data() == [0] * 25 + [int(v) for v in "64 4096 8 2568 64 1 321 0 321 0 1 321 0 321".split()]
    assert list(r.fields) == list(FIELDS) and len(FIELDS) == 39


def test_ut_bf16():
    """test_tiling_bf16 (fp16 tensors despite its name): key 1, T-G then the masked-select fields, schedule mode 1."""
    r = tiling(D((40968 * 8, 7168), "fp16"), D((2568 * 8,), "int32"), D((4096, 256), "bool"), D((4096, 8), "fp16"),
               False, (4096, 7168), soc=UT_SOC)
    assert r.tiling_key == 1 and r.workspace_size == 2 * 16 * 1024 * 1024 and r.schedule_mode == 1
    assert r.data() == [int(v) for v in ("7168 80 327744 7168 1 0 64 0 64 1 0 64 4 8 4096 1 4096 4096 0 0 0 0 0 4096 8 "
                                         "0 0 0 0 0 0 0 0 0 0 0 0 0 0").split()]
    assert r.block_dim == 64


# UT name: (args, soc, key); these UTs check the status and the key only
UT_KEY_ONLY = {
    "test_tiling_fp32_probs_none_restore_shape": (
        (D((8, 64), "fp32"), D((8,), "int32"), D((4, 2), "int8"), None, False, (4, 64)), UT_SOC, 0),
    "test_tiling_indices_int64_dtype": (
        (D((16, 128), "fp16"), D((16,), "int64"), D((8, 4), "int8"), D((8, 4), "fp16"), False, (8, 128)), UT_SOC, 1),
    "test_tiling_small_ub_hidden_split": (
        (D((64, 8192), "fp16"), D((64,), "int32"), D((32, 8), "int8"), D((32, 8), "fp16"), False, (32, 8192)),
        get_soc("ascend910b", ub_size=8192, aiv_num=64), 1),
    "test_tiling_many_experts_masked_select_tail": (
        (D((8, 64), "fp32"), D((8,), "int32"), D((4, 65), "int8"), D((4, 65), "fp32"), False, (4, 64)), UT_SOC, 1),
    "test_tiling_droppad_capacity_warning": (
        (D((200, 64), "fp32"), D((200,), "int32"), D((10, 8), "int8"), D((10, 8), "fp32"), True, (10, 64)),
        UT_SOC, 1000),
}


@pytest.mark.parametrize("case", UT_KEY_ONLY)
def test_ut_key_only_cases(case):
    args, soc, key = UT_KEY_ONLY[case]
    assert tiling(*args, soc=soc).tiling_key == key


def test_key_0_uses_restore_shape_and_still_tiles_the_masked_select():
    r = tiling(D((40, 64), "bf16"), D((40,), "int32"), None, None, False, (10, 64), soc="ascend910b")
    f = r.fields
    assert r.tiling_key == 0 and f["top_k"] == 4 and f["used_core_num"] == 10 and r.schedule_mode == 0
    assert (f["need_core_num"], f["token_num"], f["former_length"]) == (1, 10, 10)
    assert r.block_dim == 10
    assert [row.name for row in r.ub_plan] == ["tokens_inque", "indices_inque", "outque", "temp_buffer0",
                                               "temp_buffer1"]


def test_key_1_plan_has_the_masked_select_pipe_then_kernel_g():
    r = tiling(D((40, 64), "bf16"), D((40,), "int32"), D((10, 8), "bool"), D((10, 8), "fp32"), False, soc="950")
    pipes = [row.pipe for row in r.ub_plan]
    assert pipes[0] == "sortPipe" and pipes[-1] == "pipe" and "probs_inque" in [row.name for row in r.ub_plan]
    assert r.ub_fits


@pytest.mark.parametrize("rows,cores,expect", [
    (63, 4, (3, 16, 1, 15)),       # 63 = 3 * 16 + 15
    (64, 4, (4, 16, 0, 16)),       # divisible: every core is a front core, tail fields still computed
    (3, 4, (3, 1, 0, 0)),          # fewer probs than cores
], ids=["front-tail", "divisible", "fewer-than-cores"])
def test_pad_front_tail_split(rows, cores, expect):
    r = tiling(D((rows, 8), "bf16"), D((rows,), "int32"), None, D((50, 1), "bf16"), True,
               soc=get_soc("ascend910b", aiv_num=cores))
    f = r.fields
    assert (f["front_core"], f["num_tokens_each_front_core"], f["tail_core"], f["num_tokens_each_tail_core"]) == expect
    assert r.block_dim == f["front_core"] + f["tail_core"]


def test_pad_each_loop_quirk_and_buffer_sized_by_use():
    """maxPerLoop = UB / 2 = 1920 for bf16 probs at UB 4096: 5000 probs on one core -> 3 loops, AlignDown(5000,
    1920) = 3840 per loop, 1160 in the last; 1000 probs -> each 0 (quirk), last 1000, buffer sized for 1000."""
    soc = get_soc("ascend910b", aiv_num=1, ub_size=4096)
    big = tiling(D((5000, 8), "bf16"), D((5000,), "int32"), None, D((50, 1), "bf16"), True, soc=soc).fields
    assert (big["loop_time_each_front_core"], big["num_tokens_front_core_each_loop"],
            big["num_tokens_front_core_last_loop"]) == (3, 3840, 1160)
    r = tiling(D((1000, 8), "bf16"), D((1000,), "int32"), None, D((50, 1), "bf16"), True, soc=soc)
    assert (r.fields["num_tokens_front_core_each_loop"], r.fields["num_tokens_front_core_last_loop"]) == (0, 1000)
    assert r.ub_plan[0].bytes == 2000


@pytest.mark.parametrize("args", [
    ((D((4, 8, 1), "bf16"), D((4,), "int32"), None, D((2, 2), "bf16"), False), "2-D"),
    ((D((4, 8), "bf16"), D((4,), "int32"), None, D((4,), "bf16"), False), "2-D"),
    ((D((2 * 513, 8), "bf16"), D((1026,), "int32"), None, D((2, 4), "bf16"), False), "at most 512"),
    ((D((513, 8), "bf16"), D((513,), "int32"), None, None, False, (1, 8)), "at most 512"),
    ((D((4, 8), "bf16"), D((4,), "int32"), None, None, False, (0, 8)), "divides by zero"),
    ((D((4, 8), "bf16"), D((4,), "int32"), None, D((0, 4), "bf16"), False), "divides by zero"),
    ((D((4, 8), "bf16"), D((4,), "int32"), None, D((4, 0), "bf16"), True), "divides by zero"),
    ((D((4, 8), "bf16"), D((4,), "int32"), None, None, True), "needs probs"),
], ids=["tokens-3d", "probs-1d", "topk-513-probs", "topk-513-restore", "restore-0", "probs-0-tokens",
        "pad-0-experts", "pad-no-probs"])
def test_tiling_failures(args):
    args, match = args
    with pytest.raises(TilingError, match=match):
        tiling(*args, soc="ascend910b")


def test_topk_over_experts_and_capacity_over_tokens_only_warn():
    assert tiling(D((40, 8), "bf16"), D((40,), "int32"), None, D((4, 2), "bf16"), False).fields["top_k"] == 10
    assert tiling(D((40, 8), "bf16"), D((40,), "int32"), None, D((4, 2), "bf16"), True).fields["capacity"] == 20


@pytest.mark.parametrize("probs,ms_bytes,value_bytes,same_t_g_as", [
    ("int8", 0, 1, "fp32"),     # GetLengthByType: INT8 -> 0; T-G's unit 4 (index) + 0 + 4 (fp32 cast) = fp32's 4 + 4
    ("int64", 8, 8, None),      # INT64 -> 8; unit 4 + 8 + 4
], ids=["int8_probs", "int64_probs"])
def test_int8_and_int64_probs_tile_as_the_real_host_code(probs, ms_bytes, value_bytes, same_t_g_as):
    """The real tiling has no dtype check: its size table gives these probs 0 and 8 bytes and it succeeds (as
    PermuteWithRoutingMap's UTs with_prob_int8 / with_prob_int64 do). The aclnn refuses such probs before."""
    n, e = 20000, 2
    r = tiling(D((2 * n, 64), "fp16"), D((2 * n,), "int32"), D((n, e), "bool"), D((n, e), probs), False,
               soc=UT_SOC)
    assert r.tiling_key == 1 and r.fields["top_k"] == 2
    # ubLength = AlignDown((261888 - 128) / (4 * elemSize + 19), 128), below N = 20000
    assert r.fields["formertile_length"] == (261760 // (4 * ms_bytes + 19)) // 128 * 128
    sizes = {row.name: row.bytes for row in r.ub_plan if row.pipe == "sortPipe"}
    assert sizes["inQueueX"] == sizes["outQueueY"] == r.fields["formertile_length"] * value_bytes
    if same_t_g_as:
        other = tiling(D((2 * n, 64), "fp16"), D((2 * n,), "int32"), D((n, e), "bool"), D((n, e), same_t_g_as),
                       False, soc=UT_SOC)
        assert r.data()[:13] == other.data()[:13]


@pytest.mark.parametrize("probs", ["int8", "int64"])
def test_pad_mode_tiles_int8_and_int64_probs(probs):
    r = tiling(D((64, 8), "fp16"), D((64,), "int32"), D((16, 4), "bool"), D((16, 4), probs), True, soc=UT_SOC)
    assert r.tiling_key == 1000 and r.fields["capacity"] == 16
