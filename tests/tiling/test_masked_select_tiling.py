"""Masked-select tiling (tiling/masked_select.py): the host UT figures, hand-worked splits, degenerate inputs,
and the kernel's UB plan."""
from __future__ import annotations

import pytest

from tiling import TilingError
from tiling.masked_select import MS_FIELDS, masked_select_tiling, masked_select_ub_plan


def _data(text: str) -> list[int]:
    return [int(v) for v in text.split()]


@pytest.mark.parametrize("case,kwargs,data", [
    # PWRM UT multi_core: routing map (E, N) = (3, 3), no probs (2-byte default), compile aivNum 40, UB 261888
    ("pwrm_ut_multi_core", dict(ub_bytes=261888, core_num=40, num_tokens=3, num_experts=3, elem_bytes=2),
     "3 3 1 3 3 0 0 0 0 0 3 3"),
    # UWRM UT bf16 (fp16 probs [4096, 8]), 64 cores, raw UB 261888
    ("uwrm_ut_bf16", dict(ub_bytes=261888, core_num=64, num_tokens=4096, num_experts=8, elem_bytes=2,
                          skip_empty_tile=False),
     "8 4096 1 4096 4096 0 0 0 0 0 4096 8"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_host_ut_figures(case, kwargs, data):
    fields = masked_select_tiling(**kwargs)
    assert tuple(fields) == MS_FIELDS
    assert list(fields.values()) == _data(data)


@pytest.mark.parametrize("case,kwargs,data", [
    # UB 6000, 4-byte values: (6000 - 128) / 35 = 167 -> 128-element tiles; 5 rows of 300 on 3 cores:
    # cores 0-1 take 2 rows (600 = 4 x 128 + 88), core 2 one row (300 = 2 x 128 + 44)
    ("uneven_rows", dict(ub_bytes=6000, core_num=3, num_tokens=300, num_experts=5, elem_bytes=4),
     "2 600 5 128 88 1 300 3 128 44 300 3"),
    # rows divide evenly: every core is a former core, tail fields stay 0; 256 | 512 so the last tile is full
    ("even_rows", dict(ub_bytes=6000, core_num=4, num_tokens=512, num_experts=8, elem_bytes=2),
     "4 1024 8 128 128 0 0 0 0 0 512 4"),
    # fewer experts than cores: one row per core; the tile is clamped to the row (tokens)
    ("tile_clamped_to_row", dict(ub_bytes=196352, core_num=48, num_tokens=100, num_experts=6, elem_bytes=2),
     "6 100 1 100 100 0 0 0 0 0 100 6"),
    # UWRM without probs: 0-byte values, 19 bytes per element: (196352 - 128) / 19 = 10327 -> 10240
    ("uwrm_no_probs", dict(ub_bytes=196352, core_num=40, num_tokens=20000, num_experts=1, elem_bytes=0,
                           skip_empty_tile=False),
     "1 20000 2 10240 9760 0 0 0 0 0 20000 1"),
    # a UB below 128 bytes wraps in uint64 and the tile ends up clamped to the tokens
    ("ub_below_128_wraps", dict(ub_bytes=96, core_num=2, num_tokens=50, num_experts=3, elem_bytes=2),
     "1 100 2 50 50 1 50 1 50 50 50 2"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_hand_worked_splits(case, kwargs, data):
    assert list(masked_select_tiling(**kwargs).values()) == _data(data)


def test_pwrm_zero_tile_leaves_fields_zero_and_uwrm_fails():
    small = dict(ub_bytes=2048, core_num=8, num_tokens=300, num_experts=4, elem_bytes=2)
    assert set(masked_select_tiling(**small).values()) == {0}
    with pytest.raises(TilingError, match="tile holds 0 elements"):
        masked_select_tiling(**small, skip_empty_tile=False)
    with pytest.raises(TilingError, match="tile holds 0 elements"):
        masked_select_tiling(ub_bytes=196352, core_num=8, num_tokens=0, num_experts=4, elem_bytes=2,
                             skip_empty_tile=False)


@pytest.mark.parametrize("experts,cores", [(0, 8), (4, 0)], ids=["no_experts", "no_cores"])
def test_no_core_to_run_is_a_tiling_error(experts, cores):
    with pytest.raises(TilingError, match="no core to run"):
        masked_select_tiling(ub_bytes=196352, core_num=cores, num_tokens=10, num_experts=experts, elem_bytes=2)


def test_ub_plan_of_both_classes():
    fields = masked_select_tiling(ub_bytes=6000, core_num=3, num_tokens=300, num_experts=5, elem_bytes=4)
    v3 = masked_select_ub_plan(fields, elem_bytes=4, with_values=True, with_indices=True, pipe="sortPipe")
    assert [(b.name, b.bytes, b.kind) for b in v3] == [
        ("inQueueX", 512, "TQue"), ("outQueueY", 512, "TQue"), ("inQueueMask", 128, "TQue"),
        ("outQueueIndex", 512, "TQue"), ("offsetBuf", 64, "TBuf"), ("sumBuf", 32, "TBuf"),
        ("maskCastBuf", 512, "TBuf"), ("bitMaskBuf", 128, "TBuf"), ("indexBuf", 512, "TBuf")]
    assert {b.pipe for b in v3} == {"sortPipe"}
    no_probs = masked_select_ub_plan(fields, elem_bytes=2, with_values=False, with_indices=True, pipe="p")
    assert [b.name for b in no_probs] == [b.name for b in v3][2:]
    uwrm = masked_select_ub_plan(fields, elem_bytes=2, with_values=True, with_indices=False, pipe="p")
    assert [(b.name, b.bytes) for b in uwrm] == [
        ("inQueueX", 256), ("inQueueMask", 128), ("outQueueY", 256), ("moveQue", 256), ("offsetBuf", 32),
        ("sumBuf", 32), ("maskCastBuf", 512), ("bitMaskBuf", 128)]


def test_ub_plan_sizes_the_counts_buffer_by_the_cores_that_write_it():
    # 48 cores: pass 2 copies 48 int32 counts, beyond the real 64-byte (v3) / 32-byte (UWRM) TBuf
    fields = masked_select_tiling(ub_bytes=196352, core_num=48, num_tokens=64, num_experts=64, elem_bytes=2)
    for with_indices in (True, False):
        plan = masked_select_ub_plan(fields, elem_bytes=2, with_values=True, with_indices=with_indices, pipe="p")
        assert next(b.bytes for b in plan if b.name == "offsetBuf") == 192


def test_ub_plan_rejects_the_uwrm_select_without_values():
    fields = masked_select_tiling(ub_bytes=6000, core_num=3, num_tokens=300, num_experts=5, elem_bytes=2)
    with pytest.raises(ValueError, match="always selects values"):
        masked_select_ub_plan(fields, pipe="p", elem_bytes=2, with_values=False, with_indices=False)


@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8])
@pytest.mark.parametrize("with_indices", [True, False], ids=["v3", "uwrm"])
def test_ub_plan_sizes_the_value_queues_in_the_values_width(elem_bytes, with_indices):
    # the real tilings accept 1- and 8-byte probs (PWRM UTs with_prob_int8 / with_prob_int64); the kernels'
    # value buffers are tileLengthAlign * sizeof(T): 300 tokens -> tile 300 -> 384 elements
    fields = masked_select_tiling(ub_bytes=196352, core_num=3, num_tokens=300, num_experts=5, elem_bytes=elem_bytes)
    plan = masked_select_ub_plan(fields, pipe="p", elem_bytes=elem_bytes, with_values=True, with_indices=with_indices)
    sizes = {b.name: b.bytes for b in plan}
    assert sizes["inQueueX"] == sizes["outQueueY"] == 384 * elem_bytes and sizes["maskCastBuf"] == 384 * 4
