"""Kernel G (KernelMoeTokenUnpermute) on its own: launched through ascend_sim.launch with one PipePhase,
bit-exact against an independent NumPy golden over token dtypes x probs dtypes x scenarios (dropped rows,
-1 slots, zero probs hiding NaN rows, hidden splits, token chunks, uneven core remainders, topK 1 and 512);
every negative index (-1, -2, -5, -2**31) skipped alike where the variant skips them; bad indices that the
variant does not skip end in OutOfBoundsError."""
from __future__ import annotations

from collections import namedtuple

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import Kernel, OutOfBoundsError, launch
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of, gm_view
from ops.common.unpermute_gather import (
    GatherTilingData,
    gather_buffers,
    gather_gm,
    gather_phase,
    gather_template,
    gather_tiling_data,
)
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.common import length_by_type
from tiling.unpermute_gather import gather_tiling, gather_ub_plan

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
TOKEN_DTYPES = {"bf16": BF16, "fp16": F16, "fp32": F32}
PROB_DTYPES = {"noprobs": None, "bf16probs": BF16, "fp16probs": F16, "fp32probs": F32}
GM_NAMES = ("permuted_tokens", "sorted_indices", "probs", "unpermuted_tokens")

# an operator's own struct (UWRM's layout: used_core_num before buffer_num), to show the phase takes any td
UwrmLikeTilingData = namedtuple("UwrmLikeTilingData", [
    "hidden_size", "top_k", "num_out_tokens", "hidden_splited_length", "hidden_splited_num", "hidden_splited_remain",
    "tokens_core_length", "tokens_core_remain", "tokens_splited_length", "tokens_splited_num",
    "tokens_splited_remain", "used_core_num", "buffer_num"])

# id: tokens N, topK, hidden H, rows dropped from the permuted tensor, -1 slots (skip_negative variant),
#     chip overrides, the tiling figures the scenario must reach
SCENARIOS = {
    "dropped-rows-unaligned-h": dict(n=37, k=3, h=300, drop=7),
    "aligned-h-uneven-cores": dict(n=37, k=2, h=256, drop=0, aiv_num=8, expect={"tokens_core_remain": 5}),
    "hidden-split-512": dict(n=5, k=3, h=1300, drop=2, aiv_num=2, ub_size=15376,
                             expect={"hidden_splited_length": 512, "hidden_splited_num": 2,
                                     "hidden_splited_remain": 276}),
    "token-chunks": dict(n=41, k=80, h=40, drop=50, aiv_num=2, ub_size=13776, expect_chunks=True),
    "minus-one-slots": dict(n=30, k=4, h=64, drop=3, minus_one=True, aiv_num=4),
    "topk1": dict(n=50, k=1, h=48, drop=4, aiv_num=16),
    "topk512": dict(n=3, k=512, h=16, drop=100, aiv_num=2),
    "fewer-tokens-than-cores-odd-h": dict(n=5, k=2, h=33, drop=1),
}


def make_case(n, k, h, drop, token_dtype, prob_dtype, minus_one=False, seed=0):
    """Inputs of one gather: tokens (R, H), a permutation of the N*K slots as indices (those >= R are the
    dropped rows), probs (N, K) with exact zeros whose rows hold NaN (a kernel that gathered them would
    show it), a column of -0.0, and for minus_one some -1 slots, among them every slot 0 of a few tokens and whole
    tokens."""
    rng = np.random.default_rng(seed)
    rows = n * k - drop
    tokens = rng.standard_normal((rows, h)).astype(np.float32)
    tokens[:, 0] = -0.0      # sums of -0.0 stay -0.0 only if the first kept term is assigned, not added to +0.0
    indices = rng.permutation(n * k).astype(np.int32)
    probs = None
    if prob_dtype is not None:
        probs = rng.uniform(-1.0, 1.0, (n, k)).astype(np.float32)
        zero = rng.random((n, k)) < 0.15
        probs[zero] = np.where(rng.random(zero.sum()) < 0.5, 0.0, -0.0)
        flat = indices.reshape(n, k)
        hidden_rows = flat[zero & (flat < rows)]
        tokens[hidden_rows] = np.nan
        probs = probs.astype(prob_dtype)
    if minus_one:
        flat = indices.reshape(n, k)
        flat[rng.random((n, k)) < 0.25] = -1
        flat[:3, 0] = -1         # slot 0 skipped: the accumulator starts from zero
        flat[3, :] = -1          # a token with no valid slot
    return tokens.astype(token_dtype), indices, probs


def golden(tokens, indices, probs, top_k, num_out_tokens, skip_negative):
    """out[t] = cast(sum_k w[t,k] * tokens[idx[t,k]]) in fp32, k ascending, the first kept term assigned (not
    added to 0, which would turn -0.0 into +0.0); kept = idx < num_out_tokens, idx >= 0 (skip_negative),
    w != 0. Written from the formula, not from the kernel."""
    n = indices.size // top_k
    idx = indices.reshape(n, top_k).astype(np.int64)
    x = tokens.astype(np.float32)
    w = None if probs is None else probs.reshape(n, top_k).astype(np.float32)
    keep = idx < num_out_tokens
    if skip_negative:
        keep &= idx >= 0
    if w is not None:
        keep &= w != 0
    acc = np.zeros((n, tokens.shape[1]), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(top_k):
            rows = x[np.where(keep[:, k], idx[:, k], 0)]
            term = rows if w is None else rows * w[:, k:k + 1]
            mask = keep[:, k:k + 1]
            acc = np.where(mask, term, np.float32(0.0)) if k == 0 else np.where(mask, acc + term, acc)
    return acc.astype(tokens.dtype)


def _gm(array, index):
    return GlobalTensor(gm_view(array), index, 0)


def run_gather(tokens, indices, probs, *, top_k, soc, skip_negative, num_out_tokens=None, block_dim=None, td_type=None):
    """Tile with T-G, plan the UB, launch kernel G; returns (output, GatherTiling)."""
    n = indices.size // top_k
    rows, h = tokens.shape
    prob_bytes = None if probs is None else probs.dtype.itemsize
    tg = gather_tiling(ub_bytes=soc.ub_size_for_tiling, core_num=soc.aiv_num, token_bytes=length_by_type(tokens.dtype),
                       num_tokens=n, top_k=top_k, hidden=h,
                       num_out_tokens=rows if num_out_tokens is None else num_out_tokens, index_bytes=4,
                       prob_bytes=prob_bytes)
    tokens_fp32 = tokens.dtype == F32
    plan = gather_ub_plan(tg.fields, token_bytes=tokens.dtype.itemsize, prob_bytes=prob_bytes,
                          tokens_fp32=tokens_fp32, pipe="pipe")
    buffers = gather_buffers(tokens_fp32, probs is not None, prob_bytes == 4)
    out = np.full((n, h), 7, dtype=tokens.dtype)      # rows the kernel does not write stay 7
    gm = gather_gm(_gm(tokens, 0), _gm(indices, 1), None if probs is None else _gm(probs, 2), _gm(out, 3))
    tmpl = gather_template(dt_of(tokens.dtype), None if probs is None else dt_of(probs.dtype),
                           skip_negative=skip_negative, used_core_num=tg.used_core_num)
    fields = dict(tg.fields)
    if td_type is UwrmLikeTilingData:
        fields["used_core_num"] = tg.used_core_num
        td = UwrmLikeTilingData(**fields)
    else:
        td = GatherTilingData(**fields)
    kernel = Kernel("GatherTest", "KernelMoeTokenUnpermute", (gather_phase("pipe", lambda *a: a, buffers),))
    launch(kernel, block_dim=block_dim or tg.used_core_num, plan=plan, args=(td, gm, tmpl), chip=soc,
           gm_names=GM_NAMES, tiling_key=0)
    return out, tg


def _cases():
    for sc in SCENARIOS:
        for (tname, tdt) in TOKEN_DTYPES.items():
            for (pname, pdt) in PROB_DTYPES.items():
                yield pytest.param(sc, tdt, pdt, id=f"{sc}-{tname}-{pname}")


@pytest.mark.parametrize("scenario,token_dtype,prob_dtype", list(_cases()))
def test_matches_golden_bit_for_bit(scenario, token_dtype, prob_dtype):
    spec = SCENARIOS[scenario]
    minus_one = spec.get("minus_one", False)
    tokens, indices, probs = make_case(spec["n"], spec["k"], spec["h"], spec["drop"], token_dtype, prob_dtype,
                                       minus_one)
    soc = get_soc("ascend910b", ub_size=spec.get("ub_size"), aiv_num=spec.get("aiv_num"))
    # the UWRM-like struct in half the cases: the phase must accept any td carrying the 12 fields
    td_type = UwrmLikeTilingData if (len(scenario) + token_dtype.itemsize) % 2 else GatherTilingData
    out, tg = run_gather(tokens, indices, probs, top_k=spec["k"], soc=soc, skip_negative=minus_one, td_type=td_type)
    for name, value in spec.get("expect", {}).items():
        assert tg.fields[name] == value, f"{scenario}: the tiling no longer reaches {name} = {value}: {tg.fields}"
    if spec.get("expect_chunks"):
        f = tg.fields
        assert 0 < f["tokens_splited_length"] < f["tokens_core_length"], f"{scenario}: no token chunks: {f}"
    want = golden(tokens, indices, probs, spec["k"], tokens.shape[0], minus_one)
    assert_bits_equal(out, want, f"{scenario}; tiling {tg.fields}")


def test_idle_cores_beyond_used_core_num():
    """UWRM launches max(used, masked-select cores) blocks: the cores past used_core_num must do nothing."""
    tokens, indices, probs = make_case(6, 2, 40, 0, BF16, F32)
    soc = get_soc("ascend910b", aiv_num=16)
    out, tg = run_gather(tokens, indices, probs, top_k=2, soc=soc, skip_negative=True, block_dim=16,
                         td_type=UwrmLikeTilingData)
    assert tg.used_core_num == 6
    assert_bits_equal(out, golden(tokens, indices, probs, 2, 12, True))


def test_tiny_ub_hidden_length_zero_writes_nothing():
    """The real tiling succeeds with hidden length 0 on a tiny UB (UT prob_small_ub_token_split); the kernel
    then has no hidden piece to compute and leaves the output as it was."""
    tokens, indices, probs = make_case(8, 8, 64, 0, F16, F16)
    out, tg = run_gather(tokens, indices, probs, top_k=8, soc=get_soc("ascend910b", ub_size=8192, aiv_num=4),
                         skip_negative=False)
    assert (tg.fields["hidden_splited_length"], tg.fields["hidden_splited_num"]) == (0, 0)
    assert np.all(out == 7)


@pytest.mark.parametrize("bad_index,num_out_tokens_extra,skip_negative", [
    (-1, 0, False),            # MoeTokenUnpermute / PermuteGrad do not skip -1
    (-5, 0, False),
    (40, 5, False),            # index >= rows but < the num_out_tokens field: gathered past the tensor
    (2 ** 31 - 1, 2 ** 31, True),
], ids=["minus1-no-skip", "minus5-no-skip", "index-past-rows", "int32-max"])
def test_unskipped_bad_index_is_out_of_bounds(bad_index, num_out_tokens_extra, skip_negative):
    tokens, indices, _ = make_case(8, 5, 24, 0, BF16, None)
    indices[13] = bad_index
    with pytest.raises(OutOfBoundsError) as info:
        run_gather(tokens, indices, None, top_k=5, soc=get_soc("ascend910b", aiv_num=4), skip_negative=skip_negative,
                   num_out_tokens=40 + num_out_tokens_extra)
    assert info.value.tensor == "permuted_tokens"


def test_skipped_bad_indices_are_harmless():
    """Indices >= rows and (skip_negative) < 0 are never dereferenced."""
    tokens, indices, _ = make_case(8, 5, 24, 0, BF16, None)
    indices[[1, 7, 22]] = [-1, 40, 2 ** 31 - 1]
    out, _ = run_gather(tokens, indices, None, top_k=5, soc=get_soc("ascend910b", aiv_num=3), skip_negative=True)
    assert_bits_equal(out, golden(tokens, indices, None, 5, 40, True))


# the operators whose kernel G skips negative slots: PWRM-grad key 0 (no probs, its struct is GatherTilingData's
# layout) and UWRM keys 0 / 1 (probs, its own struct)
SKIPPING_OPS = {"pwrm-grad": (None, GatherTilingData), "uwrm": (F32, UwrmLikeTilingData)}
NEGATIVES = (-1, -2, -5, -(2 ** 31))


@pytest.mark.parametrize("negative", NEGATIVES, ids=[f"idx{v}" for v in NEGATIVES])
@pytest.mark.parametrize("token_dtype", [BF16, F32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("op", SKIPPING_OPS)
def test_every_negative_index_is_skipped_like_minus_one(op, token_dtype, negative):
    """IsValidInputIndex skips idx < 0, not only the -1 sentinel: any negative slot (slot 0 of a token, every
    slot of a token, scattered ones) adds nothing, exactly as the golden's idx >= 0 rule says, and is never
    read (a read would be before the tensor: OutOfBoundsError)."""
    prob_dtype, td_type = SKIPPING_OPS[op]
    tokens, indices, probs = make_case(12, 3, 40, 2, token_dtype, prob_dtype, minus_one=True, seed=7)
    indices[indices == -1] = negative
    assert (indices == negative).sum() >= 6
    out, _ = run_gather(tokens, indices, probs, top_k=3, soc=get_soc("ascend910b", aiv_num=4), skip_negative=True,
                        td_type=td_type)
    want = golden(tokens, indices, probs, 3, tokens.shape[0], True)
    assert_bits_equal(out, want)


def test_every_operator_struct_shares_one_stage_type():
    """gather_phase hands the stage GatherTilingData whatever struct the operator's select returns, and every
    input read-only with probs as bytes, so all four operators reuse one compiled stage per token carrier."""
    tokens, indices, probs = make_case(4, 2, 16, 0, BF16, F32)
    out = np.zeros((4, 16), BF16)
    fields = gather_tiling(ub_bytes=196352, core_num=4, token_bytes=2, num_tokens=4, top_k=2, hidden=16,
                           num_out_tokens=8, index_bytes=4, prob_bytes=4).fields
    tmpl = gather_template(dt_of(BF16), dt_of(F32), skip_negative=True, used_core_num=4)
    gm = gather_gm(_gm(tokens, 0), _gm(indices, 1), _gm(probs, 2), _gm(out, 3))
    phase = gather_phase("pipe", lambda *a: a, gather_buffers(False, True, True))
    td_a, gm_a, _ = phase.stage_args(UwrmLikeTilingData(**fields, used_core_num=4), gm, tmpl)
    td_b, gm_b, _ = phase.stage_args(fields, gm._replace(probs=_gm(probs.astype(BF16), 2)), tmpl)
    assert type(td_a) is type(td_b) is GatherTilingData and td_a == td_b == gather_tiling_data(fields)
    assert gm_a.probs.data.dtype == gm_b.probs.data.dtype == np.uint8
    assert not gm_a.permuted_tokens.data.flags.writeable and gm_a.unpermuted_tokens.data.flags.writeable
