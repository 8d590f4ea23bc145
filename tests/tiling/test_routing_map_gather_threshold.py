"""MoeTokenPermuteWithRoutingMap drop-and-pad tiling on Ascend 950: the token gather is SIMD (key 9) from 620
columns on and SIMT (key 19) below, and the two set different block dims. Checked at 619 / 620 / 621 columns
for every token dtype, with the expected key, block dim and workspace worked out by hand from the real
tiling (moe_token_permute_with_routing_map_tiling.cpp, DoOpTiling / Tiling4VBSComputeLastdim /
Tiling4GatherCompute / Tiling4GatherComputeSimt, facts §7.d):

* isSimd = cols >= 620 and numOutTokens >= aivNum / 2, with the member aivNum still 0 there: in effect
  cols >= 620, whatever the dtype (the rule counts columns, not bytes);
* aivNum after the last-dim sort: E mod C (C when that is 0) cores, plus C - that when E > C;
* the probs SIMT tiling always runs; with numOutTokens below its thread count it needs 1 core;
* SIMD tokens: blockFactor = numOutTokens div C; it needs C cores when blockFactor > 0, else numOutTokens mod C;
* SIMT tokens: y = cols * numOutTokens elements; threads 2048 unless y div 2048 < aivNum / 2 (then halved);
  per core = AlignUp(y div C, threads); it needs y div (per core) cores;
* block dim = the largest of those; workspace = aivNum * N * 16 + aivNum * 64 + 16 MiB (pad mode).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tiling import get_soc
from tiling.common import TensorDesc as D
from tiling.moe_token_permute_with_routing_map import moe_token_permute_with_routing_map as tile

THRESHOLD = 620
DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}

# (id, cores C, tokens N, experts E, capacity, {cols: (key, block dim)})
#   e4-cap2, C 64: numOutTokens 8; last-dim sort 4 cores; SIMD needs 8 (8 mod 64); SIMT: y = 619 * 8 = 4952,
#       threads 2048 (4952 div 2048 = 2, not < 4 / 2), per core AlignUp(77, 2048) = 2048 -> 4952 div 2048 = 2 -> 4.
#   e2-cap40, C 64: numOutTokens 80; sort 2 cores; SIMD: 80 div 64 = 1 > 0 -> 64; SIMT: y = 49520, threads 2048,
#       per core AlignUp(773, 2048) = 2048 -> 24.
#   e2-cap40, C 40: SIMD: 80 div 40 = 2 -> 40; SIMT: per core AlignUp(1238, 2048) = 2048 -> 24.
CASES = [
    ("e4-cap2-c64", 64, 16, 4, 2, {619: (19, 4), 620: (9, 8), 621: (9, 8)}),
    ("e2-cap40-c64", 64, 64, 2, 40, {619: (19, 24), 620: (9, 64), 621: (9, 64)}),
    ("e2-cap40-c40", 40, 64, 2, 40, {619: (19, 24), 620: (9, 40), 621: (9, 40)}),
]


def _params():
    for case_id, cores, n, e, cap, by_cols in CASES:
        for cols in (THRESHOLD - 1, THRESHOLD, THRESHOLD + 1):
            for dname in DTYPES:
                for with_probs in (False, True):
                    key, block_dim = by_cols[cols]
                    yield pytest.param(cores, n, e, cap, cols, DTYPES[dname], with_probs, key, block_dim,
                                       id=f"{case_id}-cols{cols}-{dname}-{'probs' if with_probs else 'noprobs'}")


@pytest.mark.parametrize("cores,n,e,cap,cols,dtype,with_probs,key,block_dim", list(_params()))
def test_950_gather_simd_from_620_columns(cores, n, e, cap, cols, dtype, with_probs, key, block_dim):
    probs = D((n, e), dtype) if with_probs else None
    r = tile(D((n, cols), dtype), D((n, e), np.bool_), probs, e * cap, True, soc=get_soc("ascend950", aiv_num=cores))
    assert (r.tiling_key, r.block_dim) == (key, block_dim)
    assert r.workspace_size == block_dim * n * 16 + block_dim * 64 + 16 * 2 ** 20


@pytest.mark.parametrize("cols", (THRESHOLD - 1, THRESHOLD, THRESHOLD + 1))
def test_910b_pad_has_no_gather_choice(cols):
    """Off the 950 the l0 kernel does not gather the tokens (a GatherV2 step does): key 9 at any width, block
    dim = the last-dim sort's cores (E = 4 of 48)."""
    r = tile(D((16, cols), np.float16), D((16, 4), np.bool_), None, 8, True, soc="ascend910b")
    assert (r.tiling_key, r.block_dim) == (9, 4)
