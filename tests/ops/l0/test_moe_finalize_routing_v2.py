"""l0op::MoeFinalizeRoutingV2 on Ascend 950 (ops.l0.moe_finalize_routing_v2): the four arch35 templates with
dropPadMode 2, bit for bit against the MoeTokenUnpermute golden's 950 rules (ops.unpermute.golden, arch35=True:
-1 and rows >= R skipped, zero probs multiplied, the fp32 sum from +0.0 in slot order).

A 16 KiB, 3-core profile walks the templates with the hidden size (row-K-H full load -> K-H full load -> H full load
-> split H); each cut is run on both sides. A 64 KiB profile reaches K-H full load's 16-token batched path (k <= 4,
rowFactor >= 16). Shapes are small; the kernels compile once per (tokens, scales) carrier.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops.l0 import moe_finalize_routing_v2 as l0
from ops.unpermute.golden import golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling import moe_finalize_routing_v2 as tile
from tiling.status import ParamInvalidError, TilingError

BF16, F16, F32, I32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32)
SMALL = get_soc("ascend950", ub_size=16384, aiv_num=3)
STOCK = get_soc("ascend950")
DT = {"bf16": BF16, "fp16": F16, "fp32": F32}
# what aclnnMoeTokenUnpermute passes (op_host/op_api/aclnn_moe_token_unpermute.cpp @ 25fb6b92890d)
UNPERMUTE_ATTRS = dict(drop_pad_mode=2, zero_expert_range=None, copy_expert_range=None, constant_expert_range=None,
                       k=1)


def _inputs(rows, hidden, tokens, top_k, tok, prob, *, seed=0, drop=0, minus_one=0, nan_under_zero=False):
    """Tokens (rows, hidden), a permutation of the slots over the rows (`drop` slots sent past the rows,
    `minus_one` set to -1), probs (tokens, top_k) or None (then top_k must be 1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    s = (rng.permutation(tokens * top_k) % rows).astype(np.int32)
    picks = rng.permutation(s.size)
    s[picks[:drop]] = rows + picks[:drop]
    s[picks[drop: drop + minus_one]] = -1
    probs = None
    if prob is not None:
        w = rng.random((tokens, top_k)).astype(np.float32)
        if nan_under_zero:
            w[0, 0] = 0.0
            w[1 % tokens, top_k - 1] = -0.0
            for t, k in ((0, 0), (1 % tokens, top_k - 1)):
                if 0 <= s[t * top_k + k] < rows:
                    x[s[t * top_k + k]] = np.nan
        probs = w.astype(DT[prob])
    return x.astype(DT[tok]), s, probs


def _run(x, s, probs, soc, check=None):
    y = np.zeros(((probs.shape[0] if probs is not None else s.size), x.shape[1]), x.dtype)
    size, executor = l0.get_workspace_size(x, s, scales=probs, **UNPERMUTE_ATTRS, y_out=y, soc=soc)
    l0.run(np.zeros(size, np.uint8), size, executor, check=check)
    return y, executor


def _check(x, s, probs, soc, check=None):
    y, executor = _run(x, s, probs, soc, check)
    want = golden(x, s, probs, arch35=True)
    assert_bits_equal(y, want, f"key {executor.tiling.tiling_key}")
    return executor


def _template(hidden, top_k, tok, prob, soc=SMALL, tokens=10):
    x = np.zeros((tokens * top_k, hidden), DT[tok])
    return tile(x, np.zeros(tokens * top_k, np.int32), scales=None if prob is None else np.zeros((tokens, top_k),
                DT[prob]), drop_pad_mode=2, soc=soc).tiling_key // 10000 * 10000


def _cut(top_k, tok, prob, lo, hi):
    """The largest hidden size in [lo, hi) whose template is lo's."""
    first = _template(lo, top_k, tok, prob)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _template(mid, top_k, tok, prob) == first:
            lo = mid
        else:
            hi = mid
    return lo


# id: (tokens dtype, probs dtype or None, topK) -- every dtype the family passes, each pair once
PAIRS = [("bf16", "bf16", 4), ("fp16", "fp32", 3), ("fp32", "bf16", 2), ("bf16", None, 1), ("fp32", None, 1),
         ("fp16", "fp16", 1)]


@pytest.mark.parametrize("tok,prob,top_k", PAIRS, ids=[f"{t}-{p or 'noprobs'}-k{k}" for t, p, k in PAIRS])
def test_every_template_both_sides_of_each_cut(tok, prob, top_k):
    """Hidden sizes on both sides of the three template cuts of the 16 KiB profile, with dropped rows (and -1
    slots where the template skips them safely: with topK 1 the K-H template adds its stale buffer instead)."""
    seen = set()
    lo = 16
    for hi in (4000, 12000, 40000):
        cut = _cut(top_k, tok, prob, lo, hi)
        for hidden in (cut, cut + 1):
            key = _template(hidden, top_k, tok, prob)
            seen.add(key)
            k1_kh = top_k == 1 and key == 40000
            x, s, probs = _inputs(10 * top_k, hidden, 10, top_k, tok, prob, seed=hidden, drop=0 if k1_kh else 2,
                                  minus_one=0 if k1_kh else 2)
            executor = _check(x, s, probs, SMALL)
            assert executor.tiling.tiling_key // 10000 * 10000 == key
        lo = cut + 1
    assert seen == {10000, 20000, 30000, 40000}


@pytest.mark.parametrize("case", ["row-k-h", "k-h", "h-full", "split-h"])
def test_zero_probs_multiply_nan_rows(case):
    hidden = {"row-k-h": 40, "k-h": 200, "h-full": 1000, "split-h": 3000}[case]
    x, s, probs = _inputs(40, hidden, 10, 4, "bf16", "fp32", seed=3, nan_under_zero=True)
    executor = _check(x, s, probs, SMALL)
    assert executor.tiling.tiling_key == {"row-k-h": 30020, "k-h": 40020, "h-full": 10020, "split-h": 20020}[case]
    y, _ = _run(x, s, probs, SMALL)
    assert np.isnan(y[0].astype(np.float32)).all()


def test_large_topk_multi_loop_on_the_stock_profile():
    """topK 600 of one token (K-H beyond T-G's 512), and a multi-loop row-K-H shape on 64 cores."""
    x, s, probs = _inputs(1200, 8, 2, 600, "bf16", "bf16", seed=5, drop=7, minus_one=5)
    _check(x, s, probs, STOCK)
    x, s, probs = _inputs(64, 64, 320, 1, "fp16", None, seed=6)
    executor = _check(x, s, probs, STOCK)
    assert executor.tiling.block_dim == 64


def test_k_h_full_load_rows_loop_and_checked_mode():
    """K-H full load with several row loops per core (rowFactor < a core's rows), in checked mode."""
    x, s, probs = _inputs(120, 200, 30, 4, "bf16", "fp16", seed=8, drop=3, minus_one=3)
    executor = _check(x, s, probs, SMALL, check="race")
    f = executor.tiling.fields
    assert executor.tiling.tiling_key == 40021 and f["row_loop_of_former_block"] > 1
    assert executor.report.extra.get("waived_races", 0) > 0      # the scales-packing race of the real kernel


@pytest.mark.parametrize("case", ["row-k-h", "h-full", "split-h", "k-h-k1"])
def test_checked_mode_is_clean(case):
    hidden, top_k, prob = {"row-k-h": (40, 4, "bf16"), "h-full": (1000, 4, "bf16"), "split-h": (3000, 2, "fp32"),
                           "k-h-k1": (200, 1, None)}[case]
    x, s, probs = _inputs(10 * top_k, hidden, 10, top_k, "bf16", prob, seed=9)
    executor = _check(x, s, probs, SMALL, check="race")
    assert not executor.report.extra.get("waived_races")


def test_other_negative_index_is_read_before_expanded_x():
    x, s, probs = _inputs(20, 64, 5, 4, "fp32", "fp32", seed=10)
    s[3] = -2
    with pytest.raises(OutOfBoundsError):
        _run(x, s, probs, SMALL)


def test_unmodelled_inputs_are_refused_after_the_tiling():
    x, s, probs = _inputs(20, 64, 5, 4, "fp32", "fp32", seed=11)
    y = np.zeros((5, 64), F32)
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(x, s, x1=np.zeros((5, 64), F32), scales=probs, **UNPERMUTE_ATTRS, y_out=y, soc=SMALL)
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(x, s, scales=probs, **dict(UNPERMUTE_ATTRS, drop_pad_mode=0), y_out=y, soc=SMALL)
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(x, s, scales=probs, x=np.zeros((5, 64), F32), **UNPERMUTE_ATTRS, y_out=y, soc=SMALL)


BAD_ATTRS = {
    "k-not-int": (dict(k=1.5), ParamInvalidError, "k must be an integer"),
    "drop-pad-mode-not-int": (dict(drop_pad_mode="2"), ParamInvalidError, "drop_pad_mode"),
    "zero-range-not-list": (dict(zero_expert_range=3), ParamInvalidError, "zero_expert_range"),
    "copy-range-float": (dict(copy_expert_range=[0, 1.5]), ParamInvalidError, r"copy_expert_range\[1\]"),
    "constant-range-str": (dict(constant_expert_range="0,2"), ParamInvalidError, "constant_expert_range"),
    "k-not-scales-dim1": (dict(k=3), TilingError, "k \\(3\\) must equal dim 1 of scales"),
    "ranges-overlap": (dict(zero_expert_range=[0, 2], copy_expert_range=[1, 3]), TilingError, "overlap"),
}


@pytest.mark.parametrize("case", BAD_ATTRS)
def test_attributes_are_validated_with_their_names(case):
    """The l0 takes master's five attributes: malformed values are 161002 naming them, the tiling's checks 561002."""
    attrs, error, match = BAD_ATTRS[case]
    x, s, probs = _inputs(20, 64, 5, 4, "fp32", "fp32", seed=11)
    with pytest.raises(error, match=match):
        l0.get_workspace_size(x, s, scales=probs, **dict(UNPERMUTE_ATTRS, **attrs), y_out=np.zeros((5, 64), F32),
                              soc=SMALL)


BATCHED = get_soc("ascend950", ub_size=65536, aiv_num=3)


@pytest.mark.parametrize("tok,prob,top_k,hidden", [("bf16", "bf16", 4, 64), ("fp16", "fp32", 2, 128)],
                         ids=["bf16-bf16-k4", "fp16-fp32-k2"])
def test_k_h_full_load_batched_path(tok, prob, top_k, hidden):
    """k <= 4 with rowFactor >= 16: 150 tokens over 3 cores; a core's 50 rows in 2 loops of 25 -> batches of 16
    and 9, with dropped and -1 slots; checked mode waives only the unsynced scales packing."""
    x, s, probs = _inputs(150 * top_k, hidden, 150, top_k, tok, prob, seed=12, drop=5, minus_one=4)
    executor = _check(x, s, probs, BATCHED, check="race")
    f = executor.tiling.fields
    assert executor.tiling.tiling_key // 10000 == 4 and (f["row_factor"], f["row_loop_of_former_block"]) == (25, 2)
    assert ("expandedXQue", 16 * top_k * hidden * x.itemsize, 2) in [(u.name, u.bytes, u.count)
                                                                   for u in executor.tiling.ub_plan]


ALL_PAIRS = [(t, p) for t in ("bf16", "fp16", "fp32") for p in ("bf16", "fp16", "fp32", None)]


@pytest.mark.parametrize("tok,prob", ALL_PAIRS, ids=[f"{t}-{p or 'noprobs'}" for t, p in ALL_PAIRS])
def test_every_dtype_pair_on_every_template(tok, prob):
    """The twelve (tokens, probs) pairs, each on the four templates of the 16 KiB profile (topK 3 with probs)."""
    top_k = 1 if prob is None else 3
    keys = set()
    first = [16]
    for hi in (4000, 12000, 40000):            # the first hidden size of each following template
        first.append(_cut(top_k, tok, prob, first[-1], hi) + 1)
    for hidden in first:
        x, s, probs = _inputs(10 * top_k, hidden, 10, top_k, tok, prob, seed=hidden + top_k,
                              drop=0 if prob is None else 2, minus_one=0 if prob is None else 1)
        keys.add(_check(x, s, probs, SMALL).tiling.tiling_key // 10000)
    assert keys == {1, 2, 3, 4}


def test_moe_token_unpermute_on_950_passes_masters_arguments(monkeypatch):
    """aclnn_moe_token_unpermute.cpp @ 25fb6b92890d calls l0op::MoeFinalizeRoutingV2(tokens, indices, nullptr x1,
    x2, bias, probs, nullptr expert_idx, x, alpha1, alpha2, v, READ_INDEX_BY_ROW, nullptr ranges, k 1, out)."""
    import ops.unpermute as unpermute

    calls = []
    real = l0.get_workspace_size

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(unpermute._l0_finalize, "get_workspace_size", spy)
    x, s, probs = _inputs(8, 32, 4, 2, "bf16", "bf16", seed=13)
    out = np.zeros((4, 32), BF16)
    unpermute.get_workspace_size(x, s, probs, False, None, out, soc="ascend950")
    (args, kwargs), = calls
    assert len(args) == 11 and args[0] is not None and args[1] is not None and args[5] is not None
    assert all(a is None for i, a in enumerate(args) if i not in (0, 1, 5))
    assert {k: v for k, v in kwargs.items() if k not in ("y_out", "soc")} == UNPERMUTE_ATTRS
