"""l0op::MoeInitRoutingV2Grad on Ascend 950 (the arch35 split-H / full-load / regbase kernels).

Goldens are ops.permute_grad.golden.golden_950, written from the operator's formula and the VF's summation order
(fp32 from +0.0, slots in groups of four added pairwise, per chunk of kUbFactor slots for the regbase template),
never from the kernel's steps. Shapes are chosen so each case lands on a named template and branch: the tiling key
and the factors that make the branch are asserted before the result.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import UBOverflowError
from ops.l0 import moe_init_routing_v2_grad as l0
from ops.permute_grad.golden import golden_950
from tests.bits import assert_bits_equal
from tiling import TilingError, get_soc

BF16 = ml_dtypes.bfloat16
FP16, FP32 = np.float16, np.float32
CHIP = get_soc("ascend950")
SMALL = get_soc("ascend950", ub_size=16384 + 256, aiv_num=4)     # GetCoreMemSize(UB) = 16 KiB, 4 cores
DTYPES = {"bf16": BF16, "fp16": FP16, "fp32": FP32}


def inputs(n, k, h, dtype, seed, rows=None, bad=True):
    """rows (default n * k) gradient rows; a slot permutation with about one slot in six invalid (-1 or >= rows)."""
    rng = np.random.default_rng(seed)
    rows = n * k if rows is None else rows
    g = (rng.standard_normal((rows, h)) * 4).astype(np.float32).astype(dtype)
    s = rng.integers(0, rows, n * k).astype(np.int32)
    if bad:
        s[::6] = -1
        s[3::11] = rows + 5
    return g, s


def launch(g, s, k, *, drop_pad=0, active=None, soc=CHIP, check=None):
    n = s.size // k
    out = np.full((n, g.shape[-1]), 7, dtype=g.dtype)
    size, ex = l0.get_workspace_size(g, s, top_k=k, drop_pad_mode=drop_pad,
                                     active_num=g.shape[0] if active is None else active, grad_x_out=out, soc=soc)
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return out, ex.tiling


def chunk_of(t):
    return t.fields["k_ub_factor"] if t.tiling_key // 100000 == 4 else None


# id: (n, topK, H, dtype, soc, key, {field: value} that pins the branch)
CASES = {
    # full-load, topK 1, 70 tokens over 35 cores, H = 256 (one unrolled block) + 44 (tail)
    "full-load-k1-bf16": (70, 1, 300, "bf16", CHIP, 300003, dict(n_block_factor=2, num_blocks=35)),
    # full-load, topK 6 (a group of four and two single slots), 3 tokens per UB pass, 8 per core (3 + 3 + 2),
    # the last core 6
    "full-load-k6-fp16": (30, 6, 200, "fp16", SMALL, 300003, dict(n_ub_factor=3, n_block_factor=8)),
    # full-load, H split in pieces of 312 fp32 (13 rows of 3000 do not fit 16 KiB, topK <= 10): tail piece 192
    "full-load-split-h-fp32": (5, 6, 3000, "fp32", SMALL, 300003, dict(n_ub_factor=1, h_ub_factor=312)),
    # split-H: 2 tokens, H 8232 over 64 cores (129 columns each, the last 66), all rows in one pass
    "split-h-bf16": (2, 3, 8232, "bf16", CHIP, 200003, dict(h_block_factor=129, num_blocks=64, k_ub_factor=125)),
    # split-H, fp32: 8200 columns, 129 per core, the last of 64 cores 73 (an unaligned GM column offset)
    "split-h-fp32": (3, 2, 8200, "fp32", CHIP, 200003, dict(h_block_factor=129, num_blocks=64)),
    # split-H with sub-H pieces: 1250 columns per core in pieces of 416 (tail 2), 1 row per pass
    "split-h-sub-h-fp16": (2, 9, 5000, "fp16", SMALL, 200003, dict(h_block_factor=1250, h_ub_factor=416,
                                                                    k_ub_factor=1)),
    # regbase: topK 64 in chunks of 60 + 4 (the fp32 sums continue in binaryAddBuf), 10 tokens on 10 cores
    "regbase-k64-fp32": (10, 64, 512, "fp32", CHIP, 400003, dict(k_ub_factor=60, num_blocks=10)),
    # regbase, small UB: topK 16 in chunks of 2 slots (each added on its own), H 1000 whole
    "regbase-k16-bf16": (3, 16, 1000, "bf16", SMALL, 400003, dict(k_ub_factor=2, h_ub_factor=1008)),
    # regbase, small UB: topK 16 in chunks of 6 + 6 + 4 (a group of four and two singles, then a group)
    "regbase-k16-fp16": (3, 16, 500, "fp16", SMALL, 400003, dict(k_ub_factor=6, h_ub_factor=512)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_golden(case):
    n, k, h, dt, soc, key, pins = CASES[case]
    g, s = inputs(n, k, h, DTYPES[dt], seed=len(case))
    out, t = launch(g, s, k, soc=soc)
    assert t.tiling_key == key
    assert {f: t.fields[f] for f in pins} == pins
    assert_bits_equal(out, golden_950(g, s, k, chunk_of(t)))


@pytest.mark.parametrize("case", ["full-load-k6-fp16", "split-h-sub-h-fp16", "regbase-k16-fp16"])
def test_checked_mode_is_clean(case):
    """Double-buffered passes of every template in checked mode: no race, no queue misuse, but the real kernel's
    tail loads past a buffer's last row into the other inputQueue buffer (kernel.TAIL_LOAD_RACE, waived and
    counted; split-H meets it here, its 832-byte rows end 64 bytes after the last tail load starts)."""
    n, k, h, dt, soc, key, _ = CASES[case]
    g, s = inputs(n, k, h, DTYPES[dt], seed=7)
    out = np.zeros((n, h), DTYPES[dt])
    size, ex = l0.get_workspace_size(g, s, top_k=k, active_num=g.shape[0], grad_x_out=out, soc=soc)
    l0.run(np.empty(size, np.uint8), size, ex, check="race")
    assert_bits_equal(out, golden_950(g, s, k, chunk_of(ex.tiling)))
    waived = ex.report.extra["waived_races"]
    assert (waived > 0) == case.startswith("split-h")


def test_dropless_mode_skips_rows_past_n_times_k():
    """Mode 0 (activeNum 0): rows must number N * topK; an index < 0 or >= N * topK is a zero row."""
    g, s = inputs(6, 5, 72, BF16, seed=3)
    out, t = launch(g, s, 5, active=0)
    assert t.tiling_key == 300001
    assert_bits_equal(out, golden_950(g, s, 5))


def test_drop_pad_mode_reads_expert_capacity_rows():
    """Mode 1: grad_expanded_x is (E, C, H), -1 marks a dropped slot; the other indices address E * C rows."""
    g, s = inputs(8, 4, 40, FP16, seed=4, rows=12, bad=False)
    s[::5] = -1
    out, t = launch(g.reshape(3, 4, 40), s, 4, drop_pad=1, active=0)
    assert t.tiling_key == 300002
    assert_bits_equal(out, golden_950(g, s, 4))


def test_hand_worked_pairwise_sum():
    """Rows 2^25, 1, -2^25, 1 for topK 4: ((2^25 + 1) + (-2^25 + 1)) = 0 in fp32 (sequential would give 1); a
    fifth slot of 3 is added on its own; the all -0.0 token sums to +0.0."""
    big = np.float32(2 ** 25)
    g = np.array([[big], [1], [-big], [1], [3], [-0.0], [-0.0], [-0.0], [-0.0], [-0.0]], np.float32).astype(BF16)
    g = np.repeat(g, 16, axis=1)
    s = np.arange(10, dtype=np.int32)
    out, _ = launch(g, s, 5)
    assert out[0].astype(np.float32).tolist() == [3.0] * 16
    assert out[1].astype(np.float32).tolist() == [0.0] * 16 and not np.signbit(out[1].astype(np.float32)).any()


def test_tiling_failures_are_raised_before_launch():
    g, s = inputs(4, 2, 16, BF16, seed=5)
    with pytest.raises(TilingError):
        l0.get_workspace_size(g, s, top_k=3, active_num=8, grad_x_out=np.zeros((2, 16), BF16), soc=CHIP)


def test_a_ub_too_small_for_one_block_is_refused():
    """320 bytes of UB: the regbase template's H piece is 0 elements, which the real kernel would divide by."""
    g, s = inputs(2, 11, 1000, FP32, seed=6, bad=False)
    with pytest.raises(UBOverflowError):
        launch(g, s, 11, soc=get_soc("ascend950", ub_size=320))
