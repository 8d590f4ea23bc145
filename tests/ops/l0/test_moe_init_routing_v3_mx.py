"""MoeInitRoutingV3's MX quantising gathers (keys 10030000 / 11030000 MXFP8, 10100000 / 11100000 MXFP4,
rowIdxType 0) run alone: the workspace holds a numpy sort of the expert ids, the outputs are compared bit for bit
with the independent golden ops/common/mx_golden.py.

Shapes cover every branch once: a tail of at most half a 32-token block and one of more than half, an odd block
count (padded scale slot), several column pieces (a small-UB 950 profile), several row loops and cores, the
MXFP8 gather copy over all n * k source slots (GATHER row indices, as at master 25fb6b92890d), dropped slots (an
active expert range), NaN / Inf / zero / -0 / subnormal blocks, the round-scale edges (mantissa 0x60 / 0x61,
amax carried into the next binade, fp16 values whose bf16 truncation decides), bf16 and fp16 tokens (the dtypes
the MX modes accept), E5M2 / E4M3FN / E2M1 and both MXFP8 scale rules (round_scale, master's and the default;
floor, the OCP option master does not do).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, PipeRaceError, QueueError, checked, launch
from ops.common.mx_golden import mx_quantize, scale_columns
from ops.l0.moe_init_routing_v3.gather_mxfp4_quant import mxfp4_gather_phase
from ops.l0.moe_init_routing_v3.gather_mxfp8_quant import GatherMxGm, MxTemplate, mxfp8_gather_phase
from ops.l0.moe_init_routing_v3.tiling_data import kernel_tiling_data
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_init_routing_v3 import moe_init_routing_v3

SMALL_UB = 64 * 1024 + 2048           # 2 KiB left after the tiling's 64 KiB SIMT reservation: forces column pieces
KERNELS = {}


def _kernel(fp4: bool) -> Kernel:
    if fp4 not in KERNELS:
        phase = mxfp4_gather_phase() if fp4 else mxfp8_gather_phase()
        KERNELS[fp4] = Kernel("MoeInitRoutingV3", "MoeV3GatherMxfp4Quant" if fp4 else "MoeGatherOutMxfp8Quant",
                              (phase,))
    return KERNELS[fp4]


def _tokens(rng, n, cols, dtype, specials):
    """Random tokens over many binades; with `specials`, rows 0..4 carry a NaN block, an Inf block, an all-zero
    block (with -0s), a block of subnormals and a block at the format's top."""
    mag = np.exp2(rng.uniform(-12, 12, (n, cols))) * rng.choice([-1.0, 1.0], (n, cols))
    x = mag.astype(np.float32)
    if specials:
        big = 60000.0 if dtype == np.float16 else 3.0e38
        tiny = 2.0 ** -20 if dtype == np.float16 else 2.0 ** -130
        b = min(32, cols)
        x[0, 3] = np.nan
        x[1 % n, b - 1] = -np.inf
        x[2 % n, :b] = 0.0
        x[2 % n, 1:b:3] = -0.0
        x[3 % n, :b] = tiny * rng.integers(1, 7, b) * rng.choice([-1.0, 1.0], b)
        x[4 % n, :b] = big * rng.uniform(0.5, 1.0, b)
        x[4 % n, cols - 1] = -0.0
    return x.astype(dtype)


def _sort(idx, start, end):
    """What the sort leaves: slots of experts in [start, end) ordered by (expert, slot); the others dropped."""
    flat = idx.ravel()
    keep = np.nonzero((flat >= start) & (flat < end))[0]
    order = keep[np.argsort(flat[keep], kind="stable")].astype(np.int32)
    row_idx = np.full(flat.size, -1, dtype=np.int32)
    row_idx[order] = np.arange(order.size, dtype=np.int32)
    return order, row_idx


def run_gather(x, idx, quant_mode, *, expert_num, expert_range=None, rule=1, ub_size=None, aiv_num=None):
    n, cols = x.shape
    k = idx.shape[1]
    start, end = expert_range or (0, expert_num)
    soc = get_soc("ascend950", ub_size=ub_size, aiv_num=aiv_num)
    r = moe_init_routing_v3(x, idx, expert_num=expert_num, quant_mode=quant_mode, active_expert_range=(start, end),
                            expert_tokens_num_flag=True, soc=soc)
    td = kernel_tiling_data(r)
    order, row_idx = _sort(idx, start, end)
    a = -(-n * k // 8) * 8
    counts = np.bincount(idx.ravel()[order] - start, minlength=end - start)
    workspace = np.zeros(2 * a + -(-(end - start) // 8) * 8 + 8, dtype=np.int32)
    workspace[:order.size] = idx.ravel()[order]
    workspace[a:a + order.size] = order
    workspace[2 * a:2 * a + end - start] = counts
    workspace[2 * a + -(-(end - start) // 8) * 8] = order.size
    fp4 = quant_mode == 9
    row_bytes = cols // 2 if fp4 else cols
    slots = scale_columns(cols)
    gm = GatherMxGm(asc.GlobalTensor(x.view(np.uint16).ravel().copy(), 0, 0), asc.GlobalTensor(row_idx, 1, 0),
                    asc.GlobalTensor(np.zeros(n * k * row_bytes, np.uint8), 2, 0),
                    asc.GlobalTensor(np.zeros(n * k * slots, np.uint8), 3, 0), asc.GlobalTensor(workspace, 4, 0))
    tmpl = MxTemplate(asc.DT_FLOAT16 if x.dtype == np.float16 else asc.DT_BF16, quant_mode, rule)
    plan = [b for b in r.ub_plan if b.pipe == "gatherPipe"]
    launch(_kernel(fp4), block_dim=r.block_dim, plan=plan, args=(td, gm, tmpl), chip=soc, tiling_key=r.tiling_key,
           gm_names=("x", "expanded_row_idx", "expanded_x", "expanded_scale", "workspace"))
    return (r, order, gm.expanded_x.data.reshape(n * k, row_bytes), gm.expanded_scale.data.reshape(n * k, slots))


def check(x, idx, quant_mode, rule="round_scale", **kw):
    r, order, got_x, got_scale = run_gather(x, idx, quant_mode, rule=int(rule == "round_scale"), **kw)
    clamp = quant_mode in (16, 17)         # MXFP8 round scale with CLAMP_AMAX: E5M2 / E4M3FN codes
    data, scales = mx_quantize(x, {16: 2, 17: 3}.get(quant_mode, quant_mode), rule if quant_mode != 9 else "floor",
                               amax_clamp=clamp)
    src = order // idx.shape[1]
    m = order.size
    assert_bits_equal(got_scale[:m], scales.view(np.uint8).reshape(x.shape[0], -1)[src], "expanded_scale")
    assert_bits_equal(got_x[:m], data.view(np.uint8)[src], "expanded_x")
    assert not got_x[m:].any() and not got_scale[m:].any()     # rows of dropped slots are never written
    return r


DT = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


@pytest.mark.parametrize("rule", ["round_scale", "floor"])
@pytest.mark.parametrize("quant_mode", [2, 3], ids=["e5m2", "e4m3fn"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_tail_and_specials(dt, quant_mode, rule):
    """cols 200: 7 blocks (an odd count: the padded slot), a tail of 8 tokens (right padding of one more block);
    NaN / Inf / zero / subnormal / top-of-range blocks; 12 source slots over the cores, 1 or 2 each."""
    rng = np.random.default_rng(quant_mode * 10 + len(rule))
    x = _tokens(rng, 6, 200, DT[dt], True)
    idx = rng.integers(0, 8, (6, 2)).astype(np.int32)
    r = check(x, idx, quant_mode, rule, expert_num=8)
    assert r.tiling_key == 10030000


def _edge_rows(dtype):
    """One row per round-scale edge (block 0; block 1 a plain ramp): bf16 mantissa 0x60 (1.75: no carry, the
    element lands on the FP8 maximum) and 0x61 (carry), 0x7F (1.9921875: the code moves up a binade), the pinned
    1.9 block; for fp16 tokens 1.751953125 (its bf16 truncation is 1.75: no carry, the element saturates) and
    1.99951171875 (truncates to 1.9921875: carry); a block whose amax exponent field is at most emax (code 1);
    the largest finite value; a lone smallest subnormal."""
    rows = [1.75, 1.7578125, 1.9921875, 1.9, 2.0 ** -120 if dtype != np.float16 else 2.0 ** -14]
    if dtype == np.float16:
        rows += [1.751953125, 1.99951171875, 65504.0, 2.0 ** -24]
    else:
        rows += [3.3895313892515355e38, 2.0 ** -133]
    x = np.zeros((len(rows), 64), dtype=np.float32)
    for r, v in enumerate(rows):
        x[r, :32] = v * np.where(np.arange(32) % 5 == 0, -1.0, 1.0) * np.where(np.arange(32) < 16, 1.0, 0.5)
        x[r, 0] = v
        x[r, 32:] = np.linspace(-3.0, 3.0, 32)
    return x.astype(dtype)


@pytest.mark.parametrize("rule", ["round_scale", "floor"])
@pytest.mark.parametrize("quant_mode", [2, 3], ids=["e5m2", "e4m3fn"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_scale_rule_edges(dt, quant_mode, rule):
    x = _edge_rows(DT[dt])
    idx = (np.arange(x.shape[0] * 2).reshape(-1, 2) % 4).astype(np.int32)
    check(x, idx, quant_mode, rule, expert_num=4)


@pytest.mark.parametrize("rule,code,element", [("round_scale", 120, 0x77), ("floor", 119, 0x7E)],
                         ids=["round_scale-default", "floor-option"])
def test_mxfp8_pinned_bf16_1_9_block(rule, code, element):
    """A bf16 block of 1.9 (0x3FF3: exponent field 127, mantissa 0x73 > 0x60) under E4M3FN: master's round scale
    gives code 127 - 8 + 1 = 120 and 1.8984375 * 2^7 = 243 -> 240 (0x77); the OCP floor gives 119 and
    486 -> saturated 448 (0x7E)."""
    x = np.full((2, 32), 1.9, dtype=ml_dtypes.bfloat16)
    idx = np.array([[0], [1]], dtype=np.int32)
    _, _, got_x, got_scale = run_gather(x, idx, 3, expert_num=2, rule=int(rule == "round_scale"))
    assert got_scale[:, 0].tolist() == [code, code] and (got_x == element).all()
    data, scales = mx_quantize(x, 3, rule)
    assert scales.view(np.uint8)[0, 0] == code and (data.view(np.uint8) == element).all()


@pytest.mark.parametrize("quant_mode", [16, 17], ids=["e5m2", "e4m3fn"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_round_scale_amax_clamp(dt, quant_mode):
    """Keys 10170000 (quant modes 16 / 17): the same class with CLAMP_AMAX, so zero and tiny blocks take the
    scale of amax 0x38D2; a tail of 21 tokens."""
    rng = np.random.default_rng(quant_mode)
    x = _tokens(rng, 6, 117, DT[dt], True)
    x[5, 32:64] = (rng.uniform(-1, 1, 32) * 2.0 ** -15).astype(DT[dt])      # below the clamp, not subnormal
    idx = rng.integers(0, 8, (6, 2)).astype(np.int32)
    r = check(x, idx, quant_mode, expert_num=8)
    assert r.tiling_key == 10170000


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_column_pieces_row_loops_and_dropped_slots(dt):
    """A 2 KiB UB (1792 bytes after the SIMT reservation): CalcMaxRowIdxPerLoopMxQuant leaves no row id for a
    192-column piece (896 - (384 + 192 + 96 + 256) < 0) and 384 bytes (96 ids) for a 96-column one
    (896 - (192 + 96 + 96 + 128)), so cols 700 move in 8 pieces, the last 28 (a tail of 28, more than half a
    block); 2 cores with several row loops each (96 ids a loop); experts outside [1, 6) dropped."""
    rng = np.random.default_rng(7)
    x = _tokens(rng, 200, 700, DT[dt], True)
    idx = rng.integers(0, 6, (200, 2)).astype(np.int32)
    r = check(x, idx, 3, expert_num=6, expert_range=(1, 6), ub_size=SMALL_UB, aiv_num=2)
    f = r.fields
    assert f["gather_out_cols_loops"] == 8 and f["gather_out_last_loop_cols"] == 28
    assert f["gather_out_per_core_per_loop_indices_elements"] == 96


@pytest.mark.parametrize("rule", ["round_scale", "floor"])
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_gather_copy_top_k_8(dt, rule):
    """top-k 8: each source token quantised once per piece, copied to the output row of every kept slot
    (expanded_row_idx -1: skipped); cols 45 (one block + a tail of 13); 72 slots over 3 cores."""
    rng = np.random.default_rng(11)
    x = _tokens(rng, 9, 45, DT[dt], True)
    idx = rng.integers(0, 2, (9, 8)).astype(np.int32)
    check(x, idx, 2, rule, expert_num=2, expert_range=(0, 2), aiv_num=3)
    idx = rng.integers(0, 3, (9, 8)).astype(np.int32)      # expert 2 is outside [0, 2): its slots are dropped
    check(x, idx, 2, rule, expert_num=3, expert_range=(0, 2), aiv_num=3)
    assert (idx == 2).any()


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp8_gather_copy_column_pieces(dt):
    rng = np.random.default_rng(12)
    x = _tokens(rng, 20, 520, DT[dt], False)
    idx = rng.integers(0, 2, (20, 8)).astype(np.int32)
    r = check(x, idx, 3, expert_num=2, ub_size=SMALL_UB, aiv_num=2)
    assert r.fields["gather_out_cols_loops"] > 1


@pytest.mark.parametrize("cols", [40, 200, 288], ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp4(dt, cols):
    """E2M1: cols 40 (tail 8), 200 (7 blocks, padded slot), 288 (two data VF loops, a tail of 32 - 0 = a whole
    block); one row a core, so each core runs one row loop."""
    rng = np.random.default_rng(cols)
    x = _tokens(rng, 6, cols, DT[dt], True)
    idx = rng.integers(0, 4, (6, 2)).astype(np.int32)
    r = check(x, idx, 9, expert_num=4)
    assert r.tiling_key == 10100000


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
def test_mxfp4_column_pieces(dt):
    rng = np.random.default_rng(3)
    x = _tokens(rng, 12, 700, DT[dt], True)
    idx = rng.integers(0, 4, (12, 1)).astype(np.int32)
    r = check(x, idx, 9, expert_num=4, ub_size=SMALL_UB)
    assert r.fields["gather_out_cols_loops"] > 1


def test_mxfp4_second_row_loop_finds_its_index_buffer_taken():
    """The MXFP4 class never frees the row indices it dequeues: a core with two row loops cannot allocate the
    one-buffer sortedRowIdxInQueue again (on the chip AllocTensor would wait forever)."""
    rng = np.random.default_rng(5)
    x = _tokens(rng, 300, 64, ml_dtypes.bfloat16, False)
    idx = rng.integers(0, 4, (300, 2)).astype(np.int32)
    with pytest.raises(QueueError):
        run_gather(x, idx, 9, expert_num=4, ub_size=SMALL_UB, aiv_num=1)


def test_mxfp8_no_kept_slot_writes_nothing():
    """Every expert outside the active range: the cores still split the n * k source slots and quantise their
    tokens, but every slot's expanded_row_idx is -1, so nothing is written."""
    rng = np.random.default_rng(2)
    x = _tokens(rng, 4, 64, ml_dtypes.bfloat16, False)
    idx = np.full((4, 2), 3, dtype=np.int32)
    _, order, got_x, got_scale = run_gather(x, idx, 2, expert_num=4, expert_range=(0, 2))
    assert order.size == 0 and not got_x.any() and not got_scale.any()


@pytest.mark.parametrize("quant_mode,dtype,want", [
    (2, "bfloat16", ((32, 2), (1600, 2), (896, 2), (32, 2), (64, 1), (64, 1))),
    (9, "float16", ((32, 1), (1600, 1), (896, 1), (32, 1), (64, 1), (64, 1))),
], ids=["mxfp8-bf16", "mxfp4-fp16"])
def test_ub_plan_lists_the_mx_gather_buffers(quant_mode, dtype, want):
    """Init's InitBuffer rows for cols 800 (one piece): row indices, x, codes (perLoopCols / 4 = 200 bytes -> 224, times
    4), scales (25 bytes -> 32) and the two 16-bit scratch rows (50 bytes -> 64); MXFP4 has one buffer a queue."""
    x = np.zeros((4, 800), dtype=DT["bf16" if dtype == "bfloat16" else "fp16"])
    r = moe_init_routing_v3(x, np.zeros((4, 2), np.int32), expert_num=4, quant_mode=quant_mode,
                            active_expert_range=(0, 4), expert_tokens_num_flag=True)
    rows = [b for b in r.ub_plan if b.pipe == "gatherPipe"]
    assert tuple(b.name for b in rows) == ("sortedRowIdxInQueue", "xInQueue", "xQuantOutQueue", "mxScaleOutQueue",
                                           "maxExpBuffer", "invScaleBuffer")
    assert tuple((b.bytes, b.count) for b in rows) == want
    assert [b.kind for b in rows] == ["TQue"] * 4 + ["TBuf"] * 2


def test_golden_amax_clamp_hand_worked():
    """mx_golden's amax_clamp: a zero block and a block of amax 2^-15 both take amax 0x38D2 (exponent field 113,
    mantissa 0x52 <= 0x60: no carry) -> E4M3FN code 113 - 8 = 0x69, E5M2 113 - 15 = 0x62; a block of amax 1.0
    (0x3F80) keeps its code 127 - 8 = 0x77."""
    x = np.zeros((1, 96), dtype=ml_dtypes.bfloat16)
    x[0, 32] = 2.0 ** -15
    x[0, 64] = -1.0
    _, s3 = mx_quantize(x, 3, "round_scale", amax_clamp=True)
    _, s2 = mx_quantize(x, 2, "round_scale", amax_clamp=True)
    assert list(s3.view(np.uint8)[0]) == [0x69, 0x69, 0x77, 0]
    assert list(s2.view(np.uint8)[0]) == [0x62, 0x62, 0x70, 0]
    with pytest.raises(ValueError):
        mx_quantize(x, 3, "floor", amax_clamp=True)


@pytest.mark.parametrize("quant_mode", [3, 9], ids=["mxfp8", "mxfp4"])
def test_checked_mode_race_clean_strict_flags_the_back_to_back_vfs(quant_mode):
    """Checked mode "race" (what production kernels rely on) finds no race in either class, column pieces and
    the gather copy included. "strict" reports the VF that reads the block maxima the VF before it wrote with no
    PipeBarrier<PIPE_V> between them: the source has none either (consecutive VFs run in order on PIPE_V)."""
    rng = np.random.default_rng(9)
    x = _tokens(rng, 20, 520, np.float16, True)
    idx = rng.integers(0, 2, (20, 8)).astype(np.int32)
    ub = SMALL_UB if quant_mode != 9 else None      # MXFP4: one row loop a core (see the test above)
    with checked("race"):
        check(x, idx, quant_mode, expert_num=2, ub_size=ub, aiv_num=2)
    with checked("strict"), pytest.raises(PipeRaceError, match="RAW race"):
        check(x, idx, quant_mode, expert_num=2, ub_size=ub, aiv_num=2)
