"""l0 MoeInitRoutingV3 on the 950 profile: the unquantised sort chain (keys 10000000 / 11000000) and the empty-tensor
branch, against goldens written from the op's semantics (stable sort of the active flat ids; dropped slots get row
index -1, are not counted and not gathered)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ops.l0.moe_init_routing_v3 import KernelNotSimulatedError, get_workspace_size
from tests.bits import assert_bits_equal
from tiling import ParamNullptrError, TensorDesc, get_soc, moe_init_routing_v3

EXPERTS = 10240
SOC = get_soc("ascend950")
# 176 KiB of UB and 8 cores: one sort loop holds 3552 keys (so 30000 keys take 2 loops on each of 8 VBS cores, and
# the 8 lists one VMS level) and a gather row of more than 57216 bytes is cut into column pieces
SMALL_UB = get_soc("ascend950", ub_size=180224, aiv_num=8)
# ExpertTokensCount keeps 16 bytes per active expert in UB: on this UB the 10240 of the full range leave its loop
# no room (the tiling refuses), so the small-UB cases route to the experts [0, 2048)
SMALL_UB_EXPERTS = 2048
X_SENTINEL = 0x5A
SCALE_SENTINEL = np.float32(-7.5)


def _ids(rng, n, k, start, end, dropped):
    """Expert ids over the whole id range, with a share of ids below `start` (-1, or just below it) and at or
    above `end` (end, end + a few, 10240+) mixed in."""
    ids = rng.integers(start, end, (n, k)).astype(np.int32)
    if dropped:
        low = rng.random((n, k)) < 0.12
        ids[low] = rng.choice(np.array([-1, start - 1] if start > 0 else [-1, -3], dtype=np.int32), low.sum())
        high = rng.random((n, k)) < 0.1
        ids[high] = rng.choice(np.array([end, end + 3, EXPERTS, EXPERTS + 5, 1 << 20], dtype=np.int32), high.sum())
        ids.reshape(-1)[:2] = (start, end - 1)
    return ids


def _golden(x, ids, scale, start, end):
    """From the semantics: the active slots (ids in [start, end)) in stable order of their ids."""
    n, k = ids.shape
    flat = ids.reshape(-1).astype(np.int64)
    active = np.flatnonzero((flat >= start) & (flat < end))
    order = active[np.argsort(flat[active], kind="stable")]
    row_idx = np.full(n * k, -1, dtype=np.int32)
    row_idx[order] = np.arange(order.size, dtype=np.int32)
    counts = np.zeros(end - start, dtype=np.int64)
    np.add.at(counts, flat[active] - start, 1)
    rows = order // k
    return order, row_idx, counts, x[rows], None if scale is None else scale[rows]


def _run(n, k, cols, dtype, *, soc=SOC, start=0, end=EXPERTS, dropped=True, with_scale=False, seed=0, check=None):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (n, cols)).astype(np.int8) if dtype == np.int8 else \
        (rng.standard_normal((n, cols)) * 4).astype(dtype)
    ids = _ids(rng, n, k, start, end, dropped)
    scale = rng.standard_normal(n).astype(np.float32) if with_scale else None
    expanded_x = np.full((n * k, cols * np.dtype(dtype).itemsize), X_SENTINEL, dtype=np.uint8).view(dtype)
    row_idx = np.full(n * k, 12345, dtype=np.int32)
    counts = np.full(end - start, -9, dtype=np.int64)
    expanded_scale = np.full(n * k, SCALE_SENTINEL, dtype=np.float32)
    size, executor = get_workspace_size(
        x, ids, scale, None, active_num=n * k, expert_capacity=0, expert_num=EXPERTS, drop_pad_mode=0,
        expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=-1, active_expert_range=[start, end],
        row_idx_type=0, expanded_x_out=expanded_x, expanded_row_idx_out=row_idx,
        expert_tokens_count_or_cumsum_out=counts, expanded_scale_out=expanded_scale, soc=soc)
    workspace = np.zeros(size, dtype=np.uint8)
    executor.run(workspace, check=check)
    return executor, workspace, (x, ids, scale), (expanded_x, row_idx, counts, expanded_scale)


def _check(inputs, outputs, start=0, end=EXPERTS):
    x, ids, scale = inputs
    expanded_x, row_idx, counts, expanded_scale = outputs
    order, g_row_idx, g_counts, g_rows, g_scale = _golden(x, ids, scale, start, end)
    m = order.size
    assert_bits_equal(row_idx, g_row_idx, "expanded_row_idx")
    assert_bits_equal(counts, g_counts, "expert token counts")
    assert_bits_equal(expanded_x[:m], g_rows, "expanded_x")
    # the rows of the dropped slots are never written
    assert np.all(expanded_x[m:].view(np.uint8) == X_SENTINEL)
    if scale is None:
        assert np.all(expanded_scale == SCALE_SENTINEL)
    else:
        assert_bits_equal(expanded_scale[:m], g_scale, "expanded_scale")
        assert np.all(expanded_scale[m:] == SCALE_SENTINEL)
    return order


CASES = [
    # id, (n, k, cols, dtype), options, expected tiling key
    ("one-core-bf16-tails", (5, 3, 16, ml_dtypes.bfloat16), {}, 10000000),
    ("one-core-fp16-odd-cols-scale", (37, 3, 33, np.float16), dict(with_scale=True), 10000000),
    ("one-core-int8-range-100-9000", (9, 7, 65, np.int8), dict(start=100, end=9000), 10000000),
    ("one-core-fp32-no-drops", (11, 2, 24, np.float32), dict(dropped=False), 10000000),
    ("multi-core-4-lists-int8", (1500, 4, 8, np.int8), {}, 11000000),
    ("multi-core-2-loops-vms-fp32-small-ub", (7500, 4, 8, np.float32),
     dict(soc=SMALL_UB, with_scale=True, start=0, end=SMALL_UB_EXPERTS), 11000000),
    ("one-core-col-pieces-fp32-small-ub", (3, 2, 15000, np.float32),
     dict(soc=SMALL_UB, with_scale=True, start=0, end=SMALL_UB_EXPERTS), 10000000),
]


@pytest.mark.parametrize("shape,opts,key", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_sort_chain_matches_the_semantics(shape, opts, key):
    n, k, cols, dtype = shape
    executor, workspace, inputs, outputs = _run(n, k, cols, dtype, **opts)
    assert executor.tiling.tiling_key == key
    _check(inputs, outputs, opts.get("start", 0), opts.get("end", EXPERTS))


@pytest.mark.parametrize("slots,key", [(5856, 10000000), (5857, 11000000)], ids=["one-core-limit", "multi-core-min"])
def test_one_core_sort_limit(slots, key):
    """On the 950 profile one sort loop holds (253952 - 256 - 65536) / 32 = 5880 -> 5856 keys (a multiple of 32):
    the smallest multi-core sort has 5857 slots (the multi-core test cases use 6000)."""
    r = moe_init_routing_v3(TensorDesc((slots, 8), np.float16), TensorDesc((slots, 1), np.int32), active_num=slots,
                            expert_capacity=0, expert_num=EXPERTS, expert_tokens_num_type=1,
                            expert_tokens_num_flag=True, active_expert_range=[0, EXPERTS], soc=SOC)
    assert r.tiling_key == key and r.fields["vbs_one_loop_max_elements"] == 5856


def test_tiling_figures_of_the_small_ub_cases():
    """The small-UB cases reach the branches they are named for: two VBS loops on each of 8 cores (so a VMS level
    over 8 lists), 5 gather loops a core; and a 15000-column fp32 row in two pieces."""
    f = moe_init_routing_v3(TensorDesc((7500, 8), np.float32), TensorDesc((7500, 4), np.int32), active_num=30000,
                            expert_capacity=0, expert_num=EXPERTS, expert_tokens_num_type=1,
                            expert_tokens_num_flag=True, active_expert_range=[0, SMALL_UB_EXPERTS], soc=SMALL_UB).fields
    assert (f["vbs_need_core_num"], f["vbs_per_core_loops"], f["gather_out_per_core_indices_loops"]) == (8, 2, 5)
    f = moe_init_routing_v3(TensorDesc((3, 15000), np.float32), TensorDesc((3, 2), np.int32), active_num=6,
                            expert_capacity=0, expert_num=EXPERTS, expert_tokens_num_type=1,
                            expert_tokens_num_flag=True, active_expert_range=[0, SMALL_UB_EXPERTS], soc=SMALL_UB).fields
    assert (f["gather_out_cols_loops"], f["gather_out_per_loop_cols"]) == (2, 7500)


def test_workspace_holds_the_sorted_row_ids_and_the_total_count():
    """The layout the MX gathers rely on (kernel.py): sorted row ids at Align(n * k, 4 B) = 16 (15 keys), the count
    area at 32, the total count at 32 + Align(10240, 4 B) = 10272 (int32 elements after the 16 MiB system
    workspace)."""
    _, workspace, inputs, outputs = _run(5, 3, 16, np.float16, seed=3)
    order = _check(inputs, outputs)
    user = workspace[16 * 1024 * 1024:].view(np.int32)
    assert np.array_equal(user[16: 16 + order.size], order)
    assert user[10272] == order.size
    counts = outputs[2]
    assert np.array_equal(user[32: 32 + EXPERTS], counts.astype(np.int32))


def test_every_slot_dropped():
    """No id in [0, 10240): total count 0, so neither the row-index gather nor the gather runs on any core."""
    rng = np.random.default_rng(5)
    n, k, cols = 4, 2, 16
    x = rng.standard_normal((n, cols)).astype(np.float16)
    ids = np.array([[-1, 10240], [10300, -5], [-1, -1], [20000, 10241]], dtype=np.int32)
    expanded_x = np.full((n * k, cols * 2), X_SENTINEL, dtype=np.uint8).view(np.float16)
    row_idx = np.zeros(n * k, dtype=np.int32)
    counts = np.full(EXPERTS, 3, dtype=np.int64)
    size, executor = get_workspace_size(
        x, ids, None, None, active_num=n * k, expert_capacity=0, expert_num=EXPERTS, drop_pad_mode=0,
        expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=-1, active_expert_range=[0, EXPERTS],
        row_idx_type=0, expanded_x_out=expanded_x, expanded_row_idx_out=row_idx,
        expert_tokens_count_or_cumsum_out=counts, expanded_scale_out=None)
    executor.run(np.zeros(size, dtype=np.uint8))
    assert np.array_equal(row_idx, np.full(n * k, -1, dtype=np.int32))
    assert not counts.any()
    assert np.all(expanded_x.view(np.uint8) == X_SENTINEL)


@pytest.mark.parametrize("shape", [(6, 2, 8), (1500, 4, 8)], ids=["one-core", "multi-core"])
def test_checked_mode_is_clean(shape):
    """check="race": clean but for the waived total-count race of the real ExpertTokensCount (kernel.py)."""
    n, k, cols = shape
    executor, _, inputs, outputs = _run(n, k, cols, np.float16, with_scale=True, seed=7, check="race")
    assert executor.tiling.tiling_key == (10000000 if n * k <= 5856 else 11000000)
    _check(inputs, outputs)


@pytest.mark.parametrize("n,k,cols,check,quant", [(0, 2, 8, None, -1), (3, 2, 0, "race", -1), (2, 3, 0, None, 1)],
                         ids=["no-tokens", "no-columns-checked", "no-columns-dynamic-quant"])
def test_empty_tensor_branch(n, k, cols, check, quant):
    """Key 3000000 on core 0: the counts are zeroed; with n * k > 0 also expanded_row_idx and the float expanded_scale
    (checked mode: clean but for the real branch's waived Duplicate -> DataCopyPad race)."""
    x = np.zeros((n, cols), dtype=np.float16)
    ids = np.zeros((n, k), dtype=np.int32)
    row_idx = np.full(n * k, 77, dtype=np.int32)
    counts = np.full(EXPERTS, -1, dtype=np.int64)
    expanded_scale = np.full(n * k, 5.0, dtype=np.float32)
    size, executor = get_workspace_size(
        x, ids, None, None, active_num=n * k, expert_capacity=0, expert_num=EXPERTS, drop_pad_mode=0,
        expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=quant, active_expert_range=[0, EXPERTS],
        row_idx_type=0, expanded_x_out=np.zeros((n * k, cols), dtype=np.float16 if quant == -1 else np.int8),
        expanded_row_idx_out=row_idx,
        expert_tokens_count_or_cumsum_out=counts, expanded_scale_out=expanded_scale)
    assert executor.tiling.tiling_key == 3000000
    executor.run(np.zeros(size, dtype=np.uint8), check=check)
    assert not counts.any() and not row_idx.any() and not expanded_scale.any()


def _not_simulated(x, ids, expanded_x, **attrs):
    n, k = ids.shape
    kwargs = dict(active_num=n * k, expert_capacity=0, expert_num=EXPERTS, drop_pad_mode=0, expert_tokens_num_type=1,
                  expert_tokens_num_flag=True, quant_mode=-1, active_expert_range=[0, EXPERTS], row_idx_type=0)
    kwargs.update(attrs)
    tokens = (kwargs["expert_num"], 2) if kwargs["expert_tokens_num_type"] == 2 else \
        (kwargs["active_expert_range"][1] - kwargs["active_expert_range"][0],)
    with pytest.raises(KernelNotSimulatedError, match="not simulated") as info:
        get_workspace_size(x, ids, None, None, expanded_x_out=expanded_x,
                           expanded_row_idx_out=np.zeros(n * k, dtype=np.int32),
                           expert_tokens_count_or_cumsum_out=np.zeros(tokens, dtype=np.int64),
                           expanded_scale_out=None, **kwargs)
    return info.value


def test_unmodelled_keys_and_modes_raise():
    x = np.ones((4, 64), dtype=np.float16)
    ids = np.arange(8, dtype=np.int32).reshape(4, 2)
    e = _not_simulated(x, ids, np.zeros((8, 64), dtype=np.int8), quant_mode=1)      # dynamic int8 quantisation
    assert e.tiling_key == 10020000 and "10020000" in str(e)
    assert _not_simulated(x, ids, np.zeros((8, 64), dtype=np.float16), row_idx_type=1).tiling_key == 10001000
    e = _not_simulated(x, ids, np.zeros((8, 64), dtype=np.float16), expert_tokens_num_type=0)
    assert e.tiling_key == 10000000 and "expert_tokens_num_type 0" in str(e)
    e = _not_simulated(x.astype(ml_dtypes.float8_e4m3fn), ids, np.zeros((8, 64), dtype=ml_dtypes.float8_e4m3fn))
    assert "MX gather" in str(e)


def test_ub_plan_of_the_gather():
    """5 x 3 fp16 rows of 16 columns on 64 cores: 15 rows, one a core, so core 0 takes 1 row a loop: 32 bytes of row
    ids (x2), one 32-byte row in each of 6 x buffers (the tiling's xCopyInQueueBufferNum), a 32-byte scale (x2)."""
    r = moe_init_routing_v3(TensorDesc((5, 16), np.float16), TensorDesc((5, 3), np.int32), active_num=15,
                            expert_capacity=0, expert_num=EXPERTS, expert_tokens_num_type=1,
                            expert_tokens_num_flag=True, active_expert_range=[0, EXPERTS], soc=SOC)
    gather = [(b.name, b.bytes, b.count, b.kind) for b in r.ub_plan if b.pipe == "gatherPipe"]
    assert gather == [("expandedRowIdxCopyInQueue", 32, 2, "TQue"), ("xCopyInQueue", 32, 6, "TQueBind"),
                      ("scaleCopyInQueue", 32, 2, "TQueBind")]


def test_scale_input_needs_an_expanded_scale_output():
    x = np.ones((4, 16), dtype=np.float16)
    ids = np.arange(8, dtype=np.int32).reshape(4, 2)
    with pytest.raises(ParamNullptrError, match="expanded_scale_out"):
        get_workspace_size(x, ids, np.ones(4, dtype=np.float32), None, active_num=8, expert_capacity=0,
                           expert_num=EXPERTS, drop_pad_mode=0, expert_tokens_num_type=1, expert_tokens_num_flag=True,
                           quant_mode=-1, active_expert_range=[0, EXPERTS], row_idx_type=0,
                           expanded_x_out=np.zeros((8, 16), dtype=np.float16),
                           expanded_row_idx_out=np.zeros(8, dtype=np.int32),
                           expert_tokens_count_or_cumsum_out=np.zeros(EXPERTS, dtype=np.int64), expanded_scale_out=None)


def test_row_idx_gather_builds_its_own_tpipe_and_ends_in_sync_all():
    """moe_init_routing_v3_apt.cpp @ 25fb6b92890d: RowIdxGather runs in a TPipe of its own (rowIdxPipe) whose Init
    builds a VECIN queue of AlignBytes(per-loop count, 4) and a VECOUT queue of 32 bytes, and its Process ends in
    SyncAll on every core. 15 active slots: the count core(s) split them again; core 0 takes ceil(15 / need)."""
    from ascend_sim import SYNC_ALL
    from ops.l0.moe_init_routing_v3.kernel import KERNELS
    for key in (10000000, 11000000, 10030000, 11030000, 10100000, 11100000):
        phase = KERNELS[key].phases[2]
        assert phase.pipe == "rowIdxPipe" and phase.buffers == ("sortedExpertIndicesInQueue", "copyOutQueue")
        assert tuple(phase.schedule)[-1] is SYNC_ALL
    executor, _, inputs, outputs = _run(5, 3, 16, ml_dtypes.bfloat16, dropped=False, seed=4)
    _check(inputs, outputs)
    f = executor.tiling.fields
    per_core = -(-15 // f["expert_tokens_count_need_core_num"])
    loops = -(-per_core // f["expert_tokens_count_per_core_per_loop_elements"])
    per_loop = -(-per_core // loops)
    rows = {r[0]: r for r in executor.report.ub_plan}
    assert rows["sortedExpertIndicesInQueue"][3] == -(-per_loop * 4 // 32) * 32
    assert rows["copyOutQueue"][3] == 32
