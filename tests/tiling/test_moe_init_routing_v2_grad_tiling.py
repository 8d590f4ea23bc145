"""MoeInitRoutingV2Grad tiling on Ascend 950 (the arch35 templates).

Upstream: moe/moe_init_routing_v2_grad/tests/ut/op_host/test_moe_init_routing_v2_grad_tiling.cpp @ 25fb6b92890d.

* UT_ARCH35: its 15 "Ascend950" cases (regbase, split-H and full-load templates, 5 each), with their compile info
  (40 cores, 65536 or 4096 bytes of UB) and exactly what they check: success, the tiling key and the workspace.
* UT_FAILURES: its failing cases 10-23 (GRAPH_FAILED). The UT runs them on its default 910B platform; they fail in
  the checks of moe_init_routing_v2_grad_tiling_base.cpp that every template shares, so they fail on 950 too.
* Hand-worked cases (not upstream numbers) pin every field of the three templates on the stock 950 profile.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc, moe_init_routing_v2_grad

BF16 = ml_dtypes.bfloat16
FP16, FP32, I32, I64 = np.float16, np.float32, np.int32, np.int64
SOC = get_soc("ascend950")          # 64 cores, GetCoreMemSize(UB) = 253696
WS = 16 * 1024 * 1024


def ut_soc(aiv: int, ub: int):
    """The UT's compile info {aivNum, ubSize}: our profiles take the ini UB size, which GetCoreMemSize reports 256
    bytes smaller."""
    return get_soc("ascend950", aiv_num=aiv, ub_size=ub + 256)


def tile(x, idx, out, top_k, drop_pad=0, active=0, soc=SOC):
    return moe_init_routing_v2_grad(T(*x), T(*idx), top_k, drop_pad, active, grad_x_out=T(*out), soc=soc)


# (UT name, compile-info ubSize, grad_expanded_x, expanded_row_idx, grad_x, top_k, drop_pad_mode, active_num, key);
# every case: 40 cores, GRAPH_SUCCESS, workspace 16777216
UT_ARCH35 = [
    ("moe_init_routing_v2_grad_tiling_regbase_dropless_01", 65536, ((640, 512), BF16), ((640,), I32),
     ((10, 512), BF16), 64, 0, 0, 400001),
    ("moe_init_routing_v2_grad_tiling_regbase_active_02", 65536, ((40, 512), BF16), ((640,), I32),
     ((10, 512), BF16), 64, 0, 40, 400003),
    ("moe_init_routing_v2_grad_tiling_regbase_drop_pad_03", 65536, ((10, 8, 512), BF16), ((5120,), I32),
     ((80, 512), BF16), 64, 1, 40, 400002),
    ("moe_init_routing_v2_grad_tiling_regbase_fp32_full_load_04", 65536, ((640, 512), FP32), ((640,), I32),
     ((10, 512), FP32), 64, 0, 0, 400001),
    ("moe_init_routing_v2_grad_tiling_regbase_large_h_split_ub_05", 65536, ((640, 8192), FP16), ((640,), I32),
     ((10, 8192), FP16), 64, 0, 0, 400001),
    ("moe_init_routing_v2_grad_tiling_regbase_split_h_dropless_01", 65536, ((40, 8192), BF16), ((40,), I32),
     ((5, 8192), BF16), 8, 0, 0, 200001),
    ("moe_init_routing_v2_grad_tiling_regbase_split_h_active_02", 65536, ((5, 8192), BF16), ((40,), I32),
     ((5, 8192), BF16), 8, 0, 5, 200003),
    ("moe_init_routing_v2_grad_tiling_regbase_split_h_drop_pad_03", 65536, ((4, 4, 32768), BF16), ((128,), I32),
     ((16, 32768), BF16), 8, 1, 16, 200002),
    ("moe_init_routing_v2_grad_tiling_regbase_split_h_fp32_04", 65536, ((24, 16384), FP32), ((24,), I32),
     ((3, 16384), FP32), 8, 0, 0, 200001),
    ("moe_init_routing_v2_grad_tiling_regbase_split_h_subh_partial_ub_05", 4096, ((40, 8192), BF16), ((40,), I32),
     ((5, 8192), BF16), 8, 0, 0, 200001),
    ("moe_init_routing_v2_grad_tiling_regbase_full_load_dropless_01", 65536, ((480, 8), FP32), ((480,), I32),
     ((80, 8), FP32), 6, 0, 0, 300001),
    ("moe_init_routing_v2_grad_tiling_regbase_full_load_active_02", 65536, ((40, 512), BF16), ((320,), I32),
     ((40, 512), BF16), 8, 0, 40, 300003),
    ("moe_init_routing_v2_grad_tiling_regbase_full_load_drop_pad_03", 65536, ((10, 8, 512), BF16), ((640,), I32),
     ((80, 512), BF16), 8, 1, 40, 300002),
    ("moe_init_routing_v2_grad_tiling_regbase_full_load_fp16_h_full_04", 65536, ((16, 5120), FP16), ((16,), I32),
     ((8, 5120), FP16), 2, 0, 0, 300001),
    ("moe_init_routing_v2_grad_tiling_regbase_full_load_partial_h_05", 65536, ((640, 2048), BF16), ((640,), I32),
     ((80, 2048), BF16), 8, 0, 0, 300001),
]


@pytest.mark.parametrize("case", UT_ARCH35, ids=[c[0] for c in UT_ARCH35])
def test_host_ut_arch35(case):
    _, ub, x, idx, out, k, dp, active, key = case
    r = tile(x, idx, out, k, dp, active, soc=ut_soc(40, ub))
    assert r.tiling_key == key
    assert r.workspace_size == 16777216


# (UT name, grad_expanded_x, expanded_row_idx, grad_x, top_k, drop_pad_mode, active_num): GRAPH_FAILED
UT_FAILURES = [
    ("moe_init_routing_v2_grad_tiling_10", ((10, 8, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, -1, 40),
    ("moe_init_routing_v2_grad_tiling_11", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, -1),
    ("moe_init_routing_v2_grad_tiling_12", ((40, 512, 1024, 1024), BF16), ((640,), I32), ((10, 512), BF16), 64, 0,
     40),
    ("moe_init_routing_v2_grad_tiling_13", ((10, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, 1, 40),
    ("moe_init_routing_v2_grad_tiling_14", ((196608, 8), FP32), ((196607,), I32), ((4096, 8), FP32), 6, 0, 0),
    ("moe_init_routing_v2_grad_tiling_15", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 30),
    ("moe_init_routing_v2_grad_tiling_16", ((40, 512), BF16), ((640,), I32), ((10, 510), BF16), 64, 0, 40),
    ("moe_init_routing_v2_grad_tiling_17", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 10, 0, 40),
    ("moe_init_routing_v2_grad_tiling_invalid_dtype_mismatch_18", ((640, 512), BF16), ((640,), I32),
     ((10, 512), FP32), 64, 0, 0),
    ("moe_init_routing_v2_grad_tiling_invalid_row_idx_dtype_19", ((640, 512), BF16), ((640,), I64),
     ((10, 512), BF16), 64, 0, 0),
    ("moe_init_routing_v2_grad_tiling_invalid_input_dtype_20", ((640, 512), I64), ((640,), I32), ((10, 512), I64),
     64, 0, 0),
    ("moe_init_routing_v2_grad_tiling_invalid_top_k_zero_21", ((640, 512), BF16), ((640,), I32), ((10, 512), BF16),
     0, 0, 0),
    ("moe_init_routing_v2_grad_tiling_invalid_grad_x_dim_22", ((640, 512), BF16), ((640,), I32),
     ((10, 512, 1), BF16), 64, 0, 0),
    ("moe_init_routing_v2_grad_tiling_invalid_row_idx_not_divisible_23", ((641, 512), BF16), ((641,), I32),
     ((106, 512), BF16), 6, 0, 0),
]


@pytest.mark.parametrize("case", UT_FAILURES, ids=[c[0] for c in UT_FAILURES])
def test_host_ut_failures(case):
    _, x, idx, out, k, dp, active = case
    with pytest.raises(TilingError) as e:
        tile(x, idx, out, k, dp, active, soc=ut_soc(40, 65536))
    assert e.value.status == 561002


# (case, grad_expanded_x, expanded_row_idx, grad_x, top_k, drop_pad_mode, active_num, key, fields in struct order)
#   full-load  fields: n, nBlockFactor, nUbFactor, k, activeNum, h, hUbFactor, numBlocks
#   split-H    fields: n, kUbFactor, k, activeNum, h, hBlockFactor, hUbFactor, numBlocks
#   regbase    fields: n, nBlockFactor, nUbFactor, k, kUbFactor, activeNum, h, hUbFactor, numBlocks
PASSING = [
    # 910B UT 01 shape: N 80 > cores, so no split-H; (2*6+1) rows of 8 fp32 = 416 bytes a token:
    # 253696 // 416 = 609 tokens
    ("910b-ut01", ((480, 8), FP32), ((480,), I32), ((80, 8), FP32), 6, 0, 0, 300001, [80, 2, 609, 6, 0, 8, 8, 40]),
    # the 910B UT 02 / 03 shapes: 8 < 5120 / 512 / 2 fails (5); 5 rows of 5120 halves = 51200 bytes: 4 tokens
    ("910b-ut02", ((16, 5120), FP16), ((16,), I32), ((8, 5120), FP16), 2, 0, 0, 300001, [8, 1, 4, 2, 0, 5120, 5120, 8]),
    ("910b-ut03", ((16, 5120), BF16), ((16,), I32), ((8, 5120), BF16), 2, 0, 0, 300001, [8, 1, 4, 2, 0, 5120, 5120, 8]),
    # 910B UT 04 shape: 129 fp32 rows of 512 = 264192 > UB and topK 64 > 10: regbase; (8 + 8) * 512 fits,
    # kUbFactor = (253696 - 8 * 512) // (8 * 512) = 60
    ("910b-ut04", ((40, 512), FP32), ((640,), I32), ((10, 512), FP32), 64, 0, 40, 400003,
     [10, 1, 1, 64, 60, 40, 512, 512, 10]),
    # 910B UT 05 shape: 3 rows of 512 halves = 3072 bytes: 82 tokens
    ("910b-ut05", ((40, 512), FP16), ((80,), I32), ((80, 512), FP16), 1, 0, 40, 300003,
     [80, 2, 82, 1, 40, 512, 512, 40]),
    # 910B UT 06 shape: in bf16 the 129 rows (132096 bytes) fit: full-load with 1 token
    ("910b-ut06", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 40, 300003,
     [10, 1, 1, 64, 40, 512, 512, 10]),
    # the 910B UT 07-09 shapes: drop-pad (E, C, H); 17 rows of 512: fp32 34816 bytes -> 7 tokens, 16-bit 17408 -> 14
    ("910b-ut07", ((10, 8, 512), FP32), ((640,), I32), ((80, 512), FP32), 8, 1, 40, 300002,
     [80, 2, 7, 8, 40, 512, 512, 40]),
    ("910b-ut08", ((10, 8, 512), FP16), ((640,), I32), ((80, 512), FP16), 8, 1, 40, 300002,
     [80, 2, 14, 8, 40, 512, 512, 40]),
    ("910b-ut09", ((10, 8, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, 1, 40, 300002,
     [80, 2, 14, 8, 40, 512, 512, 40]),
    # split-H: 2 < 8232 / 512 / 2 = 8; hBlockFactor ceil(8232 / 64) = 129 (64 cores), aligned 144 halves,
    # 7 rows = 2016 bytes a row: kUbFactor 253696 // 2016 = 125, hUbFactor = hBlockFactor
    ("split-h", ((6, 8232), BF16), ((6,), I32), ((2, 8232), BF16), 3, 0, 6, 200003,
     [2, 125, 3, 6, 8232, 129, 129, 64]),
    # split-H, sub-H too long: 129 fp32 rows of 1024 > UB; 253696 // 516 = 491 -> 1964 bytes -> 1952 -> 488 fp32
    ("split-h-sub-h", ((64, 65536), FP32), ((64,), I32), ((1, 65536), FP32), 64, 0, 0, 200001,
     [1, 1, 64, 0, 65536, 1024, 488, 64]),
    # full-load, H split: 21 fp32 rows of 100000 > UB, topK 10 <= 10: 253696 // 84 = 3020 -> 12080 bytes -> 12064
    ("full-load-split-h", ((1000, 100000), FP32), ((1000,), I32), ((100, 100000), FP32), 10, 0, 0, 300001,
     [100, 2, 1, 10, 0, 100000, 3016, 50]),
    # regbase, H split: topK 11 > 10 and 16 bytes a column of 100000 > UB: 253696 // 16 = 15856 fp32
    ("regbase-split-h", ((1100, 100000), FP32), ((1100,), I32), ((100, 100000), FP32), 11, 0, 0, 400001,
     [100, 2, 1, 11, 1, 0, 100000, 15856, 50]),
]


@pytest.mark.parametrize("case", PASSING, ids=[c[0] for c in PASSING])
def test_keys_fields_workspace(case):
    _, x, idx, out, k, dp, active, key, fields = case
    r = tile(x, idx, out, k, dp, active)
    assert r.tiling_key == key
    assert list(r.fields.values()) == fields
    assert r.workspace_size == WS and r.block_dim == fields[-1]


def test_ub_plans_are_the_init_buffers():
    r = tile(((480, 8), FP32), ((480,), I32), ((80, 8), FP32), 6)
    assert [tuple(b[:3]) for b in r.ub_plan] == [("inputQueue", 609 * 6 * 8 * 4, 2), ("outputQueue", 609 * 8 * 4, 1)]
    r = tile(((6, 8232), BF16), ((6,), I32), ((2, 8232), BF16), 3, 0, 6)      # rows of AlignUp(129 * 2, 32) bytes
    assert [tuple(b[:3]) for b in r.ub_plan] == [("inputQueue", 125 * 3 * 288, 2), ("outputQueue", 125 * 288, 1)]
    r = tile(((40, 512), FP32), ((640,), I32), ((10, 512), FP32), 64, 0, 40)
    assert [tuple(b[:3]) for b in r.ub_plan] == [("inputQueue", 60 * 512 * 4, 2), ("outputQueue", 512 * 4, 1),
                                                 ("binaryAddBuf", 512 * 4, 1)]
    for b in r.ub_plan:
        assert b.bytes * b.count <= SOC.ub_size


def test_n_ub_factor_is_clipped_to_uint16():
    big = get_soc("ascend950", ub_size=16 * 1024 * 1024)        # 174760 tokens of 96 bytes would fit
    r = tile(((200000, 8), FP32), ((200000,), I32), ((200000, 8), FP32), 1, soc=big)
    assert r.tiling_key == 300001 and r.fields["n_ub_factor"] == 65535


def test_a_small_ub_moves_the_choice():
    """The 910B UT 06 bf16 shape: 132096 bytes of rows fit the stock UB (full-load), not 64 KiB (regbase, kUbFactor
    (65280 - 3072) // 2048 = 30)."""
    small = get_soc("ascend950", ub_size=65536)
    r = tile(((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 40, soc=small)
    assert r.tiling_key == 400003 and list(r.fields.values()) == [10, 1, 1, 64, 30, 40, 512, 512, 10]


# further failures of the shared checks (hand-made)
FAILING = [
    ("dtype-mismatch", ((40, 512), BF16), ((80,), I32), ((80, 512), FP16), 1, 0, 40),
    ("int64-index", ((40, 512), BF16), ((80,), np.int64), ((80, 512), BF16), 1, 0, 40),
    ("int8-grad", ((40, 512), np.int8), ((80,), I32), ((80, 512), np.int8), 1, 0, 40),
    ("top-k-zero", ((40, 512), BF16), ((80,), I32), ((80, 512), BF16), 0, 0, 40),
    ("out-3d", ((40, 512), BF16), ((80,), I32), ((80, 512, 1), BF16), 1, 0, 40),
    ("zero-rows-dropless", ((0, 512), BF16), ((0,), I32), ((0, 512), BF16), 1, 0, 0),
    ("not-a-multiple", ((7, 16), BF16), ((7,), I32), ((3, 16), BF16), 2, 0, 7),
]


@pytest.mark.parametrize("case", FAILING, ids=[c[0] for c in FAILING])
def test_the_shared_checks_fail(case):
    _, x, idx, out, k, dp, active = case
    with pytest.raises(TilingError) as e:
        tile(x, idx, out, k, dp, active)
    assert e.value.status == 561002


def test_membase_profiles_are_not_modelled():
    with pytest.raises(TilingError):
        tile(((16, 64), BF16), ((16,), I32), ((8, 64), BF16), 2, soc="ascend910b")
