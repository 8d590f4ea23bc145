"""MoeInitRoutingV2Grad tiling on Ascend 950 (the arch35 templates).

The real host UT (tests/ut/op_host/test_moe_init_routing_v2_grad_tiling.cpp, the only one: it targets the 910B
templates) is reproduced on the 950 profile: its failing cases fail in the shared checks of
moe_init_routing_v2_grad_tiling_base.cpp whatever the chip, so they fail here too; its passing shapes get the
arch35 template's key and fields, worked by hand below (the UT's 910B figures do not apply). Further cases cover
every branch of the three templates: split-H with and without a sub-H that fits, full-load with a split H, the
regbase fallback with and without a whole H, the uint16 clip of nUbFactor.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc, moe_init_routing_v2_grad

BF16 = ml_dtypes.bfloat16
FP16, FP32, I32 = np.float16, np.float32, np.int32
SOC = get_soc("ascend950")          # 64 cores, GetCoreMemSize(UB) = 253696
WS = 16 * 1024 * 1024


def tile(x, idx, out, top_k, drop_pad=0, active=0, soc=SOC):
    return moe_init_routing_v2_grad(T(*x), T(*idx), top_k, drop_pad, active, grad_x_out=T(*out), soc=soc)


# (case, grad_expanded_x, expanded_row_idx, grad_x, top_k, drop_pad_mode, active_num, key, fields in struct order)
#   full-load  fields: n, nBlockFactor, nUbFactor, k, activeNum, h, hUbFactor, blockDim
#   split-H    fields: n, kUbFactor, k, activeNum, h, hBlockFactor, hUbFactor, blockDim
#   regbase    fields: n, nBlockFactor, nUbFactor, k, kUbFactor, activeNum, h, hUbFactor, blockDim
PASSING = [
    # UT 01: N 80 > cores, so no split-H; (2*6+1) rows of 8 fp32 = 416 bytes a token: 253696 // 416 = 609 tokens
    ("ut01", ((480, 8), FP32), ((480,), I32), ((80, 8), FP32), 6, 0, 0, 300001, [80, 2, 609, 6, 0, 8, 8, 40]),
    # UT 02 / 03: 8 < 5120 / 512 / 2 fails (5); 5 rows of 5120 halves = 51200 bytes: 4 tokens
    ("ut02", ((16, 5120), FP16), ((16,), I32), ((8, 5120), FP16), 2, 0, 0, 300001, [8, 1, 4, 2, 0, 5120, 5120, 8]),
    ("ut03", ((16, 5120), BF16), ((16,), I32), ((8, 5120), BF16), 2, 0, 0, 300001, [8, 1, 4, 2, 0, 5120, 5120, 8]),
    # UT 04: 129 fp32 rows of 512 = 264192 > UB and topK 64 > 10: regbase; (8 + 8) * 512 fits,
    # kUbFactor = (253696 - 8 * 512) // (8 * 512) = 60
    ("ut04", ((40, 512), FP32), ((640,), I32), ((10, 512), FP32), 64, 0, 40, 400003,
     [10, 1, 1, 64, 60, 40, 512, 512, 10]),
    # UT 05: 3 rows of 512 halves = 3072 bytes: 82 tokens
    ("ut05", ((40, 512), FP16), ((80,), I32), ((80, 512), FP16), 1, 0, 40, 300003, [80, 2, 82, 1, 40, 512, 512, 40]),
    # UT 06: in bf16 the 129 rows (132096 bytes) fit: full-load with 1 token
    ("ut06", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 40, 300003, [10, 1, 1, 64, 40, 512, 512, 10]),
    # UT 07-09: drop-pad (E, C, H); 17 rows of 512: fp32 34816 bytes -> 7 tokens, 16-bit 17408 -> 14
    ("ut07", ((10, 8, 512), FP32), ((640,), I32), ((80, 512), FP32), 8, 1, 40, 300002, [80, 2, 7, 8, 40, 512, 512, 40]),
    ("ut08", ((10, 8, 512), FP16), ((640,), I32), ((80, 512), FP16), 8, 1, 40, 300002,
     [80, 2, 14, 8, 40, 512, 512, 40]),
    ("ut09", ((10, 8, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, 1, 40, 300002,
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
    """UT 06's bf16 shape: 132096 bytes of rows fit the stock UB (full-load), not 64 KiB (regbase, kUbFactor
    (65280 - 3072) // 2048 = 30)."""
    small = get_soc("ascend950", ub_size=65536)
    r = tile(((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 40, soc=small)
    assert r.tiling_key == 400003 and list(r.fields.values()) == [10, 1, 1, 64, 30, 40, 512, 512, 10]


# the UT's failing cases (GRAPH_FAILED in the shared checks)
FAILING = [
    ("ut10-drop-pad-minus1", ((10, 8, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, -1, 40),
    ("ut11-active-minus1", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, -1),
    ("ut12-grad-4d", ((40, 512, 1024, 1024), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 40),
    ("ut13-drop-pad-2d", ((10, 512), BF16), ((640,), I32), ((80, 512), BF16), 8, 1, 40),
    ("ut14-dropless-dim0", ((196608, 8), FP32), ((196607,), I32), ((4096, 8), FP32), 6, 0, 0),
    ("ut15-active-dim0", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 64, 0, 30),
    ("ut16-hidden", ((40, 512), BF16), ((640,), I32), ((10, 510), BF16), 64, 0, 40),
    ("ut17-out-rows", ((40, 512), BF16), ((640,), I32), ((10, 512), BF16), 10, 0, 40),
    # further shared checks
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
