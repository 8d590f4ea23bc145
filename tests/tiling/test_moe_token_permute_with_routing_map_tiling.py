"""Tiling of MoeTokenPermuteWithRoutingMap against the real UT figures (tests/ut/op_host @ 25fb6b92890d) and its
failure cases. UT shapes name the kernel's (E, N) map; here the aclnn's (N, E) map is passed."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import get_soc
from tiling.common import TensorDesc as D
from tiling.masked_select import MS_FIELDS
from tiling.moe_token_permute_with_routing_map import moe_token_permute_with_routing_map as tile
from tiling.status import TilingError

UT = get_soc("ascend910b", aiv_num=40, ub_size=262144)        # compile aivNum 40, UB 262144 -> 261888
UT_192K = get_soc("ascend910b", aiv_num=40, ub_size=192 * 1024)
UT_950 = get_soc("ascend950", aiv_num=40)
F32, F16, I8 = np.float32, np.float16, np.int8
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("n,e,cols,num_out,key,ws,data", [
    (2, 3, 5, 6, 1, 16777384, "1 2 5 8 3 3 0 0 1 6 1 6 6 6 1 6 6 8160 0 0 0 0 0 0 1024 2 2 0 1 0 20 2 2976 5952 17856 "
                              "1 1 1 1 1 0 5952 2 2976 1 1 6 95232 71424 3 2 1 2 2 0 0 0 0 0 2 3"),
    (3, 3, 5, 6, 1, 16777408, "1 3 5 8 2 3 0 0 1 6 1 6 6 6 1 6 6 8160 0 0 0 0 0 0 1024 3 3 0 1 0 20 2 3273 6546 13092 "
                              "1 1 1 1 1 0 6546 2 3273 1 1 6 104736 52384 3 3 1 3 3 0 0 0 0 0 3 3"),
    (3, 3, 32768, 6, 3, 16777408, "1 3 32768 32768 2 3 0 0 1 6 1 6 6 6 1 6 6 8160 0 0 0 0 0 0 1024 3 3 0 1 0 131072 1 "
                                  "1 256 512 384 32384 2 1 1 0 256 256 1 1 1 6 129536 2048 3 3 1 3 3 0 0 0 0 0 3 3"),
], ids=["ut_float", "ut_multi_core", "ut_long_h_split_d"])
def test_ut_figures(n, e, cols, num_out, key, ws, data):
    r = tile(D((n, cols), F32), D((n, e), I8), None, num_out, False, soc=UT)
    assert (r.tiling_key, r.workspace_size) == (key, ws)
    assert " ".join(map(str, r.fields.values())) == data


@pytest.mark.parametrize("n,e,cols,dt,num_out,soc,key", [
    (16384, 3, 5, F32, 16384 * 3, UT_192K, 2),       # multi_core_large
    (1, 41, 5, F32, 41, UT_192K, 1),                 # many_experts
    (2, 3, 5, F32, 6, UT_950, 19),                   # drop_and_pad_regbase (SIMT gather)
    (64, 8, 7168, F16, 64, UT_950, 9),               # drop_and_pad_regbase_simd
    (64, 8, 5, F32, 512, UT_950, 19),                # drop_and_pad_regbase_simt_small_cols
    (64, 8, 5, F32, 512, UT, 9),                     # pad on 910B
    (128, 8, 5, F32, 8 * 1024, UT_950, 19),          # drop_and_pad_regbase_large_prob (capacity 1024 > N)
], ids=["multi_core_large", "many_experts", "pad_950_simt", "pad_950_simd", "pad_950_small_cols", "pad_910b",
        "pad_950_large_prob"])
def test_ut_keys(n, e, cols, dt, num_out, soc, key):
    pad = key in (9, 19)
    assert tile(D((n, cols), dt), D((n, e), I8), None, num_out, pad, soc=soc).tiling_key == key


def test_pad_workspace_and_block_dim_use_the_final_core_count():
    r = tile(D((64, 5), F32), D((64, 8), I8), None, 512, True, soc=UT)
    assert r.block_dim == 8 and r.workspace_size == 8 * 64 * 16 + 8 * 64 + 16 * 2 ** 20
    assert r.fields["vbs_last_core_elements"] == 64 - 7 * 64          # the real quirk: negative


@pytest.mark.parametrize("args,match", [
    ((D((3, 5), F32), D((5, 3), I8), None, 6, False), "token count"),          # UT tiling_error
    ((D((2, 5), F32), D((2, 513), I8), None, 1026, False), "topK"),            # UT topk_out_of_range
    ((D((2, 5), F32), D((2, 3, 1), I8), None, 6, False), "dim number"),        # UT indices_dim_invalid
    ((D((0, 5), F32), D((0, 3), I8), None, 0, False), "token count must be"),
], ids=["tokens_mismatch", "topk_513", "map_3d", "no_tokens"])
def test_failures(args, match):
    with pytest.raises(TilingError, match=match):
        tile(*args, soc=UT)


@pytest.mark.parametrize("out_shape,match", [((6, 8), "hidden size"), ((5, 5), "dim 0"), ((30,), "greater than 1")],
                         ids=["cols_mismatch", "token_mismatch", "out_1d"])
def test_output_checks(out_shape, match):
    with pytest.raises(TilingError, match=match):
        tile(D((2, 5), F32), D((2, 3), I8), None, 6, False, soc=UT, permute_tokens_out=D(out_shape, F32))


@pytest.mark.parametrize("tok,probs,tile_elems", [
    (F32, None, 9600),          # no probs: elemSize 2 -> AlignDown((261888 - 128) / 27, 128)
    (F16, F16, 9600),           # 2-byte probs
    (F32, F32, 7424),           # 4-byte probs: AlignDown(261760 / 35, 128)
    (BF16, F32, 7424),          # mixed bf16 tokens + fp32 probs: the probs' size counts
    (F32, I8, 11264),           # the op's own table gives 1-byte probs 1 byte: AlignDown(261760 / 23, 128)
    (F32, np.int64, 5120),      # 8-byte probs: AlignDown(261760 / 51, 128)
], ids=["noprobs", "fp16", "fp32", "bf16_tokens_fp32_probs", "int8", "int64"])
def test_probs_dtype_sets_masked_select_element_size(tok, probs, tile_elems):
    # ubLength = AlignDown((UB - 128) / (4 * elemSize + 19), 128), clamped to N: N large enough not to clamp
    n, e = 20000, 3
    r = tile(D((n, 5), tok), D((n, e), I8), D((n, e), probs) if probs else None, n, False, soc=UT)
    assert r.fields["has_prob"] == int(probs is not None)
    assert r.fields["ms_formertile_length"] == tile_elems
    assert r.ub_fits          # a property: the kernel's TPipes fit the 910B UB


@pytest.mark.parametrize("probs", [None, F16, F32], ids=["noprobs", "fp16", "fp32"])
def test_pad_ub_plan_lists_the_sort_and_prob_pipes(probs):
    r = tile(D((64, 5), F32 if probs in (None, F32) else probs), D((64, 8), I8),
                D((64, 8), probs) if probs else None, 512, True, soc=UT)
    pipes = {row.pipe for row in r.ub_plan}
    assert pipes == ({"sortPipe2", "sortPipe"} if probs else {"sortPipe2"}) and r.ub_fits


@pytest.mark.parametrize("probs,value_bytes", [(I8, 1), (np.int64, 8)], ids=["with_prob_int8", "with_prob_int64"])
def test_ut_with_prob_int8_and_int64_succeed(probs, value_bytes):
    """UT with_prob_int8 / with_prob_int64: tokens fp32 (2, 5), kernel map (3, 2) (here (2, 3)), probs of that
    dtype, numOutTokens 6, compile aivNum 40, UB 192 KiB: GRAPH_SUCCESS with key 1 (the OpDef has no kernel for
    these probs; the aclnn refuses them before any tiling, see the operator tests)."""
    r = tile(D((2, 5), F32), D((2, 3), np.int32), D((2, 3), probs), 6, False, soc=UT_192K)
    assert r.tiling_key == 1 and r.fields["has_prob"] == 1 and r.fields["top_k"] == 3
    # masked select over E = 3 rows of N = 2: 3 cores of one 2-element tile each (the tile clamps to N)
    ms = [r.fields[f"ms_{k}"] for k in MS_FIELDS]
    assert ms == [3, 2, 1, 2, 2, 0, 0, 0, 0, 0, 2, 3]
    # the value queues hold the 128-element aligned tile in the probs' own width
    sizes = {row.name: row.bytes for row in r.ub_plan if row.pipe == "sortPipe"}
    assert sizes["inQueueX"] == sizes["outQueueY"] == 128 * value_bytes
    assert r.ub_fits


@pytest.mark.parametrize("probs", [None, F32, I8], ids=["noprobs", "fp32", "int8"])
def test_pad_probs_of_any_width_tile(probs):
    r = tile(D((64, 5), F32), D((64, 8), I8), D((64, 8), probs) if probs else None, 512, True, soc=UT)
    assert r.tiling_key == 9 and r.ub_fits


@pytest.mark.parametrize("n,e,num_out,pad,top_k,capacity", [
    (3, 4, 11, True, 2, 2),      # the case: the l0 rounds 11 down to 8 = 2 * E; topK = 8 div 3 (11 div 3 = 3)
    (3, 4, 8, True, 2, 2),       # already a multiple of E
    (2, 4, 7, True, 2, 1),       # 7 -> 4; topK = 4 div 2 (7 div 2 = 3)
    (3, 5, 14, True, 3, 2),      # 14 -> 10; topK = 10 div 3 (14 div 3 = 4)
    (1, 4, 7, True, 4, 1),       # 7 -> 4; topK = 4 div 1 (7 div 1 = 7)
    (3, 4, 11, False, 3, 0),     # no pad: rounding to a multiple of N = 3 leaves topK = 11 div 3 = 3
], ids=["issue-3x4-11", "multiple", "2x4-7", "3x5-14", "1x4-7", "nopad-3x4-11"])
def test_top_k_is_read_from_the_l0_rounded_num_out_tokens(n, e, num_out, pad, top_k, capacity):
    r = tile(D((n, 16), F32), D((n, e), I8), None, num_out, pad, soc="ascend910b")
    assert (r.fields["top_k"], r.fields["capacity"]) == (top_k, capacity)


GATHER_FIELDS = ("need_core_num", "front_core_num", "tail_core_num", "core_calc_num", "one_token_btype_size",
                 "once_ub_token_nums", "once_indices_token_nums", "once_indices", "front_core_loop", "tail_core_loop",
                 "token_ub")


@pytest.mark.parametrize("n,e,cols,dt,num_out,key,block_dim,ws,gather", [
    # UT drop_and_pad_regbase: 3 experts -> sort on 3 cores; probs: 6 slots, threads 2048 halved to 128 (6 div
    # threads < 3 div 2), one core; tokens (SIMT): 30 elements, 128 threads, one core
    (2, 3, 5, F32, 6, 19, 3, 3 * 2 * 16 + 3 * 64 + 2 ** 24, (1, 1, 30, 30, 0, 5, 128, 128, 6, 6, 0)),
    # UT drop_and_pad_regbase_simd: 8 experts -> 8 cores; probs: 64 slots, 128 threads, then onceIndices = 2048 of
    # the SIMD gather (sic: the prob call reads it too); tokens (SIMD): 64 rows on 40 cores, 1 each, the first 24
    # one more; fp16 rows of 14336 bytes move as 1792 8-byte units; tokenUB = (253696 - 40960 - 8192) div 8 div 2
    (64, 8, 7168, F16, 64, 9, 40, 40 * 64 * 16 + 40 * 64 + 2 ** 24, (40, 1, 24, 1, 8, 1792, 0, 2048, 64, 64, 12784)),
], ids=["drop_and_pad_regbase", "drop_and_pad_regbase_simd"])
def test_950_gather_fields_by_hand(n, e, cols, dt, num_out, key, block_dim, ws, gather):
    r = tile(D((n, cols), dt), D((n, e), I8), None, num_out, True, soc=UT_950)
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, ws)
    assert tuple(r.fields["index_copy_" + k] for k in GATHER_FIELDS) == gather
    simd = [(b.name, b.bytes, b.count, b.pipe) for b in r.ub_plan if b.pipe != "sortPipe2"]
    assert simd == ([("inQueue", 12784 * 8, 2, "MoeindexCopyPipe"), ("indexBuf", 8192, 1, "MoeindexCopyPipe")]
                    if key == 9 else []) + [("simtDataCache", 40960, 1, "SIMT")]


# The master UTs that state only a status or a key (test_moe_token_permute_with_routing_map_tiling.cpp @ 25fb6b92890d).
# UT maps are the kernel's (E, N); here the aclnn's (N, E) is passed. Outputs: (permute_tokens, permute_probs,
# sorted_indices) shapes, or None where the UT gives the default ones. Expected: the tilingKey, or None = GRAPH_FAILED.
_UT_STATUS = {
    "with_prob_fp16": ((2, 5, F16), (3, 2), F16, [(6, 5), (6,), (6,)], 6, False, "910b", 1),
    "output_cols_mismatch": ((2, 5, F32), (3, 2), None, [(6, 8), (6,), (6,)], 6, False, "910b", None),
    "output_token_mismatch": ((2, 5, F32), (3, 2), None, [(5, 5), (5,), (5,)], 6, False, "910b", None),
    "output_rank_invalid": ((2, 5, F32), (3, 2), None, [(6,), (6,), (6,)], 6, False, "910b", None),
    "output_probs_rank_invalid": ((2, 5, F32), (3, 2), None, [(6, 5), (6, 1), (6,)], 6, False, "910b", None),
    "zero_token": ((0, 5, F32), (3, 0), None, [(0, 5), (0,), (0,)], 0, False, "910b", None),
    "sort_limit_exceeded": ((32769, 5, F32), (3, 32769), None, None, 32769 * 512, False, "910b", None),
    "vbs_ceil_align_branch": ((20000, 5, F32), (3, 20000), None, None, 20000 * 5, False, "910b", 2),
    "drop_and_pad_regbase_xdtype_b32": ((64, 622, F16), (8, 64), None, [(64, 622), (64,), (64,)], 64, True, "950", 9),
    "with_prob_int64": ((2, 5, F32), (3, 2), np.int64, [(6, 5), (6,), (6,)], 6, False, "910b", 1),
    "with_prob_int8": ((2, 5, F32), (3, 2), I8, [(6, 5), (6,), (6,)], 6, False, "910b", 1),
    "small_routing_map_single_core": ((4, 5, F32), (2, 4), None, [(8, 5), (8,), (8,)], 8, False, "910b", 1),
    "float16": ((2, 5, F16), (3, 2), None, [(6, 5), (6,), (6,)], 6, False, "910b_192k", 1),
}


@pytest.mark.parametrize("case", list(_UT_STATUS), ids=list(_UT_STATUS))
def test_ut_status_and_key(case):
    (n, cols, dt), (e, n_map), probs, outs, num_out, pad, soc, want = _UT_STATUS[case]
    soc = {"910b": UT, "910b_192k": UT_192K, "950": UT_950}[soc]
    kw = {}
    if outs is not None:
        kw = dict(permute_tokens_out=D(outs[0], dt), permute_probs_out=D(outs[1], dt),
                  sorted_indices_out=D(outs[2], np.int32))
    p = D((n_map, e), probs) if probs is not None else None
    call = lambda: tile(D((n, cols), dt), D((n_map, e), np.int32), p, num_out, pad, soc=soc, **kw)  # noqa: E731
    if want is None:
        with pytest.raises(TilingError):
            call()
    else:
        assert call().tiling_key == want
