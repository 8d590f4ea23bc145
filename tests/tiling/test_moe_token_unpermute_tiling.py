"""Tiling of MoeTokenUnpermute: every host tiling UT of
moe/moe_token_unpermute/tests/ut/op_host/test_moe_token_unpermute_tiling.cpp @ 25fb6b92890d (key, fields,
workspace, failures; the 310P cases need a 310P profile, which the simulator does not have), the twelve keys,
block dim, UB plan per instantiation, and the Ascend 950 (MoeFinalizeRoutingV2) checks."""
from __future__ import annotations

import pytest

from tiling import TensorDesc as D
from tiling import get_soc
from tiling.moe_finalize_routing_v2 import moe_finalize_routing_v2 as tiling_v2
from tiling.moe_token_unpermute import FIELDS, KEYS_910B, tiling_key
from tiling.moe_token_unpermute import moe_token_unpermute as tiling
from tiling.status import TilingError

UT_SOC = get_soc("ascend910b", ub_size=262144, aiv_num=64)      # the UTs' platform: 64 cores, UB 261888 for tiling
WS = 16 * 1024 * 1024
PROBS_DATA = "5120 8 49152 5120 1 0 96 0 96 1 0 4"

# UT name: (tokens dtype, probs dtype or None, key, expected data or None (only the key is checked))
UT_SUCCESS = {
    "prob_none_bf16": ("bf16", None, 0, "20480 1 6144 17920 1 2560 96 0 96 1 0 2"),
    "prob_not_none_bf16": ("bf16", "bf16", 1, PROBS_DATA),
    "prob_none_fp16": ("fp16", None, 2, "5120 1 6144 5120 1 0 96 0 96 1 0 4"),
    "prob_not_none_fp16": ("fp16", "fp16", 3, PROBS_DATA),
    "prob_none_fp32": ("fp32", None, 4, "5120 1 6144 5120 1 0 96 0 96 1 0 4"),
    "prob_not_none_fp32": ("fp32", "fp32", 5, PROBS_DATA),
    "mix_bf16_fp32": ("bf16", "fp32", 25, PROBS_DATA),
    "mix_bf16_fp16": ("bf16", "fp16", 17, PROBS_DATA),
    "mix_fp16_fp32": ("fp16", "fp32", 27, PROBS_DATA),
    "mix_fp16_bf16": ("fp16", "bf16", 11, PROBS_DATA),
    "mix_fp32_fp16": ("fp32", "fp16", 21, PROBS_DATA),
    "mix_fp32_bf16": ("fp32", "bf16", 13, PROBS_DATA),
}


@pytest.mark.parametrize("case", UT_SUCCESS)
def test_ut_success_cases(case):
    tokens_dt, probs_dt, key, data = UT_SUCCESS[case]
    if probs_dt is None:
        hidden = 20480 if tokens_dt == "bf16" else 5120
        r = tiling(D((6144, hidden), tokens_dt), D((6144,), "int32"), soc=UT_SOC)
    else:
        r = tiling(D((49152, 5120), tokens_dt), D((49152,), "int32"), D((6144, 8), probs_dt), soc=UT_SOC)
    assert r.tiling_key == key and r.workspace_size == WS
    assert r.data() == [int(v) for v in data.split()]
    assert list(r.fields) == list(FIELDS) and r.block_dim == 64


def test_ut_small_tokens_num_core():
    r = tiling(D((8, 128), "fp16"), D((8,), "int32"), soc=UT_SOC)
    assert r.tiling_key == 2 and r.block_dim == 8 and r.fields["tokens_core_length"] == 1


def test_ut_prob_small_ub_token_split():
    """UB 8192: the hidden piece comes out 0 (subtract 512, round up) and the tiling still succeeds."""
    r = tiling(D((512, 4096), "fp16"), D((512,), "int32"), D((64, 8), "fp16"),
               soc=get_soc("ascend910b", ub_size=8192, aiv_num=64))
    assert r.tiling_key == 3
    assert (r.fields["hidden_splited_length"], r.fields["hidden_splited_num"]) == (0, 0)


@pytest.mark.parametrize("args,fragment", [
    ((D((64, 128), "fp16"), D((64,), "int32"), D((4, 8), "fp16")), "needs tokens \\* topK = 32"),
    ((D((64, 128), "fp16"), D((64,), "int32"), D((8, 8, 1), "fp16")), "probs must be 2-D"),
    ((D((513, 128), "fp16"), D((513,), "int32"), D((1, 513), "fp16")), "exceeds 512"),
    ((D((64, 128, 1), "fp16"), D((64,), "int32"), None), "permuted_tokens must be 2-D"),
    ((D((64, 128), "fp16"), D((), "int32"), None), "dim 0"),
], ids=["ut-probs-dim-mismatch", "ut-probs-not-2d", "ut-topk-too-large", "tokens-3d", "indices-0d"])
def test_tiling_failures(args, fragment):
    with pytest.raises(TilingError, match=fragment) as info:
        tiling(*args, soc=UT_SOC)
    assert info.value.status == 561002


def test_tokens_check_comes_before_probs_checks():
    with pytest.raises(TilingError, match="permuted_tokens must be 2-D"):
        tiling(D((64,), "fp16"), D((64,), "int32"), D((8, 8, 1), "fp16"), soc=UT_SOC)


@pytest.mark.parametrize("tokens", ["bf16", "fp16", "fp32"])
def test_twelve_keys(tokens):
    keys = {tiling_key(tokens, p) for p in (None, "bf16", "fp16", "fp32")}
    assert keys <= set(KEYS_910B) and len(keys) == 4
    assert {tiling_key(t, p) for t in ("bf16", "fp16", "fp32") for p in (None, "bf16", "fp16", "fp32")} == \
        set(KEYS_910B)


@pytest.mark.parametrize("tokens,probs,rows", [
    ("bf16", None, ["tokens_inque", "indices_inque", "outque", "temp_buffer0", "temp_buffer1"]),
    ("fp32", "fp32", ["tokens_inque", "indices_inque", "outque", "probs_inque"]),
    ("fp32", "bf16", ["tokens_inque", "indices_inque", "outque", "probs_inque", "temp_buffer2"]),
], ids=["bf16-noprobs", "fp32-fp32probs", "fp32-bf16probs"])
def test_ub_plan_rows_and_fit(tokens, probs, rows):
    r = tiling(D((40, 300), tokens), D((40,), "int32"), None if probs is None else D((10, 4), probs), soc="910b")
    assert [row.name for row in r.ub_plan] == rows and r.ub_fits
    assert r.block_dim == (40 if probs is None else 10)


def test_attributes_are_not_read():
    a = tiling(D((40, 64), "bf16"), D((40,), "int32"), D((10, 4), "bf16"), soc="910b")
    b = tiling(D((40, 64), "bf16"), D((40,), "int32"), D((10, 4), "bf16"), True, (3, 3), soc="910b")
    assert a.data() == b.data() and a.tiling_key == b.tiling_key


# --- Ascend 950: the tiling of the MoeFinalizeRoutingV2 launch, with the checks it can reach ------------------------
@pytest.mark.parametrize("tokens,indices,probs", [
    (D((600, 16), "fp32"), D((600,), "int32"), D((1, 600), "fp32")),
    (D((100, 16), "bf16"), D((100,), "int32"), None),
    (D((64, 7168), "bf16"), D((64,), "int32"), D((8, 8), "fp32")),
], ids=["fp32-topk600", "bf16-noprobs", "bf16-h7168-fp32probs"])
def test_950_is_the_finalize_routing_v2_launch(tokens, indices, probs):
    """No topK limit; scales = probs, dropPadMode 2 (read index by row), y of (tokens, H) in the tokens' dtype."""
    r = tiling(tokens, indices, probs, soc="950")
    tokens_n = probs.shape[0] if probs is not None else indices.shape[0]
    want = tiling_v2(tokens, indices, scales=probs, drop_pad_mode=2,
                     y_out=D((tokens_n, tokens.shape[1]), tokens.dtype), soc="950")
    assert (r.tiling_key, r.block_dim, r.workspace_size, r.data()) == (want.tiling_key, want.block_dim,
                                                                        want.workspace_size, want.data())
    assert r.fields["row"] == tokens_n and r.fields["k"] == (1 if probs is None else probs.shape[1]) and r.ub_fits


@pytest.mark.parametrize("args,fragment", [
    ((D((8, 0), "bf16"), D((8,), "int32"), None), "greater than 0"),
    ((D((8, 4), "bf16"), D((8,), "int32"), D((2, 0), "bf16")), "topK = probs dim 1 must be greater than 0"),
    ((D((8, 4), "bf16"), D((8, 1), "int32"), None), "1-D"),
    ((D((8, 4), "bf16"), D((3,), "int32"), D((1, 4), "bf16")), "fewer than one token"),
    ((D((8, 4), "bf16"), D((9,), "int32"), D((2, 4), "bf16")), "tokens \\* topK"),
    ((D((8, 4), "bf16"), D((8,), "int32"), D((3, 4), "bf16")), "probs must have shape"),
], ids=["hidden-0", "topk-0", "indices-2d", "no-token", "indices-not-multiple", "probs-rows"])
def test_950_finalize_routing_checks(args, fragment):
    with pytest.raises(TilingError, match=fragment):
        tiling(*args, soc="950")
