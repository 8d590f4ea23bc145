"""MoeTokenPermute tiling (A2 / A3): the real op's host UT figures and failures, the mode boundaries. On Ascend 950
the op has no kernel; its tiling there is MoeInitRoutingV3's (tests/ops/test_permute_950.py)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import TensorDesc as T
from tiling import TilingError, get_soc
from tiling import moe_token_permute as tiling_permute
from tiling.moe_sort import sort_loop_max_element
from tiling.moe_token_permute import sort_ub_plan

BF16 = ml_dtypes.bfloat16
# the host UTs fake an Ascend910B platform with 64 cores and 256 KiB of UB unless a case says otherwise
UT_CORES = 64

UT_CASES = [
    # (UT name, ub_size, tokens / indices / permute_tokens / sorted_indices, num_out_tokens, key, workspace, data)
    ("float", 262144, [((2, 5), np.float32), ((2, 3), np.int32), ((6, 5), np.float32), ((6,), np.int32)], 6, 1,
     16777424, "1 2 5 8 3 1 6 1 6 6 6 1 6 6 8160 0 0 1024 2 2 0 1 0 20 2 2976 5952 17856 1 1 1 1 1 0 5952 2 2976 1 1 6 "
               "95232 71424"),
    ("float16", 262144, [((2, 5), np.float16), ((2, 3), np.int32), ((6, 5), np.float16), ((6,), np.int32)], 6, 1,
     16777424, "1 2 5 16 3 1 6 1 6 6 6 1 6 6 8160 0 0 1024 2 2 0 1 0 10 2 2976 5952 17856 1 1 1 1 1 0 5952 2 2976 1 1 "
               "6 95232 71424"),
    ("float16_multi_core", 262144, [((16384, 5), np.float16), ((16384, 3), np.int32), ((49152, 5), np.float16),
                                    ((49152,), np.int32)], 49152, 2,
     17960960, "64 16384 5 16 3 16 3072 1 3072 3072 3072 1 3072 3072 8096 0 4 1024 64 64 0 256 256 10 2 2976 5952 "
               "17856 1 1 1 1 256 1 256 1 256 1 256 49152 95232 71424"),
    ("float16_long", 262144, [((16384, 32768), np.float16), ((16384, 3), np.int32), ((49152, 32768), np.float16),
                              ((49152,), np.int32)], 49152, 2,
     17960960, "64 16384 32768 32768 3 16 3072 1 3072 3072 3072 1 3072 3072 8096 0 4 1024 64 64 0 256 256 65536 "
               "10901 1 10901 32703 1 1 1 1 256 1 256 256 1 256 1 49152 65536 130816"),
    ("indices_1d", 262144, [((2, 5), np.float32), ((2,), np.int32), ((2, 5), np.float32), ((2,), np.int32)], 2, 1,
     16777328, "1 2 5 8 1 1 2 1 2 2 2 1 2 2 8160 0 0 1024 2 2 0 1 0 20 2 3637 7274 7274 1 1 1 1 1 0 7274 2 3637 1 1 2 "
               "116384 29120"),
    ("partial_num_out_tokens", 262144, [((2, 5), np.float32), ((2, 3), np.int32), ((3, 5), np.float32),
                                        ((6,), np.int32)], 3, 5,
     16777424, "1 2 5 8 3 1 6 1 6 6 6 1 6 6 8160 0 0 1024 2 2 0 1 0 20 2 2976 5952 17856 1 1 1 1 1 0 5952 2 2976 1 1 3 "
               "95232 71424"),
    ("split_d_small_ub", 65536, [((2, 32768), np.float16), ((2, 3), np.int32), ((6, 32768), np.float16),
                                 ((6,), np.int32)], 6, 3,
     16777424, "1 2 32768 32768 3 1 6 1 6 6 6 1 6 6 2016 0 0 1024 2 2 0 1 0 65536 1 1 170 510 1536 15616 3 1 1 0 170 "
               "170 1 1 1 6 31232 2048"),
]


def _descs(shapes):
    return [T(shape, dtype) for shape, dtype in shapes]


@pytest.mark.parametrize("name,ub,shapes,num_out,key,workspace,data", UT_CASES, ids=[c[0] for c in UT_CASES])
def test_host_ut_figures(name, ub, shapes, num_out, key, workspace, data):
    tokens, indices, permute_out, sorted_out = _descs(shapes)
    result = tiling_permute(tokens, indices, num_out, False, soc=get_soc("910b", aiv_num=UT_CORES, ub_size=ub),
                            permute_tokens_out=permute_out, sorted_indices_out=sorted_out)
    assert result.tiling_key == key
    assert list(result.fields.values()) == [int(v) for v in data.split()]
    assert result.workspace_size == workspace
    assert result.schedule_mode == 1
    assert result.ub_fits, str(result)


def test_small_case_launches_more_cores_than_the_sort_field_says():
    """coreNum is 1 (six indices sort on one core) but the index copy spreads the two tokens over two cores."""
    result = tiling_permute(T((2, 5), np.float32), T((2, 3), np.int32), 6, soc=get_soc("910b", aiv_num=UT_CORES,
                                                                                      ub_size=262144))
    assert result.fields["core_num"] == 1 and result.block_dim == 2


UT_FAILURES = [
    # (UT name, shapes, num_out_tokens, padded_mode)
    ("float16_error", [((16384, 32768), np.float16), ((16384, 5), np.int32), ((49152, 32768), np.float16),
                       ((49152,), np.int32)], 49152, False),
    ("padded_mode_error", [((2, 5), np.float32), ((2, 3), np.int32), ((6, 5), np.float32), ((6,), np.int32)], 6,
     True),
    ("token_indices_dim_mismatch", [((2, 5), np.float32), ((3, 3), np.int32), ((6, 5), np.float32),
                                    ((6,), np.int32)], 6, False),
    ("indices_dim_invalid", [((2, 5), np.float32), ((2, 3, 1), np.int32), ((6, 5), np.float32), ((6,), np.int32)],
     6, False),
    ("topk_exceed_max", [((2, 5), np.float32), ((2, 513), np.int32), ((1026, 5), np.float32), ((1026,), np.int32)],
     1026, False),
    ("output_token_dim_error", [((2, 5), np.float32), ((2, 3), np.int32), ((5,), np.float32), ((6,), np.int32)], 6,
     False),
    ("output_indices_dim_error", [((2, 5), np.float32), ((2, 3), np.int32), ((6, 5), np.float32),
                                  ((6, 1), np.int32)], 6, False),
    ("output_cols_mismatch", [((2, 5), np.float32), ((2, 3), np.int32), ((6, 10), np.float32), ((6,), np.int32)], 6,
     False),
    ("output_num_out_tokens_mismatch", [((2, 5), np.float32), ((2, 3), np.int32), ((5, 5), np.float32),
                                        ((6,), np.int32)], 6, False),
]


@pytest.mark.parametrize("name,shapes,num_out,padded", UT_FAILURES, ids=[c[0] for c in UT_FAILURES])
def test_host_ut_failures(name, shapes, num_out, padded):
    tokens, indices, permute_out, sorted_out = _descs(shapes)
    with pytest.raises(TilingError) as info:
        tiling_permute(tokens, indices, num_out, padded, soc=get_soc("910b", aiv_num=UT_CORES, ub_size=262144),
                       permute_tokens_out=permute_out, sorted_indices_out=sorted_out)
    assert info.value.status == 561002


PROFILES = ["ascend910b", "ascend910_93"]


# sortLoopMaxElement: (196352 - 48 * 32) / 32 = 6088 -> 6080
SORT_LOOP_MAX = {"ascend910b": 6080, "ascend910_93": 6080}


@pytest.mark.parametrize("soc_name", PROFILES)
def test_one_core_sort_up_to_the_loop_capacity_then_multi_core(soc_name):
    soc = get_soc(soc_name)
    limit = SORT_LOOP_MAX[soc_name]
    assert sort_loop_max_element(soc.ub_size_for_tiling // 32 * 32, soc.aiv_num) == limit
    for total, key in ((limit - 1, 1), (limit, 1), (limit + 1, 2)):
        result = tiling_permute(T((total, 16), BF16), T((total,), np.int32), soc=soc)
        assert result.tiling_key == key, (total, str(result))
        assert result.ub_fits


@pytest.mark.parametrize("soc_name", PROFILES)
def test_split_d_once_two_rows_no_longer_fit(soc_name):
    soc = get_soc(soc_name)
    ub_left = soc.ub_size_for_tiling // 32 * 32 - 512 * 4
    widest = ub_left // 2 // 32 * 32 // 2          # bf16 elements whose 32-byte aligned row fits twice
    assert tiling_permute(T((4, widest), BF16), T((4, 2), np.int32), soc=soc).tiling_key == 1
    split = tiling_permute(T((4, widest + 1), BF16), T((4, 2), np.int32), soc=soc)
    assert split.tiling_key == 3
    f = split.fields
    assert f["index_copy_one_token_once_move"] * 2 % 512 == 0
    assert (f["index_copy_one_token_move_times"] - 1) * f["index_copy_one_token_once_move"] + \
        f["index_copy_one_token_last_move"] == widest + 1
    assert split.ub_fits


@pytest.mark.parametrize("num_out,expect", [(0, 24), (24, 24), (30, 24), (7, 7), (-1, 23), (-24, 0), (-100, 0),
                                            (1, 1)], ids=lambda v: str(v))
def test_num_out_tokens_counts_from_the_end_and_clamps(num_out, expect):
    result = tiling_permute(T((8, 32), BF16), T((8, 3), np.int32), num_out, soc="910b")
    assert result.fields["index_copy_num_out_tokens"] == expect
    assert result.tiling_key == (1 if expect == 24 else 5)


def test_sort_length_limit():
    """16777215 indices or more do not sort (fp32 keys would lose exactness); checked on shapes only."""
    ok = tiling_permute(T((16777214, 8), BF16), T((16777214,), np.int32), soc="910b")
    assert ok.tiling_key == 2 and ok.fields["vbs_need_core_num"] <= 48
    with pytest.raises(TilingError, match="16777215") as info:
        tiling_permute(T((16777215, 8), BF16), T((16777215,), np.int32), soc="910b")
    assert info.value.status == 561002
    with pytest.raises(TilingError):
        tiling_permute(T((32768, 8), BF16), T((32768, 512), np.int32), soc="910b")


@pytest.mark.parametrize("top_k", [1, 8, 512])
@pytest.mark.parametrize("soc_name", PROFILES)
def test_workspace_formula(top_k, soc_name):
    soc = get_soc(soc_name)
    n = 1000
    result = tiling_permute(T((n, 64), BF16), T((n, top_k), np.int64), soc=soc)
    total = n * top_k
    assert result.workspace_size == 4 * total * 2 * 3 + result.fields["core_num"] * 32 * 2 + 16 * 1024 * 1024


@pytest.mark.parametrize("soc_name", ["ascend910b", "ascend910_93"])
def test_quant_mode_is_ignored_by_a2_a3_tiling(soc_name):
    a = tiling_permute(T((64, 7168), BF16), T((64, 8), np.int32), soc=soc_name)
    b = tiling_permute(T((64, 7168), BF16), T((64, 8), np.int32), quant_mode=3, soc=soc_name)
    assert a == b


def test_sort_pipes_share_the_ub_with_the_copy_pipe():
    result = tiling_permute(T((4096, 7168), BF16), T((4096, 8), np.int32), soc="910b")
    pipes = result.ub_pipe_bytes()
    assert set(pipes) == {"sortPipe", "sortPipe2", "MoeindexCopyPipe"}
    assert result.ub_plan_bytes == max(pipes.values()) <= result.soc.ub_size


# (slots, VBS cores, keys per buffer on the other cores, on the last VBS core): 910b, loop max 6080
SORT_CORE_PLANS = {
    "one-core": (6080, 1, 6080, 6080),                  # AlignUp(6080, 32): one plan on every core
    "multi-core-small-loops": (8000, 4, 4096, 4096),    # loops of 2000 keys: the 4 SortOut windows decide
    "last-core-larger": (20000, 4, 4992, 5024),
    "last-core-smaller": (20004, 4, 5024, 4960),
}


@pytest.mark.parametrize("slots,cores,others,last", SORT_CORE_PLANS.values(), ids=SORT_CORE_PLANS.keys())
def test_sort_buffers_are_sized_per_core(slots, cores, others, last):
    """MoeSortMultiCore::Init sizes its four buffers (8 bytes a key) from the core's own loop of keys; the
    tiling's ub_plan is core 0's. One-core mode sizes from the whole count on every core."""
    result = tiling_permute(T((slots, 8), BF16), T((slots,), np.int32), soc="910b")
    f = result.fields
    assert f["vbs_need_core_num"] == cores
    multi = result.tiling_key == 2
    for pipe in ("sortPipe", "sortPipe2"):
        rows = tuple(r for r in result.ub_plan if r.pipe == pipe)
        assert rows == sort_ub_plan(pipe, f, multi, 4, block_idx=0)
        for block_idx in (0, cores - 1, 47):
            keys = last if block_idx == cores - 1 else others
            got = sort_ub_plan(pipe, f, multi, 4, block_idx=block_idx)
            if multi:
                assert [r.bytes for r in got] == [keys * 8] * 4
            else:
                assert [r.bytes for r in got] == [keys * 8, keys * 4, keys * 8, keys * 8]
