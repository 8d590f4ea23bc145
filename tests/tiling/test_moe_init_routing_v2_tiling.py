"""MoeInitRoutingV2 tiling: the real op's host UT cases (membase A2 and regbase 950 branches), and hand-worked
figures for the 950 path MoeTokenPermute V1 takes (activeNum = numOutTokens, capacity 0, expertNum 0, dropless,
no counts)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import ParamInvalidError, TilingError, get_soc
from tiling import TensorDesc as T
from tiling import moe_init_routing_v2 as tiling_v2

BF16 = ml_dtypes.bfloat16
FP16, FP32, I32, I64 = np.float16, np.float32, np.int32, np.int64


def ut_soc(chip: str, ub: int):
    """The UTs hand the tiling a compile info of 64 cores and `ub` bytes; our profiles take the ini size,
    which GetCoreMemSize reports 256 bytes smaller."""
    return get_soc(chip, ub_size=ub + 256, aiv_num=64)


def call(x, idx, out_x, out_row, attrs, soc, counts=(None, None)):
    active, cap, e_num, dp, count_flag, before_flag = attrs
    return tiling_v2(T(*x), T(*idx), active_num=active, expert_capacity=cap, expert_num=e_num, drop_pad_mode=dp,
                     expert_tokens_count_or_cumsum_flag=count_flag, expert_tokens_before_capacity_flag=before_flag,
                     expanded_x_out=T(*out_x), expanded_row_idx_out=T(*out_row),
                     expert_tokens_count_or_cumsum_out=counts[0] and T(*counts[0]),
                     expert_tokens_before_capacity_out=counts[1] and T(*counts[1]), soc=soc)


# (UT name, chip, ub, x, expert_idx, expanded_x, expanded_row_idx, count outs (both the same in the UTs),
#  attrs (active, capacity, expertNum, dropPad, countFlag, beforeFlag), key, workspace, data); key None = the UT
#  checks success only
UT_CASES = [
    ("moe_init_routing_v2_tiling_01", "ascend910b", 262144, ((8, 30), FP16), ((8, 6), I32), ((8, 6, 30), FP16),
     ((48,), I32), ((8,), I32), (0, 6, 8, 1, 0, True), 10011, 16779264,
     "64 8 30 6 6 8 1 0 1 1 48 1 48 48 48 1 48 48 8192 0 2040 48 0 1 1 1 1 1 1 0 0 0 0 0 0 48 0 1 1 1 1 1 1 1 1 30 "
     "30 1 0 48 48 1 1 1 1 1 1 1 1 30 30 1 0"),
    ("moe_init_routing_v2_tiling_perf", "ascend910b", 262144, ((8, 30), FP16), ((8, 6), I32), ((48, 30), FP16),
     ((48,), I32), ((8,), I32), (0, 6, 8, 0, 0, False), 20000, 16779264,
     "64 8 30 6 6 8 0 0 0 1 48 1 48 48 48 1 48 48 8192 0 2040 48 0 1 1 1 1 1 1 0 0 0 0 0 0 48 0 1 1 1 1 1 1 1 1 30 "
     "30 1 0 48 48 1 1 1 1 1 1 1 1 30 30 1 0"),
    ("moe_init_routing_v2_one_core_dropless", "ascend910b", 262144, ((80, 3000), FP16), ((80, 60), I32),
     ((4800, 3000), FP16), ((4800,), I32), ((8,), I32), (0, 6, 8, 0, 1, False), 20000, 16931328,
     "64 80 3000 60 6 8 0 1 0 1 4800 1 4800 4800 4800 1 4800 4800 8192 0 2040 64 0 75 75 75 75 75 75 0 0 0 0 0 0 64 "
     "0 75 75 75 75 75 75 1 1 3000 3000 1 0 64 4800 75 75 75 75 75 75 1 1 3000 3000 1 0"),
    ("moe_init_routing_v2_tiling_muticore_drop", "ascend910b", 262144, ((320, 3000), FP16), ((320, 56), I32),
     ((32, 200, 3000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), 10012, 17351168,
     "64 320 3000 56 200 32 1 0 1 4 4480 1 4480 4480 4480 1 4480 4480 8192 0 2040 64 0 280 280 280 280 280 280 0 0 0 "
     "0 0 0 64 0 280 280 280 280 280 280 1 1 3000 3000 1 0 64 17920 280 280 280 280 280 280 1 1 3000 3000 1 0"),
    ("moe_init_routing_v2_tiling_muticore_dropless", "ascend910b", 262144, ((320, 3000), FP16), ((320, 56), I32),
     ((17920, 3000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 0, 0, True), 10002, 17351168,
     "64 320 3000 56 200 32 0 0 0 4 4480 1 4480 4480 4480 1 4480 4480 8192 0 2040 64 0 280 280 280 280 280 280 0 0 0 "
     "0 0 0 64 0 280 280 280 280 280 280 1 1 3000 3000 1 0 64 17920 280 280 280 280 280 280 1 1 3000 3000 1 0"),
    ("moe_init_routing_v2_tiling_regbase_dropless", "ascend950", 262144, ((48, 30), FP16), ((48,), I32),
     ((47, 30), FP16), ((48,), I32), ((8,), I32), (-1, 6, 8, 0, 0, False), None, None, None),
    ("moe_init_routing_v2_tiling_regbase_expert_idx_int64", "ascend950", 262144, ((8, 30), FP16), ((8, 6), I64),
     ((48, 30), FP16), ((48,), I32), ((8,), I32), (0, 6, 8, 0, 0, False), None, None, None),
    ("moe_init_routing_v2_tiling_regbase_drop_multicore", "ascend950", 262144, ((320, 3000), FP16), ((320, 56), I32),
     ((32, 200, 3000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_large_cols_drop_pad", "ascend910b", 262144, ((320, 20000), FP16), ((320, 56), I32),
     ((32, 200, 20000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_vms_middle_multicore", "ascend910b", 262144, ((640, 3000), FP16), ((640, 56), I32),
     ((32, 200, 3000), FP16), ((35840,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_small_ub_large_cols", "ascend910b", 8192, ((320, 20000), FP16), ((320, 56), I32),
     ((32, 200, 20000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_zero_total_length", "ascend910b", 262144, ((8, 30), FP16), ((8, 0), I32),
     ((8, 6, 30), FP16), ((0,), I32), ((8,), I32), (0, 6, 8, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_zero_cols", "ascend910b", 262144, ((8, 0), FP16), ((8, 6), I32), ((48, 0), FP16),
     ((48,), I32), ((8,), I32), (0, 6, 8, 0, 0, False), None, None, None),
    ("moe_init_routing_v2_tiling_small_ub_medium_cols", "ascend910b", 8192, ((320, 8000), FP16), ((320, 56), I32),
     ((32, 200, 8000), FP16), ((17920,), I32), ((32,), I32), (0, 200, 32, 1, 0, True), None, None, None),
    ("moe_init_routing_v2_tiling_small_ub_large_cols_small_percore", "ascend910b", 8192, ((64, 20000), FP16),
     ((64, 10), I32), ((8, 6, 20000), FP16), ((640,), I32), ((8,), I32), (0, 6, 8, 1, 0, True), None, None, None),
]


@pytest.mark.parametrize("case", UT_CASES, ids=[c[0] for c in UT_CASES])
def test_host_ut_cases(case):
    _, chip, ub, x, idx, out_x, out_row, count, attrs, key, workspace, data = case
    r = call(x, idx, out_x, out_row, attrs, ut_soc(chip, ub), (count, count))
    assert r.block_dim == 64
    if key is not None:
        assert r.tiling_key == key
        assert r.workspace_size == workspace
        assert " ".join(map(str, r.data())) == data


UT_FAILURES = [
    # expert_idx 1-D is a failure on the membase branch
    ("moe_init_routing_v2_tiling_error_expert_id", ((320, 3000), FP16), ((2,), I32)),
    # x must be 2-D
    ("moe_init_routing_v2_tiling_error_token", ((2,), FP16), ((320, 56), I32)),
]


@pytest.mark.parametrize("name, x, idx", UT_FAILURES, ids=[c[0] for c in UT_FAILURES])
def test_host_ut_failures(name, x, idx):
    with pytest.raises(TilingError) as e:
        call(x, idx, ((17920, 3000), FP16), ((17920,), I32), (0, 200, 32, 0, 1, False), ut_soc("ascend910b", 262144),
             (((32,), I32), ((32,), I32)))
    assert e.value.status == 561002


# --- the 950 path of MoeTokenPermute V1 ------------------------------------------------------------------------
# ascend950: 64 AIV, GetCoreMemSize 253952 - 256 = 253696; regbase keeps 40960 for SIMT -> ub = 212736.
# sortLoopMaxElement = ub / (4*2*4 + int64?) floored to 32: int32 212736/32 = 6648 -> 6624; int64 212736/33 = 6446 ->
# 6432. srcToDst perLoopMaxRows = (212736 - 256*4 - 64*32) / 64 / 2 = 1638. Gather half UB = 106368.
# key = 10000 + 1000 (expertNum 0 <= 256) + 0 (dropless) + 1 | 2; workspace = T*24 + T*8 + 64*8 + 0 + 16 MiB.
PERMUTE_950 = [
    # fp16 (16, 64), 2-D int32 (16, 4): T = 64 one-core sort, numOutTokens 0 -> 0 + 64 = all 64 rows.
    # gather: rows 128 B (32-aligned), k 4 <= 6 -> scatter mode; ubRows = 106368 / 132 = 805 -> 800 (16-row blocks);
    # per core 1 row; out buffer 800*128 = 102400, index room (106368-102400)/4 = 992; loop rows 1 -> raised to 8.
    ("fp16_2d_one_core_all_rows", ((16, 64), FP16), ((16, 4), I32), 0, 11001, 64 * 32 + 512 + 16777216,
     [64, 16, 64, 4, 0, 0, 0, 0, 0,
      1, 64, 1, 64, 64, 64, 1, 64, 64, 6624, 0, 2048,
      64, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
      # capacity: rowSize (1*8+63)/32*32 = 64, colSize 128 -> one loop
      64, 0, 1, 1, 1, 1, 1, 1, 1, 1, 64, 64, 1, 0,
      64, 64, 1, 8, 8, 1, 8, 8, 1, 1, 800, 800, 1, 1]),
    # fp16 as above, numOutTokens -3 counts from the end: 64 - 3 = 61 rows.
    ("fp16_2d_negative_num_out", ((16, 64), FP16), ((16, 4), I32), -3, 11001, 64 * 32 + 512 + 16777216,
     [64, 16, 64, 4, 0, 0, 0, 0, 0,
      1, 64, 1, 64, 64, 64, 1, 64, 64, 6624, 0, 2048,
      64, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
      64, 0, 1, 1, 1, 1, 1, 1, 1, 1, 64, 64, 1, 0,
      # 61 active rows over 64 cores: 1 per core, 61 cores, last 1
      61, 61, 1, 8, 8, 1, 8, 8, 1, 1, 800, 800, 1, 1]),
    # bf16 (8, 30), 1-D int64 (8,): k 1, T 8, numOutTokens 5 < 8. Rows are 60 B (not 32-aligned) -> no scatter;
    # rowSize 32 + colSize 64 < half -> one loop, and 32 + 128 < half doubles the loop cols to 60.
    ("bf16_1d_int64_fewer_out", ((8, 30), BF16), ((8,), I64), 5, 11001, 8 * 32 + 512 + 16777216,
     [64, 8, 30, 1, 0, 0, 0, 0, 0,
      1, 8, 1, 8, 8, 8, 1, 8, 8, 6432, 0, 2048,
      8, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
      8, 0, 1, 1, 1, 1, 1, 1, 1, 1, 30, 30, 1, 0,
      8, 5, 1, 1, 1, 1, 1, 1, 1, 1, 60, 60, 1, 0]),
    # fp32 (4096, 128), 2-D int32 (4096, 2): T 8192 > 6624 -> multi-core sort. ceil(8192/6624) = 2 -> 4^1 = 4 cores
    # of 2048 (32-aligned, last 2048 <= 2080); 4 lists need no middle merge. numOutTokens 8192 = all.
    # gather: 512-B rows, ubRows 106368/516 = 206 -> 200 (8-row blocks); 128 rows per core; room 992 >= 128.
    ("fp32_2d_multi_core_equal_out", ((4096, 128), FP32), ((4096, 2), I32), 8192, 11002,
     8192 * 32 + 512 + 16777216,
     [64, 4096, 128, 2, 0, 0, 0, 0, 0,
      4, 2048, 1, 2048, 2048, 2048, 1, 2048, 2048, 6624, 0, 2048,
      64, 0, 128, 128, 128, 128, 128, 128, 0, 0, 0, 0, 0, 0,
      # capacity: rowSize (128*8+63)/32*32 = 1056, colSize 512 -> one loop
      64, 0, 128, 128, 128, 128, 128, 128, 1, 1, 128, 128, 1, 0,
      64, 8192, 128, 128, 128, 128, 128, 128, 1, 1, 200, 200, 1, 1]),
    # fp16 (60000, 16), 1-D int32: T 60000, ceil(60000/6624) = 10 -> 4^2 = 16 cores; 60000/16 = 3750, floor-aligned
    # 3744 leaves 3840 for the last core > 3776, so 3776 per core, ceil(60000/3776) = 16 cores, last 3360;
    # 16 lists -> 4 middle-merge cores. Rows: 938 per core (last 906); gather rows 32 B, ubRows 106368/36 = 2954
    # -> 2944; out buffer 2944*32 = 94208, index room 12160/4 = 3040 >= 938.
    ("fp16_1d_multi_core_16_lists", ((60000, 16), FP16), ((60000,), I32), 0, 11002, 60000 * 32 + 512 + 16777216,
     [64, 60000, 16, 1, 0, 0, 0, 0, 0,
      16, 3776, 1, 3776, 3776, 3360, 1, 3360, 3360, 6624, 4, 2048,
      64, 0, 938, 938, 938, 906, 906, 906, 0, 0, 0, 0, 0, 0,
      # capacity: rowSize (938*8+63)/32*32 = 7552, colSize 32 -> one loop
      64, 0, 938, 938, 938, 906, 906, 906, 1, 1, 16, 16, 1, 0,
      64, 60000, 938, 938, 938, 906, 938, 906, 1, 1, 2944, 2944, 1, 1]),
]


@pytest.mark.parametrize("name, x, idx, num_out, key, workspace, data", PERMUTE_950, ids=[c[0] for c in PERMUTE_950])
def test_permute_v1_path_on_950(name, x, idx, num_out, key, workspace, data):
    r = tiling_v2(T(*x), T(*idx), active_num=num_out, soc="ascend950")
    assert r.tiling_key == key
    assert r.block_dim == 64
    assert r.workspace_size == workspace
    assert r.data() == data
    assert r.schedule_mode == 1


FAILURES = [
    ("950_idx_3d", "ascend950", ((4, 8), FP16), ((4, 2, 1), I32), {}, TilingError),
    ("950_expanded_x_rows", "ascend950", ((4, 8), FP16), ((4, 2), I32),
     {"active_num": 3, "expanded_x_out": T((8, 8), FP16)}, TilingError),
    ("950_row_idx_length", "ascend950", ((4, 8), FP16), ((4, 2), I32), {"expanded_row_idx_out": T((7,), I32)},
     TilingError),
    ("910b_negative_active", "ascend910b", ((4, 8), FP16), ((4, 2), I32), {"active_num": -1}, TilingError),
    ("910b_int64_idx_not_in_opdef", "ascend910b", ((4, 8), FP16), ((4, 2), I64), {}, ParamInvalidError),
    ("int8_x_not_in_opdef", "ascend950", ((4, 8), np.int8), ((4, 2), I32), {}, ParamInvalidError),
    ("drop_pad_2", "ascend950", ((4, 8), FP16), ((4, 2), I32), {"drop_pad_mode": 2}, TilingError),
    ("count_flag_without_experts", "ascend950", ((4, 8), FP16), ((4, 2), I32),
     {"expert_tokens_count_or_cumsum_flag": 1}, TilingError),
    ("capacity_over_tokens", "ascend950", ((4, 8), FP16), ((4, 2), I32),
     {"drop_pad_mode": 1, "expert_capacity": 5, "expert_num": 2}, TilingError),
]


@pytest.mark.parametrize("name, chip, x, idx, kw, err", FAILURES, ids=[c[0] for c in FAILURES])
def test_failures(name, chip, x, idx, kw, err):
    with pytest.raises(err) as e:
        tiling_v2(T(*x), T(*idx), soc=chip, **kw)
    assert e.value.status == (561002 if err is TilingError else 161002)


UB_PLANS = [
    # one-core sort of 64 keys: Align(64, 4 B) = 64 -> 64 sort slots, key + value 64*4*2 = 512 B each;
    # scatter: 800 rows * 64 cols * 2 B = 102400, loop rows 8 -> 32 B
    ("fp16_2d_one_core_all_rows", ((16, 64), FP16), ((16, 4), I32), 0,
     [("sortDataCopyInQueue", 512, 1), ("sortDataCopyOutQueue", 512, 1), ("tempBuffer", 512, 1),
      ("sortedBuffer", 512, 1), ("outputRowsQueue", 102400, 2), ("dstToSrcIndexQueue", 32, 2)]),
    # 8 int64 keys: Align -> 8, 32 slots, 256 B + 128 B more in the in-queue for the wide keys;
    # gather loop cols 60 > 30: four whole 30-col rows of 64 B, one row index of 32 B
    ("bf16_1d_int64_fewer_out", ((8, 30), BF16), ((8,), I64), 5,
     [("sortDataCopyInQueue", 384, 1), ("sortDataCopyOutQueue", 256, 1), ("tempBuffer", 256, 1),
      ("sortedBuffer", 256, 1), ("inputActivationsCopyInQueue", 64, 4), ("expandedRowIdxIndexCopyInQueue", 32, 2)]),
    # multi-core: max(2048 * 4 merge lists, 2048 loop keys) = 8192 -> 8192*4*2 = 65536 B, no tempBuffer;
    # scatter: 200 rows * 128 cols * 4 B = 102400, 128 rows -> 512 B
    ("fp32_2d_multi_core_equal_out", ((4096, 128), FP32), ((4096, 2), I32), 8192,
     [("sortDataCopyInQueue", 65536, 1), ("sortDataCopyOutQueue", 65536, 1), ("sortedBuffer", 65536, 1),
      ("outputRowsQueue", 102400, 2), ("dstToSrcIndexQueue", 512, 2)]),
]


@pytest.mark.parametrize("name, x, idx, num_out, rows", UB_PLANS, ids=[c[0] for c in UB_PLANS])
def test_950_ub_plan(name, x, idx, num_out, rows):
    r = tiling_v2(T(*x), T(*idx), active_num=num_out, soc="ascend950")
    assert [tuple(b[:3]) for b in r.ub_plan] == rows
    assert r.ub_fits


@pytest.mark.parametrize("chip, ub", [("ascend950", 40960 + 256 + 512), ("ascend910b", 768)],
                         ids=["950_ub_below_simt_reserve", "910b_ub_below_one_sort_loop"])
def test_ub_without_a_sort_loop_fails_cleanly(chip, ub):
    # 950: 512 B after the SIMT reserve -> 512 / 32 = 16 keys, floored to 32 -> 0; 910B: 512 / 32 -> 0 too
    with pytest.raises(TilingError):
        tiling_v2(T((4, 8), FP16), T((4, 2), I32), soc=get_soc(chip, ub_size=ub))
