"""Tiling of MoeTokenUnpermute (moe_token_unpermute_tiling.cpp, TilingCompute).

source: moe/moe_token_unpermute/op_host/moe_token_unpermute_tiling.cpp, moe_token_unpermute_tiling.h,
op_host/config/ascend910b/moe_token_unpermute_binary.json (the registered keys) @ 25fb6b92890d.

Inputs as the tiling reads them: R = permuted_tokens dim 0 (numOutTokens: gathers of rows >= R are
skipped), H = permuted_tokens dim 1, L = sorted_indices dim 0. With probs (N, K): tokens N = probs dim 0,
topK K = probs dim 1; without probs K = 1 and N = L. Then T-G (tiling.unpermute_gather) with the tokens'
and probs' byte sizes from the GetLengthByType table and the sorted indices' byte size.

tilingKey = dtype bits + prob bit + mix bits: +0 BF16 tokens, +2 FP16, +4 FP32; +1 with probs; when the
probs dtype differs from the tokens', +8 (BF16 probs), +16 (FP16), +24 (FP32). The twelve keys of
ascend910b / 910_93: 0, 1, 17, 25 (BF16 tokens), 2, 3, 11, 27 (FP16), 4, 5, 13, 21 (FP32).
Block dim = min(N, cores); workspace = GetLibApiWorkSpaceSize (16 MiB); paddedMode and restoreShape are
not read.

Checks (InputParamCheck, GRAPH_FAILED -> 561002 through the inner aclnn), in the real order: permuted
tokens not 2-D; probs not 2-D; L != probs dim 0 * dim 1; K > 512. (The 310P-only rules are not modelled:
no 310P profile exists here.)

Ascend 950 has no MoeTokenUnpermute kernel: its aclnn launches the l0 MoeFinalizeRoutingV2 (dropPadMode 2,
scales = probs; see ops.unpermute). On a 950 profile this function therefore returns that launch's tiling
(tiling.moe_finalize_routing_v2: arch35 keys, fields, UB plan), as `tiling.moe_token_permute` returns the
MoeInitRoutingV3 launch's. Its checks are the ones of that tiling the call can reach (expanded_x 2-D with
H > 0, scales 2-D with K > 0, expanded_row_idx 1-D with L // K > 0 rows and exactly rows * K entries, scales
(rows, K)); there is no topK limit. The aclnn reports those failures as 561103 (the l0 returns nullptr).
"""
from __future__ import annotations

from typing import NoReturn

from .common import TensorDesc, TilingResult, as_dtype, length_by_type, memoised_tiling, struct_fields, tdiv
from .moe_finalize_routing_v2 import moe_finalize_routing_v2
from .platform import get_soc
from .status import TilingError
from .unpermute_gather import GATHER_FIELDS, gather_tiling, gather_ub_plan

OP = "MoeTokenUnpermute"
L0_950 = "MoeFinalizeRoutingV2"
DROP_PAD_MODE_ROW = 2               # "read index by row": what the 950 aclnn passes MoeFinalizeRoutingV2

FIELDS = GATHER_FIELDS
"""MoeTokenUnpermuteTilingData: exactly the 12 fields of T-G, in declaration order."""

MAX_TOP_K = 512
PIPE = "pipe"                       # KernelMoeTokenUnpermute's member TPipe

TILINGKEY_PROBS = 1
TILINGKEY_FLOAT16 = 2
TILINGKEY_FLOAT = 4
TILINGKEY_MIX = {"bfloat16": 8, "float16": 16, "float32": 24}
_TOKEN_KEY = {"bfloat16": 0, "float16": TILINGKEY_FLOAT16, "float32": TILINGKEY_FLOAT}

KEYS_910B = (0, 1, 17, 25, 2, 3, 11, 27, 4, 5, 13, 21)
"""The kernel instantiations registered for ascend910b / ascend910_93 (facts §5.d)."""


def tiling_key(token_dtype, probs_dtype=None) -> int:
    """SetTilingKey: dtype bits of the tokens, the prob bit, and the mix bits when the probs' dtype differs."""
    t = as_dtype(token_dtype).name
    key = _TOKEN_KEY.get(t, 0)          # a dtype outside the three adds nothing, as the C++ if-chain
    if probs_dtype is not None:
        key += TILINGKEY_PROBS
        p = as_dtype(probs_dtype).name
        if p != t:
            key += TILINGKEY_MIX.get(p, 0)
    return key


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _fail_950(message: str) -> NoReturn:
    raise TilingError(f"{L0_950} tiling (Ascend 950): {message}")


def _input_param_check(p: TensorDesc, s: TensorDesc, pr: TensorDesc | None) -> None:
    """InputParamCheck of the A2/A3 tiling, in its order."""
    if p.ndim != 2:
        _fail(f"permuted_tokens must be 2-D (rows, hidden), got shape {p.shape}")
    if pr is not None:
        if pr.ndim != 2:
            _fail(f"probs must be 2-D (tokens, topK), got shape {pr.shape}")
        tokens, top_k = pr.dim(0), pr.dim(1)
        if s.dim(0) != tokens * top_k:
            _fail(f"sorted_indices has {s.dim(0)} entries but probs {pr.shape} needs tokens * topK = "
                  f"{tokens * top_k}: pass one index per (token, expert) slot")
        if top_k > MAX_TOP_K:
            _fail(f"topK = probs dim 1 = {top_k} exceeds {MAX_TOP_K}")


def _finalize_routing_check(p: TensorDesc, s: TensorDesc, pr: TensorDesc | None) -> None:
    """The arch35 MoeFinalizeRoutingV2 tiling's checks that MoeTokenUnpermute's call can reach (dropPadMode 2,
    k attr 1, no x1 / x2 / bias / expert_idx), in their order."""
    if p.ndim != 2:
        _fail_950(f"expanded_x (permuted_tokens) must be 2-D in dropless mode, got shape {p.shape}")
    if p.dim(1) <= 0:
        _fail_950(f"hidden size (permuted_tokens dim 1) must be greater than 0, got {p.dim(1)}")
    k = 1
    if pr is not None:
        if pr.ndim != 2:
            _fail_950(f"scales (probs) must be 2-D (tokens, topK), got shape {pr.shape}")
        k = pr.dim(1)
        if k <= 0:
            _fail_950(f"topK = probs dim 1 must be greater than 0, got {k}")
    if s.ndim != 1:
        _fail_950(f"expanded_row_idx (sorted_indices) must be 1-D, got shape {s.shape}")
    rows = tdiv(s.dim(0), k)
    if rows <= 0:
        _fail_950(f"sorted_indices has {s.dim(0)} entries: fewer than one token of topK {k}")
    if s.dim(0) != rows * k:
        _fail_950(f"sorted_indices must have tokens * topK = {rows} * {k} entries, got {s.dim(0)}")
    if pr is not None and pr.shape != (rows, k):
        _fail_950(f"probs must have shape (tokens, topK) = {(rows, k)} (len(sorted_indices) / topK tokens), "
                  f"got {pr.shape}")


def _finalize_routing_v2_launch(p: TensorDesc, s: TensorDesc, pr: TensorDesc | None, soc) -> TilingResult:
    """The tiling of the l0 MoeFinalizeRoutingV2 launch of the 950 aclnn, after the checks it can reach (their
    messages name MoeTokenUnpermute's arguments)."""
    _finalize_routing_check(p, s, pr)
    rows = pr.dim(0) if pr is not None else s.dim(0)
    return moe_finalize_routing_v2(p, s, scales=pr, drop_pad_mode=DROP_PAD_MODE_ROW,
                                   y_out=TensorDesc((rows, p.dim(1)), p.dtype), soc=soc)


@memoised_tiling
def moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None, *,
                        soc="ascend910b") -> TilingResult:
    """Host tiling of MoeTokenUnpermute for one chip profile.

    Args:
        permuted_tokens: (R, H) bf16 / fp16 / fp32 (anything with .shape and .dtype).
        sorted_indices: (N*K,) int32: the permuted row of every (token, slot).
        probs: (N, K) bf16 / fp16 / fp32, or None (then K = 1).
        padded_mode, restore_shape: attributes the tiling does not read.

    Returns the TilingResult (12 fields, key, block dim min(N, cores), 16 MiB workspace, kernel G's UB plan);
    on Ascend 950 the MoeFinalizeRoutingV2 launch's (see the module docstring).
    Raises TilingError where the real tiling fails (see the module docstring).
    """
    del padded_mode, restore_shape      # attributes of the OpDef that TilingCompute never reads
    soc = get_soc(soc)
    p, s, pr = TensorDesc.of(permuted_tokens), TensorDesc.of(sorted_indices), TensorDesc.of(probs)
    if p is None or s is None:
        _fail("permuted_tokens or sorted_indices is missing")
    if s.ndim == 0:
        _fail(f"sorted_indices must have a dim 0 (1-D, one index per slot), got shape {s.shape}")
    if soc.is_regbase:
        return _finalize_routing_v2_launch(p, s, pr, soc)
    _input_param_check(p, s, pr)

    rows, hidden, total = p.dim(0), p.dim(1), s.dim(0)
    if pr is not None:
        tokens, top_k = pr.dim(0), pr.dim(1)
        prob_bytes = length_by_type(pr.dtype)
    else:
        top_k = 1                            # TilingMoeTokenUnpermute passes topK -1: no probs means K = 1
        tokens = tdiv(total, top_k)
        prob_bytes = None
    tg = gather_tiling(ub_bytes=soc.ub_size_for_tiling, core_num=soc.aiv_num, token_bytes=length_by_type(p.dtype),
                       num_tokens=tokens, top_k=top_k, hidden=hidden, num_out_tokens=rows,
                       index_bytes=length_by_type(s.dtype), prob_bytes=prob_bytes)
    f = struct_fields(FIELDS)
    f.update(tg.fields)
    token_dt = as_dtype(p.dtype)
    plan = gather_ub_plan(f, token_bytes=token_dt.itemsize,
                          prob_bytes=None if pr is None else as_dtype(pr.dtype).itemsize,
                          tokens_fp32=token_dt.itemsize == 4, pipe=PIPE)
    return TilingResult(tiling_key=tiling_key(p.dtype, None if pr is None else pr.dtype), block_dim=tg.used_core_num,
                        workspace_size=soc.lib_api_workspace, fields=f, ub_plan=plan, soc=soc)
