"""Tiling of MoeTokenPermuteWithRoutingMap.

source: moe/moe_token_permute_with_routing_map/op_host/moe_token_permute_with_routing_map_tiling.cpp,
moe_token_permute_with_routing_map_tiling.h @ 25fb6b92890d.

The l0 kernel sees the routing map and probs transposed by the aclnn to (experts, tokens); this function
takes them as the caller passes them to the aclnn, (tokens, experts), and reads the transposed shape
from them (so the UT "multi_core" with an (E, N) = (3, 3) map is a (3, 3) map here too).

Non-pad (drop_and_pad false): topK = numOutTokens div N, totalLength = N * topK. The struct carries a
masked-select tiling over the E x N map, a sort tiling for sort #2 over totalLength int32 keys (one core
-> key 1, multi core -> key 2) and the MoeTokenPermute index-copy tiling with K = topK (split-D adds 2).
Pad (drop_and_pad true): key 9, a per-expert "last-dim" sort tiling (one task = one expert row of N
elements); on ascend950 also the gather tilings of the in-kernel GatherV2 (key 19 = SIMT gather). The 950
pad UB plan: the sort, the SIMD gather's two buffers (key 9) and the SIMT data cache (gather_arch35_ub_plan).

Block dim = the member aivNum: the largest need of the steps (it starts at 0, so the sort loop length
is computed with no per-core reservation). Workspace: see `workspace_bytes`.
"""
from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import BLOCK_BYTES, TensorDesc, TilingResult, struct_fields, tdiv
from .masked_select import MS_FIELDS, masked_select_tiling, masked_select_ub_plan
from .moe_sort import (
    SORT_OUT_ONE_LOOP_MAX,
    VBS_FIELDS,
    checked_sort_loop_max_element,
    vbs_tiling,
    vms_middle_need_core_num,
)
from .moe_sort_last_dim import last_dim_sort_tiling, last_dim_sort_ub_plan, permute_prob_ub_plan
from .moe_token_permute import INDEX_COPY_FIELDS, _index_copy, index_copy_ub_plan, sort_ub_plan
from .platform import get_soc
from .status import TilingError

OP = "MoeTokenPermuteWithRoutingMap"

VBS_RM_FIELDS = VBS_FIELDS + ("frontcore_task", "tailcore_task", "front_core_num", "tail_core_num")
"""PermuteVBSComputeRMTilingData: the V1 VBS fields plus the last-dim (pad) sort's task split."""

FIELDS = (("core_num", "n", "cols", "cols_align", "top_k", "expert_num", "capacity", "has_prob")
          + tuple(f"vbs_{f}" for f in VBS_RM_FIELDS) + ("vms_middle_need_core_num", "sort_out_one_loop_max_elements")
          + tuple(f"index_copy_{f}" for f in INDEX_COPY_FIELDS) + tuple(f"ms_{f}" for f in MS_FIELDS))
"""MoeTokenPermuteWithRoutingMapTilingData in struct order (70 int64 values)."""

MAX_INDICES_NUM = 512
SORT_LIMIT_LENGTH = 16777215
PAD_KEY = 9
SIMT_KEY = 10
SIMT_UB_SIZE_BYTE = 40960          # taken off the UB on ascend950 for the SIMT gather
SIMD_B32_THRES = 620               # cols from which the 950 token gather is SIMD (key 9) rather than SIMT (19)
INDICES_SIZE = 8192                # bytes of UB the SIMD gather keeps for indices
MAX_THREAD_NUM = 2048
SMALL_CASE_THREAD_NUM = 128
LIB_API_WORKSPACE = 16 * 1024 * 1024
CORE_SYNC_BYTES_PER_CORE = 32 * 2
INT64_MAX = 2 ** 63 - 1

# masked select value sizes: the op's own table (1-byte types count 1, not 0)
_MS_ELEM_BYTES = {8: 8, 4: 4, 2: 2, 1: 1}

# rank / scatter constants of the non-aligned path (moe_routing_rank_multi_core.h, moe_common.h)
RANK_MAX_TOKEN_TILE_LENGTH = 4096
ASSIST_NUM = 256
ASSIST_INDEX_NUM = 32
SCATTER_UB_SIZE = 192 * 1024
SCATTER_PER_LOOP_ALIGN = 512


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def l0_num_out_tokens(num_out_tokens: int, num_tokens: int, num_experts: int, drop_and_pad: bool) -> int:
    """numOutTokens as the l0 operator passes it on (op_api/moe_token_permute_with_routing_map.cpp): rounded
    toward zero to a multiple of the experts (dropAndPad) or of the tokens, a 0 count counting as 1. It is also
    the row count of the l0's outputs, which the aclnn requires of the caller's (AlignDown of §7.c)."""
    align = (num_experts if drop_and_pad else num_tokens) or 1
    return tdiv(num_out_tokens, align) * align


def c_ceil(a: int, b: int) -> int:
    """GetCeilInt: (a + b - 1) / b truncated toward zero (C++), 0 for b == 0; negative a stays C-like."""
    return 0 if b == 0 else int((a + b - 1) / b) if (a + b - 1) < 0 else (a + b - 1) // b


def _align_elems(n: int, nbytes: int) -> int:
    """moe_common.h Align: n rounded up so that n * nbytes is a whole number of 32-byte blocks."""
    return 0 if nbytes == 0 else (n * nbytes + 31) // 32 * 32 // nbytes


def non_aligned_layout(ms_need_core_num: int, n: int, e: int) -> tuple[int, int, int]:
    """int32 offsets in the user workspace of the non-aligned path: (partial counts, sortPosition, value stream).

    [0, msNeed): the masked select's per-core counts; then msNeed x N rank partial sums; then the E x N
    sortPosition matrix; then the value stream (one int32 per selected slot)."""
    partial = _align_elems(ms_need_core_num, 4)
    sort_position = partial + ms_need_core_num * n
    return partial, sort_position, sort_position + e * n


def _check_shape(name: str, t: TensorDesc) -> None:
    if any(d < 0 for d in t.shape):
        _fail(f"{name} has a negative dim (shape {t.shape})")
    nbytes = math.prod(t.shape) * np.dtype(t.dtype).itemsize
    if nbytes > INT64_MAX:
        _fail(f"{name} of shape {t.shape} would hold {nbytes} bytes, more than int64 can count")


def _vbs_last_dim(f: dict, n: int, e: int, loop_max: int, real_core_num: int) -> int:
    """Tinlig4VBSMultiCoreComputeLastdim (tiling.moe_sort_last_dim): one task per expert row; fills the vbs_
    fields and returns its core count (the new aivNum). Quirk kept: lastCoreElements = N - (needCore - 1) * N."""
    lds = last_dim_sort_tiling(num_tokens=n, num_experts=e, sort_loop_max=loop_max, core_num=real_core_num)
    f.update({f"vbs_{k}": v for k, v in lds.vbs.items()})
    return lds.block_dim


def _gather_simt(f: dict, is_prob: bool, y_size: int, aiv_num: int, real_core_num: int) -> int:
    """Tiling4GatherComputeSimt (ascend950): thread count and element split of the SIMT gather of probs
    (is_prob) or tokens; returns the new aivNum."""
    threads = MAX_THREAD_NUM
    while threads >= 2 * SMALL_CASE_THREAD_NUM and tdiv(y_size, threads) < tdiv(aiv_num, 2):
        threads //= 2
    need = 1
    per_core = tdiv(y_size, real_core_num)
    if y_size < threads:
        first, last = y_size, y_size
    else:
        per_core = (per_core + threads - 1) // threads * threads
        need = tdiv(y_size, per_core)
        first, last = per_core, y_size - per_core * (need - 1)
    if is_prob:
        f.update(index_copy_once_indices=threads, index_copy_front_core_num=need, index_copy_front_core_loop=first,
                 index_copy_tail_core_loop=last)
    else:
        f.update(index_copy_once_indices_token_nums=threads, index_copy_once_ub_token_nums=f["cols"],
                 index_copy_need_core_num=need, index_copy_core_calc_num=first, index_copy_tail_core_num=last)
    return max(aiv_num, need)


def _gather_simd(f: dict, num_out_tokens: int, token_bytes: int, ub: int, aiv_num: int, real_core_num: int) -> int:
    """Tiling4GatherCompute (ascend950 SIMD token gather); returns the new aivNum."""
    cols = f["cols"]
    row_bytes = cols * token_bytes
    improve = token_bytes
    for width in (8, 4, 2):
        if token_bytes < width and row_bytes % width == 0:
            improve = width
            break
    block_factor = tdiv(num_out_tokens, real_core_num)
    tail = num_out_tokens - block_factor * real_core_num
    need = real_core_num if block_factor > 0 else tail
    f.update(index_copy_need_core_num=need, index_copy_once_indices=INDICES_SIZE // 4,
             index_copy_one_token_btype_size=improve, index_copy_num_out_tokens=num_out_tokens,
             index_copy_once_ub_token_nums=tdiv(cols, tdiv(improve, token_bytes)),
             index_copy_core_calc_num=block_factor,
             index_copy_tail_core_num=tail,
             index_copy_token_ub=tdiv(tdiv(tdiv(ub - INDICES_SIZE, 32) * 32, improve), 2))
    return max(aiv_num, need)


def workspace_bytes(f: dict, drop_and_pad: bool, aiv_num: int, total_length: int) -> int:
    """GetWorkspaceSize. Non-pad: max(sort ping-pong totalLength*16, the non-aligned scatter layout) +
    coreNum * 64 + 16 MiB (coreNum = the struct's coreNum). Pad: aivNum * totalLength * 16 + aivNum * 64 + 16 MiB."""
    if drop_and_pad:
        return aiv_num * total_length * 16 + aiv_num * CORE_SYNC_BYTES_PER_CORE + LIB_API_WORKSPACE
    _, _, value_stream = non_aligned_layout(f["ms_need_core_num"], f["n"], f["expert_num"])
    sort_bytes = max(total_length * 16, (value_stream + total_length) * 4)
    return sort_bytes + f["core_num"] * CORE_SYNC_BYTES_PER_CORE + LIB_API_WORKSPACE


# --- UB plans of the simulated kernel ------------------------------------------------------------------------
def rank_tile_length(f: dict) -> int:
    """MoeRoutingRankMultiCore::Init tokenTileLength: the masked select's tile, at most 4096 and N, at least 1."""
    tile = f["ms_formertile_length"]
    if tile <= 0 or tile > RANK_MAX_TOKEN_TILE_LENGTH:
        tile = RANK_MAX_TOKEN_TILE_LENGTH
    tile = min(tile, f["n"])
    return max(tile, 1)


def rank_ub_plan(f: dict, pipe: str = "rankPipe") -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeRoutingRankMultiCore (calcLength = AlignUp(tile, 8) elements)."""
    calc = _align_elems(rank_tile_length(f), 4)
    return (UbBuffer("inQueueMask", calc, 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("inQueueInt32", calc * 4, 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("outQueueInt32", calc * 4, 1, "TQue", "VECOUT", 1, pipe),
            UbBuffer("partialBuf", calc * 4, pipe=pipe),
            UbBuffer("maskWorkBuf", calc * 4, pipe=pipe),
            UbBuffer("maskFloatBuf", calc * 4, pipe=pipe),
            UbBuffer("maskCastHalfBuf", calc * 2, pipe=pipe),
            UbBuffer("tokenBaseBuf", calc * 4, pipe=pipe))


def scatter_per_loop_max_rows() -> int:
    """CalcScatterPerLoopMaxRows: value-stream rows one scatter loop takes (a fixed 1024)."""
    rows = (SCATTER_UB_SIZE - ASSIST_NUM * 4 - SCATTER_PER_LOOP_ALIGN * 4) // (32 * 2) // 2
    return rows // SCATTER_PER_LOOP_ALIGN * SCATTER_PER_LOOP_ALIGN


def scatter_per_loop_rows(count: int, block_dim: int) -> int:
    """perLoopRows of MoeSortIndicesScatterMultiCore::Init for `count` value-stream rows over block_dim cores:
    min(the core's share (whole multiples of 256), 1024), at least 1."""
    if count <= 0:
        return 1
    per_core = c_ceil(c_ceil(count, block_dim), ASSIST_NUM) * ASSIST_NUM
    return max(min(per_core, scatter_per_loop_max_rows()), 1)


def scatter_ub_plan(per_loop_rows: int, pipe: str = "scatterPipe") -> tuple[UbBuffer, ...]:
    return (UbBuffer("copyInQueue", per_loop_rows * 32, 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("copyOutQueue", c_ceil(per_loop_rows, ASSIST_INDEX_NUM) * ASSIST_INDEX_NUM * 32, 1, "TQue",
                     "VECOUT", 1, pipe),
            UbBuffer("assistBuffer", ASSIST_NUM * 4, pipe=pipe))


GATHER_PIPE = "MoeindexCopyPipe"       # the TPipe GATHER_IMPL builds for Gatherv2SimdTwoDim
SIMT_PIPE = "SIMT"                     # not a TPipe: the data cache the SIMT calls take off the top of the UB
SIMD_GATHER_BUFFER_NUM = 2             # BUFFER_NUM_SIMD_TWO_DIM


def gather_arch35_ub_plan(f: dict, simd: bool) -> tuple[UbBuffer, ...]:
    """UB of the ascend950 pad kernel after its sort: Gatherv2SimdTwoDim::Init's two InitBuffer calls when the
    token gather is SIMD (key 9): inQueue (TQueBind VECIN->VECOUT, 2 x tokenUB * oneTokenBtypeSize bytes) and
    indexBuf (onceIndices int32); the SIMT gathers (probs always, tokens under key 19) build no TPipe. The last
    row is the SIMT data cache (SIMT_UB_SIZE_BYTE), which SetLocalMemorySize keeps away from every TPipe."""
    plan: tuple[UbBuffer, ...] = ()
    if simd:
        g = "index_copy_"
        plan = (UbBuffer("inQueue", f[g + "token_ub"] * f[g + "one_token_btype_size"], SIMD_GATHER_BUFFER_NUM,
                         "TQueBind", "VECIN->VECOUT", SIMD_GATHER_BUFFER_NUM, GATHER_PIPE),
                UbBuffer("indexBuf", f[g + "once_indices"] * 4, pipe=GATHER_PIPE))
    return plan + (UbBuffer("simtDataCache", SIMT_UB_SIZE_BYTE, pipe=SIMT_PIPE),)


def _ub_plan(f: dict, key: int, ms_elem_bytes: int, has_prob: bool, block_dim: int) -> tuple[UbBuffer, ...]:
    """Non-pad keys: every TPipe of both branch arms (the scatter sized for actualOutTokens = N * topK, its
    upper bound; the real Init sizes it from the run-time count)."""
    multi = key in (2, 4)
    split = key in (3, 4)
    plan = masked_select_ub_plan({k[3:]: f[k] for k in f if k.startswith("ms_")}, elem_bytes=ms_elem_bytes,
                                 with_values=has_prob, with_indices=True, pipe="sortPipe")
    plan += sort_ub_plan("sortPipe2", f, multi, 4)
    plan += index_copy_ub_plan(f, split)
    plan += rank_ub_plan(f)
    plan += scatter_ub_plan(scatter_per_loop_rows(f["n"] * f["top_k"], block_dim))
    return plan


def moe_token_permute_with_routing_map(tokens, routing_map, probs=None, num_out_tokens=0, drop_and_pad=False, *,
                                       soc="ascend910b", permute_tokens_out=None, permute_probs_out=None,
                                       sorted_indices_out=None) -> TilingResult:
    """Host tiling of MoeTokenPermuteWithRoutingMap for one chip profile.

    tokens (N, H), routing_map (N, E) and probs (N, E) or None as given to the aclnn (anything with .shape and
    .dtype); the kernel's view is the transposed (E, N). Output descriptions default to the shapes the l0 op
    allocates: permute_tokens (outTokens, H) ((0, 0) in pad mode off ascend950), the probs output (outTokens,)
    ((0,) without probs) and sorted_indices (outTokens,).

    num_out_tokens is the aclnn's attribute: the l0 operator rounds it (l0_num_out_tokens) before the tiling
    reads it, so topK in pad mode is AlignDown(numOutTokens, E) div N, not numOutTokens div N.

    Raises TilingError where the real tiling returns GRAPH_FAILED (the aclnn reports that launch failure as
    561002): routing map not 1-/2-D in the kernel's view, token counts differ, N <= 0, topK > 512 without
    padding, totalLength >= 16777215, output shape checks; and where a UB too small would leave the sort no
    loop.
    """
    soc = get_soc(soc)
    t, rm = TensorDesc.of(tokens), TensorDesc.of(routing_map)
    p = TensorDesc.of(probs)
    drop_and_pad = bool(drop_and_pad)
    num_out_tokens = int(num_out_tokens)
    for name, d in (("tokens", t), ("routing_map", rm)) + ((("probs", p),) if p is not None else ()):
        _check_shape(name, d)
    if rm.ndim != 2:
        _fail(f"the dim number of the (transposed) routing map should be 2 or 1, but the aclnn's (tokens, experts) "
              f"map has shape {rm.shape}")
    if t.ndim < 1:
        _fail(f"tokens must have at least 1 dim, got shape {t.shape}")
    e, map_tokens = rm.dim(1), rm.dim(0)          # the kernel's routingMap^T is (E, N)
    if t.dim(0) != map_tokens:
        _fail(f"tokens dim 0 ({t.dim(0)}) should equal the routing map's token count ({map_tokens})")
    n = t.dim(0)
    num_out_tokens = l0_num_out_tokens(num_out_tokens, n, e, drop_and_pad)
    cols = math.prod(t.shape[1:])
    token_bytes = np.dtype(t.dtype).itemsize
    if n <= 0:
        _fail(f"the token count must be > 0, got {n}")
    top_k = tdiv(num_out_tokens, n)
    if not drop_and_pad and top_k > MAX_INDICES_NUM:
        _fail(f"numOutTokens / tokens = {top_k} (topK) must not exceed {MAX_INDICES_NUM}")
    total = n * top_k
    capacity = 0
    if drop_and_pad:
        capacity = tdiv(num_out_tokens, e)
        total = n
        out_tokens = e * capacity
    else:
        out_tokens = total
    if total >= SORT_LIMIT_LENGTH:
        _fail(f"{total} elements to sort; must be fewer than {SORT_LIMIT_LENGTH}")
    regbase = soc.is_regbase
    # the l0 allocates permute_tokens (rows, H) without drop-and-pad (also when rows is 0) and on ascend950,
    # else (0, 0): GatherV2 fills the caller's tensor
    gathers_in_kernel = not drop_and_pad or regbase
    default_rows = out_tokens if gathers_in_kernel else 0
    out_t = TensorDesc.of(permute_tokens_out) or TensorDesc((default_rows, cols if gathers_in_kernel else 0), t.dtype)
    out_p = TensorDesc.of(permute_probs_out) or TensorDesc((out_tokens if p is not None else 0,),
                                                           p.dtype if p is not None else t.dtype)
    out_s = TensorDesc.of(sorted_indices_out) or TensorDesc((out_tokens,), np.int32)
    for name, d in (("permute_tokens_out", out_t), ("permute_probs_out", out_p), ("sorted_indices_out", out_s)):
        _check_shape(name, d)
    if out_t.ndim < 2:
        _fail(f"the dim number of output permute_tokens should be greater than 1, but got {out_t.ndim}")
    if out_p.ndim != 1:
        _fail(f"output 1 (permute_probs, named sort_indices in the real log) should be 1-D, got shape {out_p.shape}")
    if not drop_and_pad:
        out_cols = math.prod(out_t.shape[1:])
        if out_cols != cols:
            _fail(f"the hidden size of output permute_tokens should be {cols}, but got {out_cols}")
        if out_t.dim(0) != out_tokens:
            _fail(f"dim 0 of output permute_tokens should be {out_tokens} (tokens * topK), but got {out_t.dim(0)}")

    real_core = soc.aiv_num
    local_aiv = 1 if rm.size <= 32 else real_core
    ub = tdiv(soc.ub_size_for_tiling, BLOCK_BYTES) * BLOCK_BYTES
    has_prob = p is not None
    f = struct_fields(FIELDS)
    f.update(core_num=local_aiv, n=n, cols=cols, top_k=top_k, expert_num=e, capacity=capacity,
             has_prob=int(has_prob), cols_align=c_ceil(cols, tdiv(BLOCK_BYTES, token_bytes))
             * tdiv(BLOCK_BYTES, token_bytes))
    aiv = 0                                        # the member aivNum starts at 0
    simd = False
    if regbase:
        simd = cols >= SIMD_B32_THRES and out_tokens >= tdiv(aiv, 2)
        ub -= SIMT_UB_SIZE_BYTE
    loop_max = checked_sort_loop_max_element(OP, ub, aiv, total)
    f["sort_out_one_loop_max_elements"] = SORT_OUT_ONE_LOOP_MAX
    ms_elem = _MS_ELEM_BYTES.get(np.dtype(p.dtype).itemsize, 2) if has_prob else 2
    if not drop_and_pad:
        ms = masked_select_tiling(ub_bytes=ub, core_num=real_core, num_tokens=n, num_experts=e, elem_bytes=ms_elem)
        f.update({f"ms_{k}": v for k, v in ms.items()})
        aiv = max(aiv, ms["need_core_num"])
        mode, vbs = vbs_tiling(total, loop_max, real_core)
        f.update({f"vbs_{k}": v for k, v in vbs.items()})
        if mode == 2:
            aiv = max(aiv, vbs["need_core_num"])
        f["vms_middle_need_core_num"] = vms_middle_need_core_num(vbs["need_core_num"])
        f["index_copy_num_out_tokens"] = out_tokens
        key = mode + _index_copy(f, n, top_k, cols, token_bytes, ub, real_core)
        aiv = max(aiv, f["index_copy_need_core_num"])
        plan = _ub_plan(f, key, ms_elem, has_prob, aiv)
    else:
        key = PAD_KEY
        aiv = _vbs_last_dim(f, n, e, loop_max, real_core)
        if regbase:
            aiv = _gather_simt(f, True, out_tokens, aiv, real_core)
            if simd:
                aiv = _gather_simd(f, out_tokens, token_bytes, ub, aiv, real_core)
            else:
                key += SIMT_KEY
                aiv = _gather_simt(f, False, cols * out_tokens, aiv, real_core)
        plan = last_dim_sort_ub_plan("sortPipe2", f["vbs_per_core_per_loop_elements"])
        if regbase:
            plan += gather_arch35_ub_plan(f, simd)
        elif has_prob:
            plan += permute_prob_ub_plan("sortPipe", np.dtype(p.dtype).itemsize)
    workspace = workspace_bytes(f, drop_and_pad, aiv, total)
    return TilingResult(tiling_key=key, block_dim=aiv, workspace_size=workspace, fields=f, ub_plan=plan,
                        schedule_mode=1, soc=soc)
