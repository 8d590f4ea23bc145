"""tiling.moe_inplace_index_add: the arch35 template selection, every template's tiling field for field, the checks.

Neither ops-transformer snapshot has a unit test of this tiling (moe/3rd/moe_inplace_index_add has no tests/ dir in
the Dec 2025 branch or in master of 2026-07-24), so the figures below are worked by hand from
op_host/arch35/moe_inplace_index_add_*_tiling.cpp (master); each case says how.
"""
from __future__ import annotations

from typing import NamedTuple

import pytest

import tiling
from tiling import TensorDesc as T
from tiling.moe_inplace_index_add import (
    DETERMINISTIC_FIELDS,
    SIMD_FIELDS,
    SIMD_SORT_FIELDS,
    SIMT_FIELDS,
    SIMT_SORT_FIELDS,
    TEMPLATE_DETERMINISTIC,
    TEMPLATE_SIMD,
    TEMPLATE_SIMD_SORT,
    TEMPLATE_SIMT,
    TEMPLATE_SIMT_SORT,
    radix_sort_tmp_bytes,
    select_template,
)
from tiling.status import TilingError

SOC = "ascend950"        # 64 vector cores, GetCoreMemSize 253696: every template starts from 253696 - 32768
WS = 16777216            # the 16 MiB library workspace


def _args(n, m, h, dtype="float32", index="int32"):
    return T((n, h), dtype), T((m,), index), T((m, h), dtype)


# --- selection: both sides of every threshold ------------------------------------------------------------------
@pytest.mark.parametrize("n,m,h,dtype,deterministic,want", [
    # useSort = m div n >= 5
    (10, 49, 4096, "float32", False, TEMPLATE_SIMT),          # 4 repeats: no sort, 4096 < 64 * 128 columns
    (10, 50, 4096, "float32", False, TEMPLATE_SIMD_SORT),     # 5 repeats: sort, 4096 * 4 >= 128 bytes
    # no sort: SIMD from afterAxis >= cores * 128 = 8192 elements
    (10, 20, 8191, "float32", False, TEMPLATE_SIMT),
    (10, 20, 8192, "float32", False, TEMPLATE_SIMD),
    (10, 20, 8192, "bfloat16", False, TEMPLATE_SIMD),
    (10, 20, 8192, "int64", False, TEMPLATE_SIMT),            # int64 is no SIMD dtype
    # sort: SIMD from afterAxis * sizeof >= 128 bytes, else SIMT sort up to 1024 columns
    (4, 20, 31, "float32", False, TEMPLATE_SIMT_SORT),
    (4, 20, 32, "float32", False, TEMPLATE_SIMD_SORT),
    (4, 20, 63, "float16", False, TEMPLATE_SIMT_SORT),
    (4, 20, 64, "float16", False, TEMPLATE_SIMD_SORT),
    (4, 20, 1024, "int64", False, TEMPLATE_SIMT_SORT),        # not SIMD: SIMT sort while afterAxis <= 1024
    (4, 20, 1025, "int64", False, TEMPLATE_SIMT),
    (4, 20, 8, "uint8", False, TEMPLATE_SIMT),                # uint8 is no SIMT-sort dtype
    # the deterministic switch wins for float dtypes only
    (10, 20, 16, "float32", True, TEMPLATE_DETERMINISTIC),
    (10, 20, 16, "bfloat16", True, TEMPLATE_DETERMINISTIC),
    (10, 20, 16, "int32", True, TEMPLATE_SIMT),
], ids=lambda v: str(v))
def test_template_selection(n, m, h, dtype, deterministic, want):
    assert select_template(*_args(n, m, h, dtype), soc=SOC, deterministic=deterministic) == want


def test_simd_threshold_follows_the_core_count():
    soc = tiling.get_soc(SOC, aiv_num=8)            # 8 * 128 = 1024 columns
    assert select_template(*_args(10, 20, 1023), soc=soc) == TEMPLATE_SIMT
    assert select_template(*_args(10, 20, 1024), soc=soc) == TEMPLATE_SIMD


# --- every template's tiling, hand-worked -------------------------------------------------------------------
class Case(NamedTuple):
    operands: tuple             # (var, indices, updates[, alpha]) descriptors
    key: int
    block_dim: int
    fields: dict                # the fields that are not 0
    workspace: int = WS
    soc: dict = {}              # SoC profile overrides
    axis: int = 0
    deterministic: bool = False


def _struct(key):
    """The tiling struct's field names for a key."""
    return {1: SIMT_FIELDS, 2: SIMD_SORT_FIELDS, 3: DETERMINISTIC_FIELDS, 4: SIMD_FIELDS,
            5: SIMT_SORT_FIELDS}[key // 100000]


def _simt(n, m, h):
    return dict(pre_axis=1, var_in_axis=n, updates_in_axis=m, after_axis=h, indices_stride=1, indices_ub_factor=1)


def _simt_sort(values):
    return dict(zip(SIMT_SORT_FIELDS, values))


def _simd_after(n, m, h, used, window, cols, loops, last, each, tail, col_loops, col_tail, tail_col_loops, tail_tail):
    """SIMD's column split: every core takes all pre rows (1 here) and `each` columns (the last core `tail`)."""
    return dict(pre_axis=1, var_in_axis=n, updates_in_axis=m, after_axis=h, used_core_num_before=used,
                ub_index_factor=window, after_axis_factor=cols, each_core_pre_axis_count=1, tail_core_pre_axis_count=1,
                update_loop_size=col_loops, update_tail_num=col_tail, indices_loop_size=loops,
                indice_axis_tail_num=last, each_core_after_axis_count=each, tail_core_after_axis_count=tail,
                tail_update_loop_size=tail_col_loops, tail_update_axis_num=tail_tail, is_split_after_axis=1,
                indices_stride=1)


CASES = {
    # --- SIMT: blockDim = min(ceil(m * h / 1024), 64); float dtypes: ubFactor 0, no UB buffer, 16 MiB
    "simt-fp32-16x100": Case(_args(16, 32, 100), 100000, 4, _simt(16, 32, 100)),
    "simt-fp32-16x4096-64cores": Case(_args(16, 32, 4096), 100000, 64, _simt(16, 32, 4096)),
    "simt-fp16": Case(_args(7, 3, 5, "float16"), 100001, 1, _simt(7, 3, 5)),
    "simt-bf16": Case(_args(7, 3, 5, "bfloat16"), 100027, 1, _simt(7, 3, 5)),
    "simt-int32": Case(_args(7, 3, 5, "int32"), 100003, 1, _simt(7, 3, 5)),
    # int8: local UB min(220928, 65536) = 65536; 65536 div (4 + 1) = 13107 floored to 32 -> 13088;
    # workspace 16 MiB + CeilAlign(16 * 7 * 4, 512) = 512
    "simt-int8-int32-copy": Case(_args(16, 32, 7, "int8"), 100002, 1, dict(_simt(16, 32, 7), ub_factor=13088),
                                 WS + 512),
    # bool: fp16 copy: 65536 div (2 + 1) = 21845 -> 21824; CeilAlign(16 * 7 * 2, 512) = 512
    "simt-bool-fp16-copy": Case(_args(16, 32, 7, "bool"), 100012, 1, dict(_simt(16, 32, 7), ub_factor=21824),
                                WS + 512),
    # var of 2**32 elements > INT32_MAX: uint64 offsets (+100)
    "simt-fp32-wide-offsets": Case(_args(2 ** 20, 2, 4096), 100100, 8, _simt(2 ** 20, 2, 4096)),
    # alpha: +1000
    "simt-bf16-alpha": Case(_args(4, 3, 5, "bfloat16") + (T((1,), "bfloat16"),), 101027, 1, _simt(4, 3, 5)),
    # axis -2 of (3, 4, 5): pre 3, var rows 4, update rows 6, after 5
    "simt-fp32-axis-minus2": Case((T((3, 4, 5), "float32"), T((6,), "int32"), T((3, 6, 5), "float32")), 100000, 1,
                                  dict(_simt(4, 6, 5), pre_axis=3), axis=-2),

    # --- SIMD (key 400000, column split). Stock: UB 253696 - 32768 = 220928, half (220928 - 128) / 2 = 110400;
    # 8192 / 64 = 128 columns per core; 128 * 8 <= 110400 - 8192: afterAxisFactor 128, ubIndexFactor
    # 110400 div (128 * 8 + 4) = 107
    "simd-stock-fp32": Case(_args(16, 32, 8192), 400000, 64,
                            _simd_after(16, 32, 8192, 64, 107, 128, 1, 32, 128, 128, 1, 128, 1, 128)),
    # bf16: 110400 div (128 * 6 + 4) = 143
    "simd-stock-bf16": Case(_args(16, 32, 8192, "bfloat16"), 400000, 64,
                            _simd_after(16, 32, 8192, 64, 143, 128, 1, 32, 128, 128, 1, 128, 1, 128)),
    # UB 65536: 65280 - 32768 = 32512, half 16192; ubIndexFactor 16192 div 1028 = 15: 3 windows, the last of 2
    "simd-ub64k-index-windows": Case(_args(16, 32, 8192), 400000, 64,
                                     _simd_after(16, 32, 8192, 64, 15, 128, 3, 2, 128, 128, 1, 128, 1, 128),
                                     soc=dict(ub_size=65536)),
    # UB 65536 on 2 cores, 4100 columns: 2050 per core, 2050 * 8 > 16192 - 8192: ubIndexFactor
    # CeilAlign(min(8192, 32 * 4), 32) / 4 = 32, afterAxisFactor FloorAlign((16192 - 128) div (32 * 8), 8) = 56;
    # 2050 = 36 * 56 + 34 columns per core; the last core's 2050 likewise
    "simd-ub64k-2cores-column-pieces": Case(_args(16, 32, 4100), 400000, 2,
                                            _simd_after(16, 32, 4100, 2, 32, 56, 1, 32, 2050, 2050, 37, 34, 37, 34),
                                            soc=dict(ub_size=65536, aiv_num=2)),
    # 3 cores, 1000 columns: 334 + 334 + 332; CeilAlign(334, 8) = 336, 110400 div (336 * 8 + 4) = 41
    "simd-3cores-tail-core": Case(_args(5, 9, 1000), 400000, 3,
                                  _simd_after(5, 9, 1000, 3, 41, 336, 1, 9, 334, 332, 1, 334, 1, 332),
                                  soc=dict(aiv_num=3)),

    # --- SIMT sort (keys 5000ab). 4 rows < 255: ids sorted as uint8 (cast mode 4); the bisection window (20) is
    # halved while fewer than 32 cores have work: 10, 5, 2, 1 -> 20 cores of one id; radix scratch for 1 uint8 id:
    # 32 * 7 + 512 - 2 * 32 = 672
    "simt-sort-4rows-1id-per-core": Case(_args(4, 20, 16), 500000, 20,
                                         _simt_sort([1, 4, 20, 16, 1, 1, 1, 1, 1, 672, 1, 1, 1, 20, 1, 4])),
    # 100 rows: the window (about 2440 ids) halves to 152 -> 33 windows on 33 cores, the last of 5000 - 32 * 152 =
    # 136 ids; scratch for 152 uint8 ids: 160 * 7 + 512 - 320 = 1312
    "simt-sort-100rows-152id-windows": Case(_args(100, 5000, 16), 500000, 33,
                                            _simt_sort([1, 100, 5000, 16, 152, 1, 136, 1, 152, 1312, 1, 1, 1, 33, 1,
                                                        4])),

    # --- SIMD sort (key 200000). Stock, 128 ids over 16 rows (uint8 ids, cast mode 4): 2 ids per core on 64 cores.
    # halfUb (220928 - 128) / 2 = 110400; one id with its 64 fp16 columns needs 992 + 384 bytes, far below it:
    # afterAxisFactor CeilAlign(min(1024 / 2, 64), 16) = 64, the window search lands near 270 ids and is cut to
    # eachCoreIndexCount 2
    "simd-sort-stock-fp16-2ids-per-core": Case(
        _args(16, 128, 64, "float16"), 200000, 64,
        dict(pre_axis=1, var_in_axis=16, updates_in_axis=128, after_axis=64, used_core_num_before=64,
             ub_index_factor=2, after_axis_factor=64, each_core_index_count=2, tail_core_index_count=2,
             main_core_indices_loop=1, tail_core_indices_loop=1, main_core_tail_indices=2, tail_core_tail_indices=2,
             update_loop_size=1, update_tail_num=64, is_split_indices_axis=1, indices_stride=1,
             indices_cast_mode=4)),
    # one core, 400 ids, 40 fp32 columns: afterAxisFactor 40 (160 + 160 bytes per id); the search from
    # 110400 div 320 = 345: 320 ids need 8000 bytes of id buffers (1280 + 320 + 384 + 1312 + 1312 + 1280 and
    # radix scratch 320 * 7 + 512 - 640 = 2112) + 102400 of rows = 110400, no byte left; 319 ids leave 320: 319
    "simd-sort-1core-fp32-319-id-windows": Case(
        _args(16, 400, 40), 200000, 1,
        dict(pre_axis=1, var_in_axis=16, updates_in_axis=400, after_axis=40, used_core_num_before=1,
             ub_index_factor=319, after_axis_factor=40, each_core_index_count=400, tail_core_index_count=400,
             main_core_indices_loop=2, tail_core_indices_loop=2, main_core_tail_indices=81, tail_core_tail_indices=81,
             update_loop_size=1, update_tail_num=40, is_split_indices_axis=1, indices_stride=1,
             indices_cast_mode=4), soc=dict(aiv_num=1)),
    # 20000 fp32 columns >= 1024 bytes * 64 cores: the column split. halfUb 110400 - 512 = 109888; 313 columns per
    # core (63 x 313 + 281); one id 928 bytes (32 x 6 + radix 672) + 1280 + 1280 fits: afterAxisFactor
    # CeilAlign(313, 8) = 320, start 109888 div (320 * 8 + 928) = 31, whose 82720 bytes fit: 31 ids, 17 windows,
    # the last of 512 - 16 * 31 = 16
    "simd-sort-stock-fp32-column-split": Case(
        _args(64, 512, 20000), 200000, 64,
        dict(pre_axis=1, var_in_axis=64, updates_in_axis=512, after_axis=20000, used_core_num_before=64,
             ub_index_factor=31, after_axis_factor=320, update_loop_size=1, update_tail_num=313, indices_loop_size=17,
             indice_axis_tail_num=16, each_core_after_axis_count=313, tail_core_after_axis_count=281,
             tail_update_loop_size=1, tail_update_axis_num=281, is_split_after_axis=1, indices_stride=1,
             indices_cast_mode=4)),
    # 300 rows: int16 ids (cast mode 1); 2000 ids on 64 cores: 32 each (62 x 32 + 16 on the last, 63 cores)
    "simd-sort-stock-bf16-int16-ids": Case(
        _args(300, 2000, 64, "bfloat16"), 200000, 64,
        dict(pre_axis=1, var_in_axis=300, updates_in_axis=2000, after_axis=64, used_core_num_before=63,
             ub_index_factor=32, after_axis_factor=64, each_core_index_count=32, tail_core_index_count=16,
             main_core_indices_loop=1, tail_core_indices_loop=1, main_core_tail_indices=32, tail_core_tail_indices=16,
             update_loop_size=1, update_tail_num=64, is_split_indices_axis=1, indices_stride=1,
             indices_cast_mode=1)),
    # axis 1 of (100, 4, 64) with 20 ids: fewer ids than pre rows, so the pre split: 2 pre rows per core on 50
    # cores; its window search counts no update bytes (it reads eachCoreAfterAxisCount, 0 in this split) and stops
    # at indicesAxis 20; 64 columns in one piece
    "simd-sort-pre-split-axis1": Case(
        (T((100, 4, 64), "float32"), T((20,), "int32"), T((100, 20, 64), "float32")), 200000, 64,
        dict(pre_axis=100, var_in_axis=4, updates_in_axis=20, after_axis=64, used_core_num_before=50,
             ub_index_factor=20, after_axis_factor=64, each_core_pre_axis_count=2, tail_core_pre_axis_count=2,
             update_loop_size=1, update_tail_num=64, indices_loop_size=1, indice_axis_tail_num=20,
             is_split_pre_axis=1, indices_stride=1, indices_cast_mode=4), axis=1),

    # --- deterministic (keys 300000 + 0 fp32 / 1 fp16 / 2 bf16), every core launched. halfUb (220928 - 192) / 2 =
    # 110368; the split threshold is 64 / 2 = 32.
    # 100 columns > 32, after >= pre: the column split. 2 columns per core on 50 cores; 2 * 4 <= 110368 - 1024:
    # afterAxisFactor CeilAlign(2, 8) = 8, ubIndexFactor 110368 div (8 * 4 * 2 + 4) = 1623; one window of 20 ids
    "det-fp32-column-split": Case(
        _args(16, 20, 100), 300000, 64,
        dict(pre_axis=1, var_in_axis=16, updates_in_axis=20, after_axis=100, used_core_num_before=50,
             ub_index_factor=1623, after_axis_factor=8, each_core_pre_axis_count=1, tail_core_pre_axis_count=1,
             update_loop_size=1, update_tail_num=2, indices_loop_size=1, indice_axis_tail_num=20,
             each_core_after_axis_count=2, tail_core_after_axis_count=2, tail_update_loop_size=1,
             tail_update_axis_num=2, is_split_after_axis=1, is_determinstic=1), deterministic=True),
    # 3500000 bf16 columns: 54688 per core (the last 54656); 54688 * 2 > 110368 - 1024: ubIndexFactor
    # CeilAlign(min(1024, 3 * 4), 32) / 4 = 8, afterAxisFactor FloorAlign((110368 - 32) div (8 * 2 * 2), 16) = 3440;
    # 54688 = 15 * 3440 + 3088, 54656 = 15 * 3440 + 3056
    "det-bf16-column-split-wide-rows": Case(
        _args(2, 3, 3500000, "bfloat16"), 300002, 64,
        dict(pre_axis=1, var_in_axis=2, updates_in_axis=3, after_axis=3500000, used_core_num_before=64,
             ub_index_factor=8, after_axis_factor=3440, each_core_pre_axis_count=1, tail_core_pre_axis_count=1,
             update_loop_size=16, update_tail_num=3088, indices_loop_size=1, indice_axis_tail_num=3,
             each_core_after_axis_count=54688, tail_core_after_axis_count=54656, tail_update_loop_size=16,
             tail_update_axis_num=3056, is_split_after_axis=1, is_determinstic=1), deterministic=True),
    # axis 1 of (100, 4, 16) fp16: 100 pre rows > 32, after 16 < pre: the pre split, 2 rows per core on 50 cores;
    # one id block 4 + 2 * 16 * 2 = 68: ubIndexFactor FloorAlign(110368 div 68 * 4, 32) / 4 = 1616
    "det-fp16-pre-split": Case(
        (T((100, 4, 16), "float16"), T((40,), "int32"), T((100, 40, 16), "float16")), 300001, 64,
        dict(pre_axis=100, var_in_axis=4, updates_in_axis=40, after_axis=16, used_core_num_before=50,
             ub_index_factor=1616, after_axis_factor=16, each_core_pre_axis_count=2, tail_core_pre_axis_count=2,
             update_loop_size=1, update_tail_num=16, indices_loop_size=1, indice_axis_tail_num=40,
             is_split_pre_axis=1, is_determinstic=1), axis=1, deterministic=True),
    # axis 1 of (14001, 2, 14000) fp32: the pre split with rows wider than half the UB (4 + 4 * 14000 * 2 > 110368):
    # one id per window, afterAxisFactor CeilAlign((110368 - 4) div 8, 8) = 13800 (two rows of it are 32 bytes
    # more than the half); 219 pre rows per core, 204 on the last
    "det-fp32-pre-split-wide-rows": Case(
        (T((14001, 2, 14000), "float32"), T((3,), "int32"), T((14001, 3, 14000), "float32")), 300000, 64,
        dict(pre_axis=14001, var_in_axis=2, updates_in_axis=3, after_axis=14000, used_core_num_before=64,
             ub_index_factor=1, after_axis_factor=13800, each_core_pre_axis_count=219, tail_core_pre_axis_count=204,
             update_loop_size=2, update_tail_num=200, indices_loop_size=3, indice_axis_tail_num=1,
             is_split_pre_axis=1, is_determinstic=1), axis=1, deterministic=True),
    # 16 columns, 2000 ids > 32: the id split. 32 ids per core (63 cores, 16 on the last); 40000 var rows, 625 per
    # core. Step 1 from 110368 div (88 + 12 * 16) = 394 down: 372 ids need 110496 bytes (rows 372 * 192, sort
    # buffers, radix scratch 384 * 15 + 512), 371 need 110240: 371. Step 2 from 110368 div 196 = 563: 562 rows of
    # 192 bytes + CeilAlign(562 * 4, 32) = 110176 fit. The var steps test those 562 rows, fit, and stop one below
    # their starts 574 and 563 (573 and 562, under the 625 cap). 2000 / 40000 < 0.1: isOpti. Workspace 16 MiB +
    # 40000 * 4 + 2 * 640000 * 4 + 64 * 32 * (16 * 4 + 4)
    "det-fp32-id-split": Case(
        _args(40000, 2000, 16), 300000, 64,
        dict(pre_axis=1, var_in_axis=40000, updates_in_axis=2000, after_axis=16, used_core_num_before=63,
             used_core_num_after=64, ub_index_factor=371, ub_var_opti_factor=562, ub_quanta_indx_factor=562,
             ub_var_factor=573, each_core_index_count=32, tail_core_index_count=16, each_core_var_count=625,
             tail_core_var_count=625, is_determinstic=1, is_opti=1),
        WS + 40000 * 4 + 2 * 640000 * 4 + 64 * 32 * (16 * 4 + 4), deterministic=True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_tiling(case):
    c = CASES[case]
    r = tiling.moe_inplace_index_add(*c.operands, axis=c.axis, soc=tiling.get_soc(SOC, **c.soc),
                                     deterministic=c.deterministic)
    assert (r.tiling_key, r.block_dim, r.workspace_size, r.schedule_mode) == (c.key, c.block_dim, c.workspace, 1)
    names = _struct(c.key)
    assert list(r.fields) == list(names) and set(c.fields) <= set(names)
    assert r.data() == [c.fields.get(name, 0) for name in names]


# --- UB plans ---------------------------------------------------------------------------------------------------
UB_PLANS = {
    "simd-stock-fp32": [("updatesQue_", 107 * 128 * 4, 2), ("indicesQue_", 107 * 4, 2)],
    "simd-stock-bf16": [("updatesQue_", 143 * 128 * 2, 2), ("indicesQue_", 143 * 4, 2)],
    "simd-ub64k-index-windows": [("updatesQue_", 15 * 128 * 4, 2), ("indicesQue_", 15 * 4, 2)],
    "simd-ub64k-2cores-column-pieces": [("updatesQue_", 32 * 56 * 4, 2), ("indicesQue_", 32 * 4, 2)],
    "simd-3cores-tail-core": [("updatesQue_", 41 * 336 * 4, 2), ("indicesQue_", 41 * 4, 2)],
    "simt-fp32-16x100": [],
    "simt-int8-int32-copy": [("varQue_", 13088, 1), ("varCastQue_", 13088 * 4, 1)],
    # MoeInplaceIndexAddDeterminsticNotQuant: its maxScoreBuf_, the base class's (1623 ids, int32 unnarrowed), the
    # column split's queues (the id queue block-aligned)
    "det-fp32-column-split": [("maxScoreBuf_", 512, 1), ("baseMaxScoreBuf_", 512, 1),
                              ("sortIndicesBuf_", 1623 * 4 + 64 + 4, 1), ("updatesOriginIdexQue_", 1623 * 4, 2),
                              ("uniqueIdCountQue_", 1624 * 4, 2), ("updateSumIdxQue_", 1624 * 4, 2),
                              ("indicesCastQue_", 1623 * 4, 2), ("indicesQue_", 1624 * 4, 1),
                              ("updatesQue_", 1623 * 8 * 4, 1), ("updatesCastQue_", 1623 * 8 * 4, 1)],
    # MoeInplaceIndexAddDeterminstic, one TPipe per step: 371 ids of 16 fp32 columns (64 bytes), 562 quantised rows,
    # the optimised var step's 562 rows with their ids
    "det-fp32-id-split": [("indicesQue_", 371 * 4, 2), ("sortIndicesQue_", 1484 + 64 + 20, 1),
                          ("updatesOriginIdexQue_", 371 * 4, 2), ("uniqueIdCountQue_", 1504, 2),
                          ("updateSumIdxQue_", 1504, 2), ("updatesQue_", 371 * 64, 2),
                          ("updatesCastQue_", 371 * 64, 2), ("updateSumQue_", 371 * 64, 2),
                          ("sumIdxQue_", 562 * 4, 2), ("sumQue_", 562 * 64, 2), ("quantaSumQue_", 562 * 64, 2),
                          ("rValueQue_", 562 * 64, 2), ("sumQuanToIntQue_", 562 * 64, 2), ("rValueQue_", 562 * 64, 2),
                          ("invQuanDataQue_", 562 * 64, 2), ("sumIdxQue_", 562 * 4, 2)],
    "det-fp16-pre-split": [("maxScoreBuf_", 512, 1), ("baseMaxScoreBuf_", 512, 1),
                           ("sortIndicesBuf_", 1616 * 4 + 64, 1), ("updatesOriginIdexQue_", 1616 * 4, 2),
                           ("uniqueIdCountQue_", 1617 * 4 + 28, 2), ("updateSumIdxQue_", 1617 * 4 + 28, 2),
                           ("indicesCastQue_", 1616 * 4, 2), ("indicesQue_", 1616 * 4, 1),
                           ("updatesQue_", 1616 * 16 * 2, 1), ("updatesCastQue_", 1616 * 16 * 2, 1)],
}


@pytest.mark.parametrize("case", list(UB_PLANS), ids=list(UB_PLANS))
def test_ub_plan(case):
    c, plan = CASES[case], UB_PLANS[case]
    r = tiling.moe_inplace_index_add(*c.operands, axis=c.axis, soc=tiling.get_soc(SOC, **c.soc),
                                     deterministic=c.deterministic)
    assert [tuple(b[:3]) for b in r.ub_plan] == plan


def test_simd_sort_ub_plan():
    """InitBuffer order and sizes for 2 ids of 64 fp16 columns (the stock case above): the three vector-only
    queues at VECCALC (see SIMD_SORT_VECTOR_QUE)."""
    r = tiling.moe_inplace_index_add(*_args(16, 128, 64, "float16"), soc=SOC)
    assert [(b.name, b.bytes, b.count, b.position) for b in r.ub_plan] == [
        ("maxScoreBuf_", 512, 1, "VECCALC"), ("baseMaxScoreBuf_", 512, 1, "VECCALC"),
        ("sortIndicesBuf_", 96, 1, "VECCALC"), ("updatesOriginIdexQue_", 8, 2, "VECCALC"),
        ("uniqueIdCountQue_", 32, 2, "VECCALC"), ("updateSumIdxQue_", 32, 2, "VECOUT"),
        ("indicesCastQue_", 2, 2, "VECCALC"), ("indicesQue_", 8, 2, "VECIN"), ("updatesQue_", 256, 2, "VECIN"),
        ("updatesCastQue_", 512, 2, "VECOUT")]


@pytest.mark.parametrize("count,size,want", [(1, 1, 672), (152, 1, 1312), (1, 4, 32 * 7 + 512 + 32 * 8),
                                             (33, 8, 64 * 7 + 512 + 64 * 12)],
                         ids=["u8-1", "u8-152", "i32-1", "i64-33"])
def test_radix_sort_tmp_bytes(count, size, want):
    assert radix_sort_tmp_bytes(count, size) == want


# --- checks ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,kwargs,words", [
    (_args(4, 3, 5), dict(axis=2), "axis"),
    (_args(4, 3, 5), dict(axis=-3), "axis"),
    ((T((4, 5), "float64"), T((3,), "int32"), T((3, 5), "float64")), {}, "var dtype"),
    ((T((4, 5), "float32"), T((3,), "int16"), T((3, 5), "float32")), {}, "indices dtype"),
    ((T((4, 5), "float32"), T((3,), "int32"), T((3, 5), "float16")), {}, "same dtype"),
    ((T((4, 5), "float32"), T((3, 1), "int32"), T((3, 5), "float32")), {}, "vector"),
    ((T((4, 5), "float32"), T((3,), "int32"), T((3, 5, 1), "float32")), {}, "number of dimensions"),
    ((T((4, 5), "float32"), T((2,), "int32"), T((3, 5), "float32")), {}, "number of indices"),
    ((T((4, 5), "float32"), T((3,), "int32"), T((3, 6), "float32")), {}, "must match var shape"),
    ((T((0, 5), "float32"), T((3,), "int32"), T((3, 5), "float32")), {}, "varInAxis 0"),
], ids=["axis-high", "axis-low", "var-fp64", "indices-int16", "updates-dtype", "indices-2d", "updates-rank",
        "indices-count", "updates-shape", "var-empty-axis"])
def test_failing_tilings(args, kwargs, words):
    with pytest.raises(TilingError) as e:
        tiling.moe_inplace_index_add(*args, soc=SOC, **kwargs)
    assert e.value.status == 561002 and words in e.value.message


def test_simd_sort_column_split_without_room_for_a_column_is_refused():
    """The real tiling would go on with afterAxisFactor <= 0 (its kernel then adds nothing); a UB-limit error here."""
    operands = (T((6, 16384), "float32"), T((48,), "int32"), T((48, 16384), "float32"))
    assert tiling.moe_inplace_index_add(*operands, soc=tiling.get_soc(SOC, ub_size=65536)).tiling_key == 200000
    with pytest.raises(TilingError) as e:
        tiling.moe_inplace_index_add(*operands, soc=tiling.get_soc(SOC, ub_size=32768))
    assert e.value.status == 561002 and "column split" in e.value.message and "ub_size" in e.value.message


def test_alpha_must_hold_one_element():
    with pytest.raises(TilingError, match="alpha size must be 1"):
        tiling.moe_inplace_index_add(*_args(4, 3, 5), T((2,), "float32"), soc=SOC)


@pytest.mark.parametrize("soc", ["ascend910b", "ascend910_93"])
def test_membase_chips_have_no_such_tiling(soc):
    with pytest.raises(NotImplementedError, match="ascend950 only"):
        tiling.moe_inplace_index_add(*_args(4, 3, 5), soc=soc)
