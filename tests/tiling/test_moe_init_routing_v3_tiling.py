"""MoeInitRoutingV3 arch35 tiling: every case of the real op's test_moe_init_routing_v3_arch35_tiling.cpp (same
names, same tensors and attrs, the figures the UT checks), and hand-worked cases for paths the UTs miss."""
from __future__ import annotations

import pytest

from tiling import TilingError, get_soc, moe_init_routing_v3

EXPERT_NUM = 256
# the UTs' compile info: 40 vector cores and a tiling UB of 262144 bytes (our profiles hand tiling ub_size - 256)
UT_SOC = get_soc("950", aiv_num=40, ub_size=262144 + 256)
UT_SOC_SMALL_UB = get_soc("950", aiv_num=40, ub_size=196608 + 256)


def _ceil_div(a, b):
    return (a + b - 1) // b


def _tiling(x, idx, scale=None, offset=None, *, outs, capacity=0, drop_pad=0, tokens_type=1, flag=True, quant=-1,
            rng=(0, EXPERT_NUM), row_idx=0, soc=UT_SOC, active_num=None):
    ex, ri, tk, es = outs
    n, k = idx[0]
    return moe_init_routing_v3(x, idx, scale, offset, active_num=n * k if active_num is None else active_num,
                               expert_capacity=capacity, expert_num=EXPERT_NUM, drop_pad_mode=drop_pad,
                               expert_tokens_num_type=tokens_type, expert_tokens_num_flag=flag, quant_mode=quant,
                               active_expert_range=list(rng), row_idx_type=row_idx, expanded_x_out=ex,
                               expanded_row_idx_out=ri, expert_tokens_count_or_cumsum_out=tk, expanded_scale_out=es,
                               soc=soc)


# --- RunDropPadTilingTestcase ---------------------------------------------------------------------------------
def _drop_pad(n, h, k, capacity, rng, row_idx):
    outs = (((EXPERT_NUM, capacity, h), "float32"), ((n * k,), "int32"), ((rng[1] - rng[0],), "int64"),
            ((EXPERT_NUM * capacity,), "float32"))
    return _tiling(((n, h), "float32"), ((n, k), "int32"), outs=outs, capacity=capacity, drop_pad=1, rng=rng,
                   row_idx=row_idx)


DROP_PAD_CASES = [
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_multi_row_loop", 1000000, 16, 1, 1),
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_single_row_loop", 8192, 16, 1, 1),
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_tail_core", 8201, 16, 1, 1),
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_multi_k", 1024, 16, 8, 1),
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_multi_col_loop", 4096, 32769, 2, 1),
    ("moe_init_routing_v3_tiling_regbase_droppad_non_full_load_multi_col_aligned", 4096, 65536, 2, 1),
]


@pytest.mark.parametrize("name,n,h,k,capacity", DROP_PAD_CASES, ids=[c[0] for c in DROP_PAD_CASES])
def test_ut_drop_pad_keys(name, n, h, k, capacity):
    assert _drop_pad(n, h, k, capacity, (0, EXPERT_NUM), 0).tiling_key == 11000100


DROP_PAD_FAILURES = [
    ("moe_init_routing_v3_tiling_regbase_droppad_reject_scatter_row_idx", (0, EXPERT_NUM), 1, "row_idx_type"),
    ("moe_init_routing_v3_tiling_regbase_droppad_reject_partial_expert_range", (0, 128), 0, "active_expert_range"),
]


@pytest.mark.parametrize("name,rng,row_idx,arg", DROP_PAD_FAILURES, ids=[c[0] for c in DROP_PAD_FAILURES])
def test_ut_drop_pad_failures(name, rng, row_idx, arg):
    with pytest.raises(TilingError, match=arg) as info:
        _drop_pad(4, 16, 2, 2, rng, row_idx)
    assert info.value.status == 561002


# --- RunSuccessTestcase / RunFailureTestcase ---------------------------------------------------------------------
# x and expert_idx only (the helpers' isInputScale argument builds no scale tensor); expanded_x is int8 whatever the
# quant mode (master's ValidateExpandedXDtype looks at it only for quant modes 0, 1 and 13); the tiling data as the
# UT prints it, 68 int64 fields
SUCCESS_CASES = [
    # (UT name, N, H, K, quant, x dtype, range, row idx type, key, tiling data, workspace)
    ("moe_init_routing_v3_tiling_regbase_01", 1, 83, 27, -1, "float32", (180, 192), 0, 200000,
     "40 1 83 27 180 192 12 -1 0 0 0 256 1 1 0 1 27 0 0 0 1 27 1 27 27 27 1 27 27 6144 0 1024 27 1 1 1 1 1 1 1 1 27 1 "
     "1 1 1 1 1 1 1 1 83 83 27 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16780660),
    ("moe_init_routing_v3_tiling_regbase_02", 1, 83, 27, -1, "float32", (180, 192), 1, 200000,
     "40 1 83 27 180 192 12 -1 1 0 0 256 1 1 0 1 27 0 0 0 1 27 1 27 27 27 1 27 27 6144 0 1024 27 1 1 1 1 1 1 1 1 27 1 "
     "1 1 1 1 1 1 1 1 83 83 27 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16780660),
    ("moe_init_routing_v3_tiling_regbase_03", 160, 96, 1450, -1, "int8", (180, 192), 0, 11000000,
     "40 160 96 1450 180 192 12 -1 0 0 0 256 1 1 0 1 232000 0 0 0 40 5824 1 5824 5824 4864 1 4864 4864 6144 10 1024 "
     "40 5800 5800 1 5800 5800 1 5800 5800 40 5800 5800 8 744 592 8 744 592 1 96 96 232000 2 0 0 0 0 0 0 0 0 0 0 0 0 "
     "0", 23275904),
    ("moe_init_routing_v3_tiling_regbase_04", 160, 96, 1450, -1, "float32", (180, 192), 1, 11001000,
     "40 160 96 1450 180 192 12 -1 1 0 0 256 1 1 0 1 232000 0 0 0 40 5824 1 5824 5824 4864 1 4864 4864 6144 10 1024 "
     "40 5800 5800 1 5800 5800 1 5800 5800 40 5800 5800 25 234 184 25 234 184 1 96 96 232000 2 0 0 0 0 0 0 0 0 0 0 0 "
     "0 0", 23275904),
    ("moe_init_routing_v3_tiling_regbase_05", 1, 83, 27, 1, "float32", (180, 192), 0, 220000,
     "40 1 83 27 180 192 12 1 0 0 0 256 1 1 0 1 27 0 0 0 1 27 1 27 27 27 1 27 27 6144 0 1024 27 1 1 1 1 1 1 1 1 27 1 1 "
     "1 1 1 1 1 1 1 83 83 27 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16793940),
    ("moe_init_routing_v3_tiling_regbase_06", 1, 83, 27, 1, "float32", (180, 192), 0, 220000,
     "40 1 83 27 180 192 12 1 0 0 0 256 1 1 0 1 27 0 0 0 1 27 1 27 27 27 1 27 27 6144 0 1024 27 1 1 1 1 1 1 1 1 27 1 1 "
     "1 1 1 1 1 1 1 83 83 27 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16793940),
    ("moe_init_routing_v3_tiling_regbase_07", 8, 60, 32, 1, "float32", (0, 100), 1, 220000,
     "40 8 60 32 0 100 100 1 1 0 0 256 1 1 0 1 256 0 0 0 1 256 1 256 256 256 1 256 256 6144 0 1024 37 7 4 1 7 7 1 4 4 "
     "37 7 4 1 7 7 1 4 4 1 60 60 256 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16797376),
    ("moe_init_routing_v3_tiling_regbase_08", 8, 60, 32, 1, "float32", (0, 100), 1, 220000,
     "40 8 60 32 0 100 100 1 1 0 0 256 1 1 0 1 256 0 0 0 1 256 1 256 256 256 1 256 256 6144 0 1024 37 7 4 1 7 7 1 4 4 "
     "37 7 4 1 7 7 1 4 4 1 60 60 256 6 0 0 0 0 0 0 0 0 0 0 0 0 0", 16797376),
    ("moe_init_routing_v3_tiling_regbase_09", 160, 96, 1450, 1, "float32", (180, 192), 0, 11020000,
     "40 160 96 1450 180 192 12 1 0 0 0 256 1 1 0 1 232000 0 0 0 40 5824 1 5824 5824 4864 1 4864 4864 6144 10 1024 40 "
     "5800 5800 1 5800 5800 1 5800 5800 40 5800 5800 1 5800 5800 1 5800 5800 1 96 96 232000 6 0 0 0 0 0 0 0 0 0 0 0 0 "
     "0", 23291264),
    ("moe_init_routing_v3_tiling_regbase_10", 160, 96, 1450, 1, "float32", (180, 192), 0, 11020000,
     "40 160 96 1450 180 192 12 1 0 0 0 256 1 1 0 1 232000 0 0 0 40 5824 1 5824 5824 4864 1 4864 4864 6144 10 1024 40 "
     "5800 5800 1 5800 5800 1 5800 5800 40 5800 5800 1 5800 5800 1 5800 5800 1 96 96 232000 6 0 0 0 0 0 0 0 0 0 0 0 0 "
     "0", 23291264),
] + [
    (f"moe_init_routing_v3_tiling_regbase_{i}", 160, 96, 1450, 1, x_dtype, (0, 100), 1, 11021000,
     "40 160 96 1450 0 100 100 1 1 0 0 256 1 1 0 1 232000 0 0 0 40 5824 1 5824 5824 4864 1 4864 4864 6144 10 1024 40 "
     "5800 5800 1 5800 5800 1 5800 5800 40 5800 5800 1 5800 5800 1 5800 5800 1 96 96 232000 6 0 0 0 0 0 0 0 0 0 0 0 0 "
     "0", 23291968)
    for i, x_dtype in ((11, "float32"), (12, "float32"), (13, "bfloat16"), (14, "float16"))
]


def _regbase_outs(n, h, k, rng):
    return (((n * k, h), "int8"), ((n * k,), "int32"), ((rng[1] - rng[0],), "int64"), ((n * k,), "float32"))


@pytest.mark.parametrize("name,n,h,k,quant,x_dtype,rng,row_idx,key,data,workspace", SUCCESS_CASES,
                         ids=[c[0] for c in SUCCESS_CASES])
def test_ut_success_figures(name, n, h, k, quant, x_dtype, rng, row_idx, key, data, workspace):
    r = _tiling(((n, h), x_dtype), ((n, k), "int32"), outs=_regbase_outs(n, h, k, rng), quant=quant, rng=rng,
                row_idx=row_idx)
    assert r.tiling_key == key
    assert r.data() == [int(v) for v in data.split()]
    assert r.workspace_size == workspace
    assert r.block_dim == 40 and r.schedule_mode == 1


def test_ut_moe_init_routing_v3_tiling_regbase_15():
    """RunFailureTestcase (UB 196608): static quantisation without the scale input fails."""
    with pytest.raises(TilingError, match="scale") as info:
        _tiling(((1, 83), "float32"), ((1, 27), "int32"), outs=_regbase_outs(1, 83, 27, (180, 192)), quant=0,
                rng=(180, 192), row_idx=1, soc=UT_SOC_SMALL_UB)
    assert info.value.status == 561002


# --- RunArch35ExtendedTestcase -----------------------------------------------------------------------------------
def _expanded_x_dtype(quant, x_dtype):
    return {-1: x_dtype, 0: "int8", 1: "int8", 13: "int4", 9: "float4_e2m1", 6: "hifloat8", 7: "hifloat8",
            8: "hifloat8"}.get(quant, "float8_e5m2" if quant in (2, 16, 4, 11, 14) else "float8_e4m3fn")


def _expanded_scale(quant, total, cols, has_scale, x_dtype):
    if quant in (2, 3, 16, 17):
        return (total, _ceil_div(_ceil_div(cols, 32), 2) * 2), "float8_e8m0"
    if quant == 9:
        return (total, _ceil_div(cols, 64), 2), "float8_e8m0"
    if quant in (11, 12):
        return (total, _ceil_div(cols, 256), 2), "float32"
    if quant in (4, 5, 14, 15):
        return (total, _ceil_div(cols, 128)), "float32"
    if quant == -1 and has_scale and x_dtype in ("float8_e5m2", "float8_e4m3fn", "float4_e2m1"):
        return (total, _ceil_div(cols, 64), 2), "float8_e8m0"
    return (total,), "float32"


def _extended(n, h, k, tokens_type, quant, x_dtype, rng, row_idx, scale=None, offset=None):
    total = n * k
    tokens = (EXPERT_NUM, 2) if tokens_type == 2 else (rng[1] - rng[0],)
    outs = (((total, h), _expanded_x_dtype(quant, x_dtype)), ((total,), "int32"), (tokens, "int64"),
            _expanded_scale(quant, total, h, scale is not None, x_dtype))
    return _tiling(((n, h), x_dtype), ((n, k), "int32"), scale, offset, outs=outs, tokens_type=tokens_type,
                   quant=quant, rng=rng, row_idx=row_idx)


P = "moe_init_routing_v3_tiling_regbase_"
EXTENDED_SUCCESS = [
    # (UT name, n, h, k, tokens type, quant, x dtype, range, row idx, scale, offset, key or None (not checked))
    (P + "mxfp8_e5m2", 1, 83, 27, 1, 2, "float16", (180, 192), 0, None, None, None),
    (P + "mxfp8_e4m3", 1, 83, 27, 1, 3, "bfloat16", (180, 192), 1, None, None, None),
    (P + "mxfp8_roundscale_amax_e5m2", 1, 65, 27, 1, 16, "float16", (180, 192), 0, None, None, 10170000),
    (P + "mxfp8_roundscale_amax_e4m3", 1, 97, 27, 1, 17, "bfloat16", (180, 192), 1, None, None, 10171000),
    (P + "mxfp4", 1, 83, 27, 1, 9, "float16", (180, 192), 0, None, None, None),
    (P + "fp8_perblock_e5m2", 1, 83, 27, 1, 11, "float16", (180, 192), 0, None, None, None),
    (P + "fp8_perblock_e4m3", 1, 83, 27, 1, 12, "bfloat16", (180, 192), 1, None, None, None),
    (P + "fp8_group_e5m2", 1, 257, 27, 1, 4, "float16", (180, 192), 0, None, None, None),
    (P + "fp8_group_e4m3", 1, 257, 27, 1, 5, "bfloat16", (180, 192), 1, None, None, None),
    (P + "fp8_group_amax_e5m2", 1, 257, 27, 1, 14, "float16", (180, 192), 0, None, None, None),
    (P + "fp8_group_amax_e4m3", 1, 257, 27, 1, 15, "bfloat16", (180, 192), 1, None, None, None),
    (P + "unquant_fp8_scale", 1, 83, 27, 1, -1, "float8_e5m2", (180, 192), 0, ((1, 2, 2), "float8_e8m0"), None,
     None),
    (P + "dynamic_with_scale", 1, 83, 27, 1, 1, "float32", (180, 192), 0, ((12, 83), "float32"), None, None),
    (P + "int4_dynamic", 1, 84, 27, 1, 13, "float32", (180, 192), 0, ((1, 84), "float32"), None, None),
    (P + "static_success", 1, 83, 27, 1, 0, "float32", (180, 192), 0, ((1,), "float32"), ((1,), "float32"), None),
    (P + "hif8_cast", 1, 83, 27, 1, 6, "float16", (180, 192), 0, None, None, None),
    (P + "hif8_pertoken", 1, 83, 27, 1, 8, "bfloat16", (180, 192), 1, None, None, None),
    (P + "mxfp8_multicore", 8, 60, 32, 2, 2, "float16", (0, 100), 1, None, None, None),
    (P + "empty_tensor_n_zero", 0, 128, 8, 1, -1, "float32", (0, EXPERT_NUM), 0, None, None, None),
    (P + "empty_tensor_k_zero", 3, 128, 0, 1, -1, "float32", (0, EXPERT_NUM), 0, None, None, None),
    (P + "empty_tensor_cols_zero", 3, 0, 8, 1, -1, "float32", (0, EXPERT_NUM), 0, None, None, None),
    (P + "empty_tensor_k_zero_keyvalue", 3, 64, 0, 2, -1, "float16", (0, EXPERT_NUM), 1, None, None, None),
]


@pytest.mark.parametrize("name,n,h,k,tokens_type,quant,x_dtype,rng,row_idx,scale,offset,key", EXTENDED_SUCCESS,
                         ids=[c[0] for c in EXTENDED_SUCCESS])
def test_ut_extended_success(name, n, h, k, tokens_type, quant, x_dtype, rng, row_idx, scale, offset, key):
    r = _extended(n, h, k, tokens_type, quant, x_dtype, rng, row_idx, scale, offset)
    if key is not None:
        assert r.tiling_key == key
    if "empty_tensor" in name:
        # the empty-tensor template: one core, only the framework's 16 MiB of workspace
        assert (r.tiling_key, r.block_dim, r.workspace_size) == (3000000, 1, 16 * 1024 * 1024)


EXTENDED_FAILURES = [
    (P + "static_missing_scale", 83, 0, "float32", None, ((1,), "float32"), "scale"),
    (P + "int4_odd_cols", 83, 13, "float32", None, None, "cols"),
    (P + "mxfp4_bad_xdtype", 83, 9, "float32", None, None, "dtype of x"),
    (P + "int4_bad_xdtype", 84, 13, "float16", None, None, "dtype of x"),
    (P + "unquant_fp8_bad_scale_dtype", 83, -1, "float8_e5m2", ((1, 2, 2), "float32"), None, "scale"),
]


@pytest.mark.parametrize("name,h,quant,x_dtype,scale,offset,arg", EXTENDED_FAILURES,
                         ids=[c[0] for c in EXTENDED_FAILURES])
def test_ut_extended_failures(name, h, quant, x_dtype, scale, offset, arg):
    with pytest.raises(TilingError, match=arg) as info:
        _extended(1, h, 27, 1, quant, x_dtype, (180, 192), 0, scale, offset)
    assert info.value.status == 561002


# --- hand-worked cases (paths the UTs do not check; figures from master's formulas, worked by hand) --------------
# The default 950 profile: 64 vector cores, a tiling UB of 253696 bytes -> 188160 after the 64 KiB SIMT cache
# (availUbSize); a sort loop holds min(188160 / 32 rounded down to 32 = 5856, 32 * 255) = 5856 keys.
def _default(n, h, k, *, experts=64, rng=(0, 64), quant=-1, x_dtype="bfloat16", scale=None):
    return moe_init_routing_v3(((n, h), x_dtype), ((n, k), "int32"), scale, expert_num=experts,
                               expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=quant,
                               active_expert_range=list(rng), soc="ascend950")


def test_sort_template_where_no_counting_sort_exists():
    """1024 x 64 fp16, k 8, 16 of 64 experts: 8192 keys > 5856, so no full load (and master has no counting-sort
    template): multi-core sort, unquantised, GATHER -> 11000000. Workspace (lines 598-637): 8192 * 24 (sort)
    + 64 * 64 (core sync) + 8192 * 4 (scatter) + 2 * Align(16, 4 B) * 4 (counts, total) + 16 MiB = 17010816."""
    r = _default(1024, 64, 8, rng=(0, 16), x_dtype="float16")
    assert r.tiling_key == 11000000
    assert r.workspace_size == 8192 * 24 + 64 * 64 + 8192 * 4 + 2 * 16 * 4 + 16 * 1024 * 1024 == 17010816


@pytest.mark.parametrize("quant,key", [(2, 10030000), (3, 10030000), (16, 10170000), (4, 10050000), (5, 10050000),
                                       (14, 10150000), (11, 10120000)],
                         ids=["mxfp8-e5m2", "mxfp8-e4m3fn", "mxfp8-rs-amax", "fp8-group-e5m2", "fp8-group-e4m3fn",
                              "fp8-group-amax", "fp8-perblock"])
def test_quant_temp_workspace_of_the_mx_and_fp8_gathers(quant, key):
    """16 x 256 bf16, k 4: 64 keys on one sort core. Every quant mode from 1 on except HIF8 cast / per-tensor adds
    one float row per core (lines 628-633): 64 * 256 * 4 = 65536 bytes on top of 64 * 24 + 64 * 64 + 64 * 4
    + 2 * 64 * 4 + 16 MiB = 16783616 -> 16849152."""
    r = _default(16, 256, 4, quant=quant)
    assert r.tiling_key == key
    assert r.workspace_size == 16783616 + 65536 == 16849152


def test_no_quant_temp_for_hif8_cast():
    r = _default(16, 256, 4, quant=6)
    assert r.tiling_key == 10070000 and r.workspace_size == 16783616


def test_mx_rows_per_loop():
    """400000 x 256 bf16, k 4, MXFP8 E5M2: 1.6M keys, 25000 a core. CalcMaxRowIdxPerLoopMxQuant (lines 1991-2004)
    for one 256-column piece: half the UB 94080 - (x 512 + a byte a column 256 + scales 2 * 32 + 32 + codes
    Align(64, 1) * 4 = 256) = 92960 bytes -> 23240 row ids a loop; 2 loops a core (the last 1760)."""
    f = _default(400000, 256, 4, quant=2).fields
    assert f["gather_out_per_loop_cols"] == 256 and f["gather_out_cols_loops"] == 1
    assert [f[k] for k in ("gather_out_per_core_indices_loops", "gather_out_per_core_per_loop_indices_elements",
                           "gather_out_per_core_last_loop_indices_elements")] == [2, 23240, 1760]


def test_fp8_rows_per_loop():
    """The same shape, FP8 per-group E5M2: CalcMaxRowIdxPerLoopFP8Quant (lines 2071-2080) for one 256-column piece:
    94080 - (x 512 + codes 256 + max(AlignBytes(2 scales, 4 B) = 32, 256)) = 93056 bytes -> 23264 row ids."""
    f = _default(400000, 256, 4, quant=4).fields
    assert f["gather_out_per_core_per_loop_indices_elements"] == 23264
    assert f["gather_out_per_core_last_loop_indices_elements"] == 25000 - 23264


@pytest.mark.parametrize("n,vbs,vms", [(1000, 4, 0), (5000, 16, 4)], ids=["four-sort-cores", "sixteen-sort-cores"])
def test_vms_middle_need_core_num(n, vbs, vms):
    """x (n, 128) bf16, k 8, 64 experts, count mode. n 1000: 8000 keys > 5856 -> ceil(8000 / 5856) = 2 -> 4^1 = 4
    cores; 8000 / 4 = 2000 -> floor 1984 leaves the last 8000 - 3 * 1984 = 2048 > 2016, so 2016 a core over
    ceil(8000 / 2016) = 4 cores: four lists merge at once, no middle merge (Tiling4VMSMiddleCompute: 0 for <= 4).
    n 5000: 40000 keys -> 7 -> 4^2 = 16 cores; 2500 -> floor 2496 leaves 2560 > 2528, so 2528 over
    ceil(40000 / 2528) = 16 cores: ceil(16 / 4) = 4 middle-merge cores."""
    f = _default(n, 128, 8).fields
    assert (f["vbs_need_core_num"], f["vms_middle_need_core_num"]) == (vbs, vms)
    if n == 1000:
        assert [f["vbs_per_core_elements"], f["vbs_last_core_elements"], f["vbs_last_core_per_loop_elements"]] == \
            [2016, 1952, 1952]


@pytest.mark.parametrize("quant,ex_dtype,ok", [(2, "float16", True), (9, "int8", True), (6, "float32", True),
                                               (-1, "int8", True), (0, "float16", False), (1, "float8_e5m2", False),
                                               (13, "int8", False)],
                         ids=["mxfp8-any", "mxfp4-any", "hif8-any", "unquant-any", "static-int8-only",
                              "dynamic-int8-only", "int4-int4-only"])
def test_expanded_x_dtype_is_checked_for_int8_and_int4_only(quant, ex_dtype, ok):
    """ValidateExpandedXDtype (lines 1268-1302): int8 for quant modes 0 and 1, int4 for 13; the others pass."""
    h = 64
    scale = {0: ((1,), "float32")}.get(quant)
    offset = scale
    x_dtype = "float32" if quant in (-1, 0, 1, 13) else "float16"
    outs = (((32, h), ex_dtype), ((32,), "int32"), ((8,), "int64"), None)
    call = lambda: _tiling(((8, h), x_dtype), ((8, 4), "int32"), scale, offset, outs=outs, quant=quant,  # noqa: E731
                           rng=(0, 8))
    if ok:
        call()
    else:
        with pytest.raises(TilingError, match="expanded_x") as info:
            call()
        assert info.value.status == 561002


def test_drop_pad_src_to_dst_and_compact_gather_fields():
    """UT shape single_row_loop (8192 x 16 fp32, k 1, capacity 1, UB 196608 after the SIMT cache, 40 cores).
    SrcToDst: ceil(8192 / 40) = 205 rows per core on 40 cores, the last 8192 - 39 * 205 = 197; one loop each
    (a loop holds (196608 - 32) / 4 / 2 = 24572 -> 24568 rows). Gather: 256 output rows scan fewer indices
    ((8192 - 256) * 4 bytes saved, no extra rows) -> compact; ceil(256 / 40) = 7 per core on 37 cores, last 4;
    loop limit (196608 - 2 * 64) / 2 / 4 = 24560. Workspace: 8192 * 24 + 40 * 64 + 8192 * 4 + 256 * 4 (counts)
    + 40 * 8 + 256 * 4 (compact map) + 16 MiB = 17011520."""
    r = _drop_pad(8192, 16, 1, 1, (0, EXPERT_NUM), 0)
    f = r.fields
    assert [f[k] for k in f if k.startswith("src_to_dst_drop_pad_")] == [40, 205, 205, 205, 197, 197, 197, 1, 1,
                                                                         16, 16, 1]
    assert [f[k] for k in f if k.startswith("gather_out_")] == [37, 7, 4, 1, 7, 7, 1, 4, 4, 1, 16, 16, 0, 2, 1]
    assert r.workspace_size == 17011520


@pytest.mark.parametrize("soc_name", ["ascend910b", "ascend910_93"])
def test_non_regbase_profiles_are_refused(soc_name):
    with pytest.raises(TilingError, match="arch35"):
        moe_init_routing_v3(((4, 16), "float32"), ((4, 2), "int32"), expert_num=8, expert_tokens_num_flag=True,
                            active_expert_range=[0, 8], soc=soc_name)


ATTR_FAILURES = [
    ("tokens-type-3", dict(expert_tokens_num_type=3), "expert_tokens_num_type"),
    ("expert-num-0", dict(expert_num=0), "expert_num"),
    ("kv-expert-num-5121", dict(expert_num=5121, expert_tokens_num_type=2, active_expert_range=[0, 8]), "expert_num"),
    ("drop-pad-2", dict(drop_pad_mode=2), "drop_pad_mode"),
    ("flag-false", dict(expert_tokens_num_flag=False), "expert_tokens_num_flag"),
    ("quant-10", dict(quant_mode=10), "quant_mode"),
    ("row-idx-2", dict(row_idx_type=2), "row_idx_type"),
    ("range-len-1", dict(active_expert_range=[0]), "active_expert_range"),
    ("range-empty", dict(active_expert_range=[4, 4]), "expert_start"),
    ("range-past-expert-num", dict(active_expert_range=[0, 9]), "expert_num"),
    ("active-num-wrong", dict(active_num=7), "active_num"),
]


@pytest.mark.parametrize("name,attrs,arg", ATTR_FAILURES, ids=[c[0] for c in ATTR_FAILURES])
def test_attribute_checks_name_the_attribute(name, attrs, arg):
    kwargs = dict(expert_num=8, expert_tokens_num_type=1, expert_tokens_num_flag=True, active_expert_range=[0, 8],
                  soc="ascend950")
    kwargs.update(attrs)
    with pytest.raises(TilingError, match=arg) as info:
        moe_init_routing_v3(((4, 16), "float32"), ((4, 2), "int32"), **kwargs)
    assert info.value.status == 561002


def test_ub_plan_of_the_one_core_sort_and_the_token_count():
    """UT case regbase_mxfp8_roundscale_amax_e5m2 (1 x 65 fp16, k 27, experts [180, 192), key 10170000): the one-core
    sort holds Align(27 keys, 4 B) = 32 -> 32 keys x 2 int32 = 256 bytes per buffer; the count kernel on core 0
    reads 1 id (27 ids over 40 cores), counts 12 experts (48 -> 64 bytes as int32, 96 as int64) and one total;
    RowIdxGather (rowIdxPipe) re-splits 27 slots over the count's 27 cores: 1 row id a loop, one block out."""
    r = _extended(1, 65, 27, 1, 16, "float16", (180, 192), 0)
    assert [(b.name, b.bytes, b.pipe) for b in r.ub_plan if b.pipe != "gatherPipe"] == [
        ("sortDataCopyInQueue", 256, "sortPipe"), ("sortDataCopyOutQueue", 256, "sortPipe"),
        ("tempBuffer", 256, "sortPipe"), ("sortedBuffer", 256, "sortPipe"),
        ("sortedExpertIdxInQueue", 32, "histogramPipe"), ("expertCountOutToTempQueue", 64, "histogramPipe"),
        ("expertCountTempInQueue", 64, "histogramPipe"), ("expertIdxCountOutQueue", 96, "histogramPipe"),
        ("expertTotalCountQueue", 32, "histogramPipe"), ("sortedExpertIndicesInQueue", 32, "rowIdxPipe"),
        ("copyOutQueue", 32, "rowIdxPipe")]


def test_ub_plan_of_the_empty_tensor_branch():
    # key-value counts of 256 experts: 512 int64 = 4096 bytes of zeros
    r = _extended(3, 64, 0, 2, -1, "float16", (0, EXPERT_NUM), 1)
    assert [(b.name, b.bytes) for b in r.ub_plan] == [("zeroBuf", 4096)]


def test_ub_plan_of_the_multi_core_sort():
    """UT case regbase_03 (232000 keys on 40 VBS cores of 5824 keys, the last 4864): every sort buffer holds
    max(4 x 1024 SortOut pairs, one loop of 5824 keys) = 5824 keys x 2 int32 = 46592 bytes, the last core's
    max(4096, 4864) = 4864 -> 38912; the count kernel reads 5800 ids a core (23200 bytes)."""
    from tiling.moe_init_routing_v3 import ub_plan
    r = _tiling(((160, 96), "int8"), ((160, 1450), "int32"), outs=_regbase_outs(160, 96, 1450, (180, 192)),
                rng=(180, 192))
    assert [(b.name, b.bytes) for b in r.ub_plan[:5]] == [
        ("sortDataCopyInQueue", 46592), ("sortDataCopyOutQueue", 46592), ("sortedBuffer", 46592),
        ("tempBuffer", 46592), ("sortedExpertIdxInQueue", 23200)]
    assert ub_plan(r.fields, r.tiling_key, block_idx=39)[0].bytes == 38912
    assert r.ub_fits


@pytest.mark.parametrize("ex,ok", [(((27, 42), "uint8"), True), (((27, 83), "uint8"), False),
                                   (((27, 83), "float4_e2m1"), True)], ids=["packed-uint8", "unpacked-uint8", "fp4"])
def test_mxfp4_expanded_x_may_be_packed_bytes(ex, ok):
    # 83 FP4 columns pack into ceil(83 / 2) = 42 bytes
    outs = (ex, ((27,), "int32"), ((12,), "int64"), ((27, 2, 2), "float8_e8m0"))
    call = lambda: _tiling(((1, 83), "float16"), ((1, 27), "int32"), outs=outs, quant=9, rng=(180, 192))  # noqa: E731
    if ok:
        assert call().tiling_key == 10100000       # one-core sort, MXFP4 factor 9 + 1
    else:
        with pytest.raises(TilingError, match="expanded_x"):
            call()


def test_ub_plan_of_the_drop_pad_gather():
    """The drop-pad case above: core 0 takes 7 compact output rows a loop (32 bytes of int32) and 16-column fp32
    rows (64 bytes), both double-buffered; no scale input, so no scale queue. MoeV3RowIdxGatherDropPad
    (rowIdxGatherDropPadPipe) on core 0 holds a loop of 205 (expert id, source row) pairs: 2 * AlignBytes(205,
    4 B) = 1664 bytes, and one 32-byte block out."""
    r = _drop_pad(8192, 16, 1, 1, (0, EXPERT_NUM), 0)
    gather = [(b.name, b.bytes, b.count) for b in r.ub_plan if b.pipe == "gatherPipe"]
    assert gather == [("expandedRowIdxCopyInQueue", 32, 2), ("xCopyInQueue", 64, 2)]
    assert "expertTotalCountQueue" not in [b.name for b in r.ub_plan]
    assert [(b.name, b.bytes) for b in r.ub_plan if b.pipe == "rowIdxGatherDropPadPipe"] == [
        ("copyInQueue", 1664), ("copyOutQueue", 32)]
