"""Sorting instructions: Sort<float, true>, MrgSort with exhausted suspension, Extract, ArithProgression
and the masked Duplicate, against their documented behaviour; bad parameters fault."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import OutOfBoundsError, ParamRangeError
from ascend_sim._jit import global_aicore

from .harness import run, tbuf

PLAN = [tbuf("scores", 4096), tbuf("index", 4096), tbuf("sorted", 8192), tbuf("tmp", 8192)]


@global_aicore
def sort_kernel(c, scores, repeat, out_pairs, out_values, out_index):
    F32 = asc.ub_f32(c)
    s = asc.tbuf_get(c, 0, F32)
    idx = asc.tbuf_get(c, 1, asc.ub_u32(c))
    dst = asc.tbuf_get(c, 2, F32)
    tmp = asc.tbuf_get(c, 3, F32)
    n = scores.size
    for i in range(n):
        s[i] = scores[i]
    asc.arith_progression(c, asc.view_as(c, idx, asc.ub_i32(c)), np.int32(100), np.int32(1), n)
    concat = asc.concat(c, s, tmp, repeat)
    asc.sort(c, dst, concat, idx, tmp, repeat)
    for i in range(2 * n):
        out_pairs[i] = dst[i]
    asc.extract(c, tmp, asc.view_as(c, tmp[n:], asc.ub_u32(c)), dst, repeat)
    for i in range(n):
        out_values[i] = tmp[i]
        out_index[i] = asc.view_as(c, tmp[n:], asc.ub_u32(c))[i]


def _sort(scores, repeat=None):
    scores = np.asarray(scores, np.float32)
    repeat = scores.size // 32 if repeat is None else repeat
    pairs = np.zeros(2 * scores.size, np.float32)
    values = np.zeros(scores.size, np.float32)
    index = np.zeros(scores.size, np.uint32)
    run([sort_kernel], PLAN, scores, repeat, pairs, values, index)
    return pairs, values, index


@pytest.mark.parametrize("n", [32, 64, 256], ids=lambda n: f"{n}elems")
def test_sort_is_descending_and_stable(n):
    rng = np.random.default_rng(n)
    scores = rng.integers(-3, 3, n).astype(np.float32)        # many ties
    pairs, values, index = _sort(scores)
    order = np.argsort(-scores, kind="stable")
    assert np.array_equal(values, scores[order])
    assert np.array_equal(index, order + 100)
    assert np.array_equal(pairs[0::2], values) and np.array_equal(pairs[1::2].view(np.uint32), index)


def test_sort_orders_min_fp32_padding_last():
    scores = np.full(32, -3.4e38, np.float32)
    scores[:5] = [-1.0, -0.0, 0.0, -7.0, 2.0]
    _, values, index = _sort(scores)
    assert list(values[:5]) == [2.0, -0.0, 0.0, -1.0, -7.0] and list(index[:5] - 100) == [4, 1, 2, 0, 3]


@pytest.mark.parametrize("repeat", [-1, 256], ids=["negative", "256"])
def test_sort_repeat_out_of_range_faults(repeat):
    with pytest.raises(ParamRangeError, match="repeatTime"):
        _sort(np.zeros(32), repeat)


def test_sort_beyond_its_buffer_faults():
    with pytest.raises(OutOfBoundsError) as info:
        _sort(np.zeros(32), 40)       # 1280 pairs do not fit the 4096-byte score buffer
    assert info.value.call.startswith("Concat")     # the first instruction that reads past the scores


@global_aicore
def merge_kernel(c, lists, counts, valid_bit, suspension, out, taken):
    F32 = asc.ub_f32(c)
    src = asc.tbuf_get(c, 0, F32)
    dst = asc.tbuf_get(c, 2, F32)
    for i in range(lists.size):
        src[i] = lists[i]
    # four lists of up to 64 pairs, 128 floats apart
    got = asc.mrg_sort(c, dst, src[0:128], src[128:256], src[256:384], src[384:512],
                       (counts[0], counts[1], counts[2], counts[3]), valid_bit, 1, suspension)
    for k in range(4):
        taken[k] = got[k]
    for i in range(out.size):
        out[i] = dst[i]


def _pairs(scores, first_index):
    p = np.zeros(2 * len(scores), np.float32)
    p[0::2] = scores
    p[1::2] = np.arange(first_index, first_index + len(scores), dtype=np.uint32).view(np.float32)
    return p


def _merge(score_lists, suspension, valid_bit=0b1111):
    buf = np.zeros(512, np.float32)
    counts = np.zeros(4, np.int64)
    for k, scores in enumerate(score_lists):
        buf[128 * k: 128 * k + 2 * len(scores)] = _pairs(scores, 1000 * k)
        counts[k] = len(scores)
    out = np.zeros(512, np.float32)
    taken = np.zeros(4, np.int64)
    run([merge_kernel], PLAN, buf, counts, valid_bit, suspension, out, taken)
    n = int(taken.sum())
    return out[0: 2 * n: 2], out[1: 2 * n: 2].view(np.uint32), taken


def test_mrg_sort_merges_four_lists_earlier_list_first_on_ties():
    lists = [[5, 3, 3, 1], [4, 3, 2], [3, 0], [6, 3, -1]]
    values, index, taken = _merge(lists, False)
    assert list(taken) == [4, 3, 2, 3]
    assert list(values) == [6, 5, 4, 3, 3, 3, 3, 3, 2, 1, 0, -1]
    # the five 3s: list 0 (two), then list 1, list 2, list 3
    assert list(index[3:8]) == [1, 2, 1001, 2000, 3001]


def test_mrg_sort_with_exhausted_suspension_stops_when_one_list_runs_out():
    values, _, taken = _merge([[5, 1], [4, 3, 2], [9, 8, 7]], True, valid_bit=0b0111)
    # 9 8 7 exhaust list 2 first; the merge stops there
    assert list(values) == [9, 8, 7] and list(taken) == [0, 0, 3, 0]


def test_mrg_sort_valid_bit_must_name_two_to_four_lists():
    with pytest.raises(ParamRangeError, match="mask"):
        _merge([[1], [2]], False, valid_bit=0b0101)


@global_aicore
def duplicate_kernel(c, mask0, out):
    F32 = asc.ub_f32(c)
    dst = asc.tbuf_get(c, 0, F32)
    asc.duplicate(c, dst, np.float32(1.0), 64)
    asc.duplicate_mask(c, dst, np.float32(-3.0), np.uint64(mask0), 0, 1, 1, 8)
    for i in range(64):
        out[i] = dst[i]


def test_masked_duplicate_writes_only_masked_lanes():
    out = np.zeros(64, np.float32)
    mask0 = (0xFFFFFFFFFFFFFFFF << 27) & 0xFFFFFFFF      # lanes 27..31, as the sort pads a 27-element group
    run([duplicate_kernel], PLAN, mask0, out)
    want = np.ones(64, np.float32)
    want[27:32] = -3.0
    assert np.array_equal(out, want)
