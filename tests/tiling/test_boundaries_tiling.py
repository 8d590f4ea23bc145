"""Exact boundaries of the tilings: every comparison that picks a key, a split, a core count or a failure,
pinned at the last value on one side and the first value on the other.

All expected figures are literals worked out by hand from the formulas in the shared reference
(ops_transformer_facts.md: §1.4 sort tiling S, §2.d MoeTokenPermute, §10.c/d UnpermuteWithRoutingMapGrad);
the comment next to each shows the arithmetic. Profiles: ascend910b = 48 AIV, tiling UB 196608 - 256 =
196352; ascend950 = 64 AIV, tiling UB 253952 - 256 = 253696 (both already multiples of 32).

Boundaries pinned elsewhere and not repeated here: MoeTokenPermute topK 512/513 (test_workspace_formula /
UT topk_exceed_max), 16777214/16777215 indices (test_sort_length_limit), the split-D row width
(test_split_d_once_two_rows_no_longer_fit), numOutTokens != tokens * topK (test_num_out_tokens...);
UnpermuteWithRoutingMapGrad topK 512/513 and topK = / > experts, capacity = / > tokens (ops sweep +
FAILURES), the experts limit (test_limits_scale_with_the_chip).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling import moe_token_permute as tiling_permute
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad

BF16, F32 = ml_dtypes.bfloat16, np.float32
MIB16 = 16 * 1024 * 1024

# --- MoeTokenPermute: the sort's one-core / multi-core cut-off and the multi-core split -----------------------
# sortLoopMaxElement = AlignDown((UB - aivNum * 32) / 32, 32):
#   ascend910b: (196352 - 48 * 32) / 32 = 194816 / 32 = 6088 -> 6080
#   ascend950:  (253696 - 64 * 32) / 32 = 251648 / 32 = 7864 -> 7840
# Inputs: tokens (total, 16) bf16 (32-byte rows: never split-D), indices (total,) int32: topK 1, T = total.
# workspace = T * 4 * 2 * 3 + coreNum * 32 * 2 + 16 MiB with coreNum = aivNum (T > 32).
# Index copy over T source tokens: front = T mod C (C if 0), tail = 0 if T <= C else C - front.
VBS_KEYS = ("vbs_need_core_num", "vbs_per_core_elements", "vbs_per_core_loops", "vbs_per_core_per_loop_elements",
            "vbs_per_core_last_loop_elements", "vbs_last_core_elements", "vbs_last_core_loops",
            "vbs_last_core_per_loop_elements", "vbs_last_core_last_loop_elements", "vbs_one_loop_max_elements",
            "vbs_last_core_ws_index")

SORT_CASES = {
    # id: (soc, total, key, core_num, vbs fields (VBS_KEYS order), vms_middle_need_core_num,
    #      (index copy need, front, tail), block_dim, workspace)
    # the largest count one core sorts: needCoreNum 1, every per-loop / last field = T
    "910b-one-core-6080": ("ascend910b", 6080, 1, 48, (1, 6080, 1, 6080, 6080, 6080, 1, 6080, 6080, 6080, 0), 0,
                           # 6080 = 126 * 48 + 32
                           (48, 32, 16), 48,
                           # 6080 * 24 + 48 * 64 + 16 MiB = 145920 + 3072 + 16777216
                           16926208),
    # one more: ceil(6081 / 6080) = 2 -> 4^ceil(log4 2) = 4 cores; per = 6081 / 4 = 1520 (1520 mod 32 = 16);
    # floor 1504, last = 6081 - 3 * 1504 = 1569 > ceil 1536 -> per 1536, need = ceil(6081 / 1536) = 4,
    # last core 6081 - 3 * 1536 = 1473
    "910b-multi-core-6081": ("ascend910b", 6081, 2, 48, (4, 1536, 1, 1536, 1536, 1473, 1, 1473, 1473, 6080, 0), 0,
                             (48, 33, 15), 48, 16926232),   # 6081 * 24 + 3072 + 16777216
    # 4 cores; per = 7841 / 4 = 1960 (mod 32 = 8): floor 1952, last = 7841 - 5856 = 1985 > ceil 1984
    # -> per 1984, need ceil(7841 / 1984) = 4, last core 7841 - 3 * 1984 = 1889
    # per-core rounding "lastCore > ceilAligned" (strict). With 4 cores and q = T mod 4, r = (T / 4) mod 32 the
    # test is q + 4r > 32. T = 6176: per 1544, r = 8, q = 0 -> 32 > 32 is false -> floor 1536, last 6176 - 4608
    "910b-floor-per-core-6176": ("ascend910b", 6176, 2, 48, (4, 1536, 1, 1536, 1536, 1568, 1, 1568, 1568, 6080, 0),
                                 0, (48, 32, 16), 48, 16928512),   # 6176 * 24 + 3072 + 16777216
    # T = 6177: q = 1 -> 33 > 32 -> ceil 1568, need ceil(6177 / 1568) = 4, last 6177 - 4704 = 1473
    "910b-ceil-per-core-6177": ("ascend910b", 6177, 2, 48, (4, 1568, 1, 1568, 1568, 1473, 1, 1473, 1473, 6080, 0),
                                0, (48, 33, 15), 48, 16928536),    # 6177 * 24 + 3072 + 16777216
    # ceil(T / 6080) = 4 -> 4 cores of exactly 6080 (6080 mod 32 = 0: last 6080 is not > 6112); VMS middle 0
    "910b-4-cores-24320": ("ascend910b", 24320, 2, 48, (4, 6080, 1, 6080, 6080, 6080, 1, 6080, 6080, 6080, 0), 0,
                           (48, 32, 16), 48, 17363968),            # 24320 * 24 + 3072 + 16777216
    # ceil = 5 -> 4^2 = 16 cores; per 24321 / 16 = 1520 (mod 32 = 16): floor 1504, last 24321 - 22560 = 1761 >
    # 1536 -> per 1536, need ceil(24321 / 1536) = 16, last 24321 - 15 * 1536 = 1281; VMS middle ceil(16 / 4) = 4
    "910b-16-cores-24321": ("ascend910b", 24321, 2, 48, (16, 1536, 1, 1536, 1536, 1281, 1, 1281, 1281, 6080, 0), 4,
                            (48, 33, 15), 48, 17363992),           # 24321 * 24 + 3072 + 16777216
    # ceil = 16 -> 16 cores of 6080
    "910b-16-cores-97280": ("ascend910b", 97280, 2, 48, (16, 6080, 1, 6080, 6080, 6080, 1, 6080, 6080, 6080, 0), 4,
                            (48, 32, 16), 48, 19115008),           # 97280 * 24 + 3072 + 16777216
    # ceil = 17 -> 4^3 = 64, clamped to the 48 AIV; per 97281 / 48 = 2026 (mod 32 = 10): floor 2016,
    # last 97281 - 47 * 2016 = 2529 > 2048 -> per 2048, need ceil(97281 / 2048) = 48, last 97281 - 96256 = 1025;
    # VMS middle ceil(48 / 4) = 12
    "910b-clamped-48-cores-97281": ("ascend910b", 97281, 2, 48,
                                    (48, 2048, 1, 2048, 2048, 1025, 1, 1025, 1025, 6080, 0), 12,
                                    (48, 33, 15), 48, 19115032),   # 97281 * 24 + 3072 + 16777216
    # per 125441 / 64 = 1960 (mod 32 = 8): floor 1952, last 125441 - 63 * 1952 = 2465 > 1984 -> per 1984,
    # need ceil(125441 / 1984) = 64, last 125441 - 63 * 1984 = 449; VMS middle 16
    # 48 clamped cores, each exactly one loop of 6080 (291840 = 48 * 6080)
    "910b-48-cores-one-loop-291840": ("ascend910b", 291840, 2, 48,
                                      (48, 6080, 1, 6080, 6080, 6080, 1, 6080, 6080, 6080, 0), 12,
                                      (48, 48, 0), 48, 23784448),  # 291840 * 24 + 3072 + 16777216
    # one more: per 6080 (r = 0, last 6081 is not > 6112): the last core takes 6081 in 2 loops (6080 + 1)
    "910b-last-core-two-loops-291841": ("ascend910b", 291841, 2, 48,
                                        (48, 6080, 1, 6080, 6080, 6081, 2, 6080, 1, 6080, 0), 12,
                                        (48, 1, 47), 48, 23784472),  # 291841 * 24 + 3072 + 16777216
    # lastCoreWSindex = |VmsLoops(last loops) - VmsLoops(per-core loops)|, VmsLoops(x) = 1 for x <= 4, 0 for 5..16.
    # 1167360 = 48 * 24320: every core 4 loops of 6080 -> |1 - 1| = 0
    "910b-ws-index-0-1167360": ("ascend910b", 1167360, 2, 48,
                                (48, 24320, 4, 6080, 6080, 24320, 4, 6080, 6080, 6080, 0), 12,
                                (48, 48, 0), 48, 44796928),        # 1167360 * 24 + 3072 + 16777216
    # last core 24321 = 5 loops (4 x 6080 + 1) -> |0 - 1| = 1: its result is in the other ping-pong workspace
    "910b-ws-index-1-1167361": ("ascend910b", 1167361, 2, 48,
                                (48, 24320, 4, 6080, 6080, 24321, 5, 6080, 1, 6080, 1), 12,
                                (48, 1, 47), 48, 44796952),        # 1167361 * 24 + 3072 + 16777216
}


@pytest.mark.parametrize("case", SORT_CASES)
def test_permute_sort_boundaries(case):
    soc, total, key, core_num, vbs, vms_middle, copy_cores, block_dim, workspace = SORT_CASES[case]
    r = tiling_permute(T((total, 16), BF16), T((total,), np.int32), soc=soc)
    f = r.fields
    assert r.tiling_key == key, str(r)
    assert f["core_num"] == core_num
    assert tuple(f[k] for k in VBS_KEYS) == vbs, [f[k] for k in VBS_KEYS]
    assert f["vms_middle_need_core_num"] == vms_middle
    assert (f["index_copy_need_core_num"], f["index_copy_front_core_num"], f["index_copy_tail_core_num"]) == copy_cores
    assert r.block_dim == block_dim and r.workspace_size == workspace
    assert r.ub_fits, str(r)


AIV_CASES = {
    # indices element count <= 32 sorts on aivNum = 1 core (the sort UB loses only 1 * 32 bytes), more on all
    # AIV; the copy still spreads the source tokens: block dim = max(aivNum, copy cores).
    # id: (soc, indices shape, core_num, one_loop_max, block_dim, workspace)
    # AlignDown((196352 - 32) / 32, 32) = AlignDown(6135, 32) = 6112; 16 tokens -> 16 copy cores;
    # workspace 32 * 24 + 1 * 64 + 16 MiB
    "910b-32-indices-one-core": ("ascend910b", (16, 2), 1, 6112, 16, 16778048),
    # 33 indices: 48 cores, 6080; 11 tokens -> 11 copy cores but block dim 48; 33 * 24 + 48 * 64 + 16 MiB
    "910b-33-indices-all-cores": ("ascend910b", (11, 3), 48, 6080, 48, 16781080),
    # AlignDown((253696 - 32) / 32, 32) = AlignDown(7927, 32) = 7904
    # 33 * 24 + 64 * 64 + 16 MiB = 792 + 4096 + 16777216
}


@pytest.mark.parametrize("case", AIV_CASES)
def test_permute_aiv_num_is_one_up_to_32_indices(case):
    soc, shape, core_num, one_loop_max, block_dim, workspace = AIV_CASES[case]
    r = tiling_permute(T((shape[0], 16), BF16), T(shape, np.int32), soc=soc)
    f = r.fields
    assert r.tiling_key == 1
    assert (f["core_num"], f["vbs_need_core_num"], f["vbs_one_loop_max_elements"]) == (core_num, 1, one_loop_max)
    assert (f["index_copy_need_core_num"], f["index_copy_front_core_num"], f["index_copy_tail_core_num"]) == \
        (shape[0], shape[0], 0)
    assert r.block_dim == block_dim and r.workspace_size == workspace


@pytest.mark.parametrize("tokens,copy", [
    # (need, front, tail, coreCalcNum, coreCalcTail); 48 AIV. 48 tokens: 48 mod 48 = 0 -> front 48, tail 0 (T <= C)
    (48, (48, 48, 0, 1, 1)),
    # 49 tokens: front 49 mod 48 = 1 core with ceil(49 / 48) = 2 tokens, tail 47 cores with 49 / 48 = 1
    (49, (48, 1, 47, 2, 1)),
], ids=["48-tokens-all-front", "49-tokens-front-and-tail"])
def test_permute_index_copy_front_tail_split_at_the_core_count(tokens, copy):
    r = tiling_permute(T((tokens, 16), BF16), T((tokens,), np.int32), soc="ascend910b")
    f = r.fields
    names = ("need_core_num", "front_core_num", "tail_core_num", "core_calc_num", "core_calc_tail")
    assert tuple(f[f"index_copy_{n}"] for n in names) == copy
    assert r.block_dim == 48


@pytest.mark.parametrize("ub_size,once_ub_tokens,token_ub", [
    # rows of 32 B, topK 1: onceUbTokenNums = min(UB / (2 * 32 + 1 * 2 * 4), 4095) = min(UB / 72, 4095).
    # UB = 295136 - 256 = 294880: 294880 / 72 = 4095 (4095 * 72 = 294840) -> 4095, token UB 4095 * 32 = 131040
    (295136, 4095, 131040),
    # UB = 294912: 294912 / 72 = 4096 -> clamped to the DataCopyPad blockCount limit 4095 (not 4096 / 131072)
    (295168, 4095, 131040),
], ids=["ub294880-4095-rows", "ub294912-clamped-to-4095"])
def test_permute_rows_per_copy_clamp_to_max_block_count(ub_size, once_ub_tokens, token_ub):
    r = tiling_permute(T((64, 16), BF16), T((64,), np.int32), soc=get_soc("910b", ub_size=ub_size))
    f = r.fields
    assert r.tiling_key == 1
    assert (f["index_copy_once_ub_token_nums"], f["index_copy_token_ub"]) == (once_ub_tokens, token_ub)
    # topKUbLeft = UB - 4095 * 64 = 32800 / 32832; / (4095 * 4) = 2 index batches of 8190 slots, 32760 -> 32768 B
    assert (f["index_copy_once_indices_token_move_times"], f["index_copy_once_indices_token_nums"],
            f["index_copy_indices_ub"]) == (2, 8190, 32768)


# --- MoeTokenUnpermuteWithRoutingMapGrad: hidden pieces, failures, reserved slots ------------------------------
def _uwrm(n, h, e, m, dtype=BF16, probs_dtype=None, probs=True):
    args = [T((n, h), dtype), T((m,), np.int32), T((m,), np.int32), T((n, e), np.bool_), T((m, h), dtype)]
    args.append(T((n, e), probs_dtype or dtype) if probs else None)
    return args


PIECE_KEYS = ("hidden_size_align", "hidden_size_loop_times", "hidden_size_loop_times_align", "hidden_size_tail")

PIECE_CASES = {
    # id: (soc, mode, grad dtype, probs dtype, hidden, key, (hiddenSizeAlign, loops, loopsAlign, tail))
    # probs absent (keys 0 / 10): one piece while AlignUp(H, 32 / tokDt) <= UB / (2 * tokDt)
    #   910b bf16: 196352 / 4 = 49088; 49089 -> AlignUp 49104 > 49088 -> pieces of AlignDown(49088, 16)
    "910b-none-bf16-49088": ("ascend910b", "none", BF16, None, 49088, 0, (49088, 1, 0, 49088)),
    "910b-none-bf16-49089": ("ascend910b", "none", BF16, None, 49089, 0, (49088, 2, 0, 1)),
    "910b-none-pad-bf16-49088": ("ascend910b", "none-pad", BF16, None, 49088, 10, (49088, 1, 0, 49088)),
    "910b-none-pad-bf16-49089": ("ascend910b", "none-pad", BF16, None, 49089, 10, (49088, 2, 0, 1)),
    #   910b fp32: 196352 / 8 = 24544; 24545 -> AlignUp 24552 > 24544
    "910b-none-fp32-24544": ("ascend910b", "none", F32, None, 24544, 0, (24544, 1, 0, 24544)),
    "910b-none-fp32-24545": ("ascend910b", "none", F32, None, 24545, 0, (24544, 2, 0, 1)),
    #   950 bf16: 253696 / 4 = 63424
    "950-none-bf16-63424": ("ascend950", "none", BF16, None, 63424, 0, (63424, 1, 0, 63424)),
    "950-none-bf16-63425": ("ascend950", "none", BF16, None, 63425, 0, (63424, 2, 0, 1)),
    # probs + dropAndPad (keys 11 / 111): oneLoopMax = (UB - 32 - 2048) / (2 * (8 + tokDt)), loopsAlign AlignUp 8
    #   910b bf16: 194272 / 20 = 9713; AlignDown(9713, 16) = 9712 fits, 9713 -> AlignUp 9728 > 9713
    "910b-pad-bf16-9712": ("ascend910b", "pad", BF16, None, 9712, 11, (9712, 1, 8, 9712)),
    "910b-pad-bf16-9713": ("ascend910b", "pad", BF16, None, 9713, 11, (9712, 2, 8, 1)),
    #   bf16 grads + fp32 probs: tokDt is still 2
    "910b-pad-bf16-fp32probs-9712": ("ascend910b", "pad", BF16, F32, 9712, 111, (9712, 1, 8, 9712)),
    "910b-pad-bf16-fp32probs-9713": ("ascend910b", "pad", BF16, F32, 9713, 111, (9712, 2, 8, 1)),
    #   910b fp32: 194272 / 24 = 8094; AlignUp(8089, 8) = 8096 > 8094 -> pieces of AlignDown(8094, 8) = 8088
    "910b-pad-fp32-8088": ("ascend910b", "pad", F32, None, 8088, 11, (8088, 1, 8, 8088)),
    "910b-pad-fp32-8089": ("ascend910b", "pad", F32, None, 8089, 11, (8088, 2, 8, 1)),
    #   950 bf16: (253696 - 2080) / 20 = 12580 -> 12576
    "950-pad-bf16-12576": ("ascend950", "pad", BF16, None, 12576, 11, (12576, 1, 8, 12576)),
    "950-pad-bf16-12577": ("ascend950", "pad", BF16, None, 12577, 11, (12576, 2, 8, 1)),
    # the largest hidden size the pad mode accepts: oneLoopMax * 512 = 9713 * 512 = 4973056 -> pieces of 9712,
    # ceil(4973056 / 9712) = 513 (512 * 9712 = 4972544, tail 512), loopsAlign 520
    "910b-pad-bf16-max-4973056": ("ascend910b", "pad", BF16, None, 4973056, 11, (9712, 513, 520, 512)),
    #   fp32: 8094 * 512 = 4144128 = 512 * 8088 + 3072
    "910b-pad-fp32-max-4144128": ("ascend910b", "pad", F32, None, 4144128, 11, (8088, 513, 520, 3072)),
    #   950 bf16: 12580 * 512 = 6440960 = 512 * 12576 + 2048
    "950-pad-bf16-max-6440960": ("ascend950", "pad", BF16, None, 6440960, 11, (12576, 513, 520, 2048)),
    # probs, no dropAndPad (keys 1 / 101), 8 experts (AlignUp 32): remain = UB - tokDt * 256 - 256 * 4 * 2,
    # hiddenTmpMax = (remain - (1 + probDt) * 32) / (6 * tokDt + 12)
    #   910b bf16: remain 196352 - 512 - 2048 = 193792; (193792 - 96) / 24 = 8070 -> AlignDown 16 = 8064
    "910b-probs-bf16-8064": ("ascend910b", "probs", BF16, None, 8064, 1, (8064, 1, 0, 8064)),
    "910b-probs-bf16-8065": ("ascend910b", "probs", BF16, None, 8065, 1, (8064, 2, 0, 1)),
    #   fp32 probs: (193792 - 160) / 24 = 8068 -> 8064 as well
    "910b-probs-bf16-fp32probs-8064": ("ascend910b", "probs", BF16, F32, 8064, 101, (8064, 1, 0, 8064)),
    "910b-probs-bf16-fp32probs-8065": ("ascend910b", "probs", BF16, F32, 8065, 101, (8064, 2, 0, 1)),
    #   910b fp32: remain 196352 - 1024 - 2048 = 193280; (193280 - 160) / 36 = 5364 -> AlignDown 8 = 5360
    "910b-probs-fp32-5360": ("ascend910b", "probs", F32, None, 5360, 1, (5360, 1, 0, 5360)),
    "910b-probs-fp32-5361": ("ascend910b", "probs", F32, None, 5361, 1, (5360, 2, 0, 1)),
    #   950 bf16: remain 253696 - 2560 = 251136; (251136 - 96) / 24 = 10460 -> 10448
    "950-probs-bf16-10448": ("ascend950", "probs", BF16, None, 10448, 1, (10448, 1, 0, 10448)),
    "950-probs-bf16-10449": ("ascend950", "probs", BF16, None, 10449, 1, (10448, 2, 0, 1)),
}
MODE_ARGS = {  # mode: (experts, slots for 4 tokens, drop_and_pad, probs)
    "none": (2, 8, False, False),
    "none-pad": (2, 8, True, False),
    "pad": (2, 4, True, True),      # capacity 4 / 2 = 2 <= 4 tokens
    "probs": (8, 8, False, True),   # topK 8 / 4 = 2
}


@pytest.mark.parametrize("case", PIECE_CASES)
def test_uwrm_grad_hidden_piece_boundaries(case):
    soc, mode, dtype, probs_dtype, hidden, key, piece = PIECE_CASES[case]
    experts, slots, pad, probs = MODE_ARGS[mode]
    r = tiling_uwrm_grad(*_uwrm(4, hidden, experts, slots, dtype, probs_dtype, probs), drop_and_pad=pad, soc=soc)
    assert r.tiling_key == key
    assert tuple(r.fields[k] for k in PIECE_KEYS) == piece, [r.fields[k] for k in PIECE_KEYS]
    assert r.ub_fits, str(r)


@pytest.mark.parametrize("soc,dtype,probs_dtype,hidden", [
    ("ascend910b", BF16, None, 4973057),
    ("ascend910b", BF16, F32, 4973057),
    ("ascend910b", F32, None, 4144129),
    ("ascend950", BF16, None, 6440961),
], ids=["910b-bf16-4973057", "910b-bf16-fp32probs-4973057", "910b-fp32-4144129", "950-bf16-6440961"])
def test_uwrm_grad_pad_hidden_one_past_the_maximum_fails(soc, dtype, probs_dtype, hidden):
    with pytest.raises(TilingError, match=f"maximum hidden_size .* is {hidden - 1}") as info:
        tiling_uwrm_grad(*_uwrm(4, hidden, 2, 4, dtype, probs_dtype), drop_and_pad=True, soc=soc)
    assert info.value.status == 561002


@pytest.mark.parametrize("top_k,reserve", [
    # indicesReserveNum = min(rowIdMapEachCore, AlignDown(256, topK)) for topK <= 256, else topK; aligned to 16
    # (bf16). 4 tokens on 48 cores: one token per core, rowIdMapEachCore = topK.
    (255, (255, 256)),   # min(255, AlignDown(256, 255) = 255)
    (256, (256, 256)),   # min(256, 256)
    (257, (257, 272)),   # topK itself; AlignUp(257, 16) = 272
], ids=["topk255", "topk256", "topk257"])
def test_uwrm_grad_reserved_slots_switch_to_top_k_past_256(top_k, reserve):
    r = tiling_uwrm_grad(*_uwrm(4, 64, 300, 4 * top_k), soc="ascend910b")
    f = r.fields
    assert r.tiling_key == 1 and f["top_k"] == top_k and f["row_id_map_each_core"] == top_k
    assert (f["indices_reserve_num"], f["indices_reserve_num_align"]) == reserve

