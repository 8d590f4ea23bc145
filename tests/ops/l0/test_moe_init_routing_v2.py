"""l0op::MoeInitRoutingV2 on Ascend 950 (the arch35 kernels of keys 11001 / 11002 MoeTokenPermute V1 launches).

Goldens come from the operator's definition, not from the kernel's steps: a stable ascending sort of the flat expert
ids (NumPy's stable argsort) gives the slot sorted to each output row; expanded_row_idx is its inverse and
expanded_x[row] = x[slot // k] for the first activeRows rows (activeNum <= 0 counts from the end, 0 keeps every row,
values past n * k are clamped). One hand-worked case pins the definition itself.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError, ParamRangeError, PipeRaceError, UBOverflowError
from ascend_sim.check import RaceWaiver
from ops.l0 import moe_init_routing_v2 as l0
from ops.l0.moe_init_routing_v2.kernel import SCATTER_ROWS_REUSE_RACE
from tests.bits import assert_bits_equal
from tiling import TensorDesc, get_soc
from tiling.moe_init_routing_v2 import moe_init_routing_v2 as tiling_of

BF16 = ml_dtypes.bfloat16
CHIP = get_soc("ascend950")


def active_rows(active: int, total: int) -> int:
    return max(min(active + total if active <= 0 else active, total), 0)


def golden(x: np.ndarray, idx: np.ndarray, active: int):
    flat = idx.reshape(-1)
    k = 1 if idx.ndim == 1 else idx.shape[1]
    order = np.argsort(flat, kind="stable")          # order[row] = the slot sorted to that row
    row_idx = np.empty(flat.size, dtype=np.int32)
    row_idx[order] = np.arange(flat.size, dtype=np.int32)
    rows = active_rows(active, flat.size)
    return x[order[:rows] // k], row_idx


def prepare(x, idx, active, soc=CHIP):
    rows = active_rows(active, idx.size)
    ex = np.zeros((rows, x.shape[1]), dtype=x.dtype)
    row = np.full(idx.size, -7, dtype=np.int32)
    size, executor = l0.get_workspace_size(
        x, idx, active_num=active, expert_capacity=0, expert_num=0, drop_pad_mode=0,
        expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False, expanded_x_out=ex,
        expanded_row_idx_out=row, soc=soc)
    return size, executor, ex, row


def route(x, idx, active=0, soc=CHIP, check=None):
    size, executor, ex, row = prepare(x, idx, active, soc)
    l0.run(np.empty(size, dtype=np.uint8), size, executor, check=check)
    return ex, row, executor


def inputs(n, k, h, dtype, idx_dtype, experts=8, one_d=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h)).astype(dtype)
    idx = rng.integers(0, experts, size=(n,) if one_d else (n, k)).astype(idx_dtype)
    return x, idx


def assert_routed(x, idx, active, ex, row):
    want_x, want_row = golden(x, idx, active)
    assert ex.shape == want_x.shape
    assert np.array_equal(row, want_row)
    assert_bits_equal(ex, want_x)


def test_hand_worked():
    x = np.arange(4 * 16, dtype=np.float16).reshape(4, 16)
    idx = np.array([[2, 0], [1, 2], [0, 0], [1, 3]], dtype=np.int32)
    ex, row, executor = route(x, idx, active=0)
    # flat ids 2 0 1 2 0 0 1 3: id 0 at slots 1 4 5, id 1 at 2 6, id 2 at 0 3, id 3 at 7
    assert row.tolist() == [5, 0, 3, 6, 1, 2, 4, 7]
    assert np.array_equal(ex, x[[0, 2, 2, 1, 3, 0, 1, 3]])
    assert executor.tiling.tiling_key == 11001


# (n, k, h, x dtype, id dtype, activeNum, 1-D ids, expected key, expected scatterMode)
CASES = {
    "one_core_scatter_fp16_i32": (16, 2, 16, np.float16, np.int32, 0, False, 11001, 1),
    "one_core_gather_fp16_i32_active_from_end": (100, 3, 24, np.float16, np.int32, -50, False, 11001, 0),
    "one_core_scatter_fp32_i64_1d_active_10": (50, 1, 8, np.float32, np.int64, 10, True, 11001, 1),
    "one_core_gather_bf16_k7_active_clamped": (40, 7, 16, BF16, np.int32, 1000, False, 11001, 0),
    "one_core_scatter_bf16_no_active_rows": (30, 2, 32, BF16, np.int64, -60, False, 11001, 1),
    "gather_two_col_loops_fp32": (4, 7, 30000, np.float32, np.int32, 0, False, 11001, 0),
    # the smallest n * k the tiling sends to the multi-core sort: 6625 int32 / 6433 int64 ids
    "multi_core_scatter_fp32_i32_smallest": (6625, 1, 8, np.float32, np.int32, -25, False, 11002, 1),
    "multi_core_gather_bf16_i64_smallest": (6433, 1, 24, BF16, np.int64, 0, True, 11002, 0),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_routing(case):
    n, k, h, dtype, idx_dtype, active, one_d, key, scatter = CASES[case]
    x, idx = inputs(n, k, h, dtype, idx_dtype, one_d=one_d)
    ex, row, executor = route(x, idx, active)
    assert (executor.tiling.tiling_key, executor.tiling.fields["gather_out_scatter_mode"]) == (key, scatter)
    assert_routed(x, idx, active, ex, row)


@pytest.mark.parametrize("idx_dtype,one_core_max", [(np.int32, 6624), (np.int64, 6432)], ids=["int32", "int64"])
def test_smallest_multi_core_sort(idx_dtype, one_core_max):
    """An int64 id widens a sort element by one byte in the sort-loop budget, so it leaves one core earlier."""
    def key(total):
        return tiling_of(TensorDesc((total, 8), np.float32), TensorDesc((total,), idx_dtype), soc=CHIP).tiling_key
    assert (key(one_core_max), key(one_core_max + 1)) == (11001, 11002)


def test_ids_sorted_as_fp32_keep_slot_order():
    """Large and repeated ids (exact in fp32) over many equal runs: ties keep ascending slot order."""
    rng = np.random.default_rng(5)
    x, _ = inputs(300, 4, 16, np.float16, np.int32)
    idx = rng.choice(np.array([0, 1, 5, 1 << 20, (1 << 24) - 1], dtype=np.int64), size=(300, 4))
    ex, row, _ = route(x, idx, active=0)
    assert_routed(x, idx, 0, ex, row)


# custom 950 profiles: (profile overrides, n, k, h, dtype, id dtype, what the tiling makes of it)
PROFILES = {
    # one vector core and a 200 KiB UB: the multi-core sort on one core, two loops merged, no SyncAll anywhere
    "1core_200KiB_multi_core_sort_two_loops": (dict(aiv_num=1, ub_size=204800), 2700, 2, 16, np.float16, np.int32),
    # eight cores: eight VBS lists, one VMS level before SortOut
    "8cores_vms_level": (dict(aiv_num=8), 13300, 2, 16, np.float16, np.int32),
    # one core and a 64 KiB UB: the gather copies its rows in two loops
    "1core_64KiB_gather_two_row_loops": (dict(aiv_num=1, ub_size=65536), 100, 7, 5000, np.float16, np.int32),
}


@pytest.mark.parametrize("case", list(PROFILES), ids=list(PROFILES))
def test_custom_profiles(case):
    overrides, n, k, h, dtype, idx_dtype = PROFILES[case]
    soc = get_soc("ascend950", **overrides)
    x, idx = inputs(n, k, h, dtype, idx_dtype, experts=16)
    ex, row, executor = route(x, idx, 0, soc)
    f = executor.tiling.fields
    if case.startswith("1core_200KiB"):
        assert executor.tiling.tiling_key == 11002 and f["vbs_last_core_loops"] == 2
    elif case.startswith("8cores"):
        assert f["vbs_need_core_num"] == 8 and f["vms_middle_need_core_num"] == 2
    else:
        assert f["gather_out_scatter_mode"] == 0 and f["gather_out_per_core_loops"] == 2
    assert_routed(x, idx, 0, ex, row)


def test_sort_buffers_over_a_small_ub():
    """The multi-core sort's buffers hold four 2048-pair merge windows whatever the UB: on a 200 KiB UB the int64
    in-queue makes them 224 KiB, and the launch refuses the plan."""
    soc = get_soc("ascend950", aiv_num=3, ub_size=204800)
    x, idx = inputs(5200, 3, 16, np.float16, np.int64)
    size, executor, _, _ = prepare(x, idx, 0, soc)
    with pytest.raises(UBOverflowError, match="sortDataCopyInQueue"):
        l0.run(np.empty(size, dtype=np.uint8), size, executor)


CHECKED = {
    "one_core": (dict(), 60, 3, 24, False),
    "multi_core": (dict(), 6625, 1, 24, False),
    # coreNum 1: the src-to-dst SyncAll is skipped; the TPipe changes (sortPipe.Destroy, gatherPipe) order the steps;
    # 32-byte rows take the batch-row scatter, whose outputRowsQueue refills race with the copy-outs (waived)
    "1core_multi_core_sort_no_sync_all": (dict(aiv_num=1, ub_size=204800), 2700, 2, 16, True),
    # scatterMode 1 with nine 48-row blocks per core: the src-to-dst step runs without its SyncAll, the scatter ends
    # with one; the outputRowsQueue refills are the real kernel's MTE3 -> MTE2 race (waived, so counted)
    "scatter_2core_ub96k_blocks_reuse_rows_queue": (dict(aiv_num=2, ub_size=98304), 400, 2, 256, True),
}


@pytest.mark.parametrize("case", list(CHECKED), ids=list(CHECKED))
def test_checked_mode_clean(case):
    overrides, n, k, h, waived = CHECKED[case]
    x, idx = inputs(n, k, h, np.float16, np.int32)
    ex, row, executor = route(x, idx, 0, get_soc("ascend950", **overrides), check="race")
    assert_routed(x, idx, 0, ex, row)
    assert executor.report.extra["checked"] == 1
    assert (executor.report.extra["waived_races"] > 0) == waived
    if waived:
        races = [w for w in executor.kernel.waivers if isinstance(w, RaceWaiver)]
        assert races == [SCATTER_ROWS_REUSE_RACE]


@pytest.mark.parametrize("attrs", [dict(drop_pad_mode=1, expert_capacity=2, expert_num=4),
                                   dict(expert_tokens_count_or_cumsum_flag=1, expert_num=8)],
                         ids=["drop_pad", "token_counts"])
def test_paths_not_modelled(attrs):
    x, idx = inputs(8, 2, 16, np.float16, np.int32)
    args = dict(active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0, expert_tokens_count_or_cumsum_flag=0,
                expert_tokens_before_capacity_flag=False)
    args.update(attrs)
    rows = 8 if attrs.get("drop_pad_mode") else 16
    shape = (4, 2, 16) if attrs.get("drop_pad_mode") else (rows, 16)
    counts = np.zeros(8, dtype=np.int32) if "expert_tokens_count_or_cumsum_flag" in attrs else None
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(x, idx, **args, expanded_x_out=np.zeros(shape, np.float16),
                              expanded_row_idx_out=np.zeros(16, np.int32), expert_tokens_count_or_cumsum_out=counts)


def test_strict_mode_reports_arith_progression_perf():
    """ArithProgressionPerf (moe_init_routing_v2_arch35_common.h) lets its repeat-wide Adds read the block-wide
    Adds' results with no PipeBarrier<PIPE_V> between them: clean in "race" mode (consecutive vector instructions
    are in order on the chip), reported in "strict" mode, which follows the documentation."""
    x, idx = inputs(60, 3, 24, np.float16, np.int32)
    with pytest.raises(PipeRaceError, match="PIPE_V Adds .* reads them"):
        route(x, idx, 0, check="strict")


def test_sort_out_round_beyond_255_extract_repeats():
    """With 2048-pair merge windows a SortOut round of four lists can merge up to 4 * 2048 - 3 pairs, and its
    Extract then needs ceil(merged / 32) = 256 repeats, one more than Extract's repeatTime range [0, 255]. Four
    VBS lists whose ids interleave exactly (core c holds 4 * i + c) drain all four windows evenly and reach it:
    the simulator stops there (the real kernel would run an out-of-range Extract)."""
    n = 20000
    x, _ = inputs(n, 1, 8, np.float32, np.int32)
    per = tiling_of(x, TensorDesc((n, 1), np.int32), soc=CHIP).fields["vbs_per_core_elements"]
    pos = np.arange(n)
    core = np.minimum(pos // per, 3)
    idx = (4 * (pos - core * per) + core).astype(np.int32).reshape(n, 1)
    with pytest.raises(ParamRangeError, match="Extract.*repeatTime = 256"):
        route(x, idx, 0)


def test_gather_out_swapped_loop_counts():
    """(sic) MoeV2GatherOutSimt::Init gives the last core perCoreLoops and the other cores lastCoreLoops. When the
    two differ the real kernel misroutes: here core 0 (321 slots in two loops of 320 + 1) runs one loop and leaves
    slot 320 out, and core 1 (320 slots, one loop) runs two and reads its second loop's indices past the end of
    expandedRowIdx, which the simulator refuses."""
    soc = get_soc("ascend950", aiv_num=2, ub_size=65536)
    x, idx = inputs(641, 1, 5416, np.float16, np.int32)
    size, executor, _, _ = prepare(x, idx, 0, soc)
    f = executor.tiling.fields
    assert (f["gather_out_scatter_mode"], f["gather_out_per_core_loops"], f["gather_out_last_core_loops"]) == (0, 2, 1)
    with pytest.raises(OutOfBoundsError, match="expanded_row_idx"):
        l0.run(np.empty(size, dtype=np.uint8), size, executor)
