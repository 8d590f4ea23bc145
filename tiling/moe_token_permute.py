"""Tiling of MoeTokenPermute (moe_token_permute_tiling.cpp, A2/A3), shared by V2 whose A2/A3 path is V1.

source: moe/moe_token_permute/op_host/moe_token_permute_tiling.cpp, moe_token_permute_tiling.h @ 25fb6b92890d.

The kernel sorts the flat expert ids twice (the second sort inverts the first permutation)
and then copies every token row to its topK destination rows. The tiling picks the sort
mode (one core / multi core), the index-copy mode (whole rows batched through UB, or one row
split into pieces: split-D) and whether numOutTokens drops rows:

    tilingKey = sortMode (1 | 2) + 2 * splitD + 4 * (numOutTokens != tokens * topK)

MoeTokenPermute has no Ascend 950 kernel: there aclnnMoeTokenPermuteV2 (and V1 with int8 tokens) launches
the l0 operator MoeInitRoutingV3, and V1 with fp16 / bf16 / fp32 tokens MoeInitRoutingV2. On a regbase
profile `moe_token_permute` therefore returns the tiling of the MoeInitRoutingV3 launch of the V2 chain
(`v3_chain_tiling`); `tiling.moe_init_routing_v2` gives V1's.
"""
from __future__ import annotations

import math
from typing import NoReturn

import ml_dtypes
import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import (
    BLOCK_BYTES,
    TensorDesc,
    TilingResult,
    align_up,
    ceil_div,
    memoised_tiling,
    struct_fields,
    tdiv,
    tmod,
)
from .moe_sort import (
    SORT_OUT_ONE_LOOP_MAX,
    VBS_FIELDS,
    checked_sort_loop_max_element,
    core_loop_elements,
    multi_core_index_num,
    multi_core_ub_plan,
    vbs_tiling,
    vms_middle_need_core_num,
)
from .platform import get_soc
from .status import TilingError

OP = "MoeTokenPermute"

INDEX_COPY_FIELDS = (
    "need_core_num", "front_core_num", "tail_core_num", "core_calc_num", "core_calc_tail", "one_token_btype_size",
    "once_indices_token_move_times", "once_ub_token_nums", "once_indices_token_nums", "once_indices",
    "one_token_last_move", "one_token_once_move", "one_token_move_times", "front_core_loop",
    "front_core_last_token_nums", "tail_core_loop", "tail_core_last_token_nums",
    "tail_last_once_indices_token_move_times", "tail_last_indices_last_token_nums",
    "front_last_once_indices_token_move_times", "front_last_indices_last_token_nums", "num_out_tokens",
    "token_ub", "indices_ub",
)
FIELDS = (("core_num", "n", "cols", "cols_align", "top_k")
          + tuple(f"vbs_{f}" for f in VBS_FIELDS) + ("vms_middle_need_core_num", "sort_out_one_loop_max_elements")
          + tuple(f"index_copy_{f}" for f in INDEX_COPY_FIELDS))

MAX_INDICES_NUM = 512
SORT_LIMIT_LENGTH = 16777215
BUFFER_NUM = 2
MAX_BLOCK_COUNT = 4095
DATA_MOVE_ALIGN = 512
INT32_DTYPE_SIZE = 4
ENABLE_NUMOUTTOKENS = 4
SPLIT_D_MODE = 2
LIB_API_WORKSPACE = 16 * 1024 * 1024

QUANT_NONE = -1
QUANT_MXFP8_E5M2 = 2
QUANT_MXFP8_E4M3FN = 3
QUANT_MXFP4_E2M1 = 9
INT64_MAX = 2 ** 63 - 1


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _check_shape(name: str, t: TensorDesc | None) -> None:
    """The tiling reads shapes as int64 gert::Shape dims: none may be negative, and the tensor's bytes (and
    those of one dim-0 row) must be countable in int64: a larger tensor cannot exist, and its cols and
    row-byte figures would wrap."""
    if t is None:
        _fail(f"{name} has no shape")
    if any(d < 0 for d in t.shape):
        _fail(f"{name} has a negative dim (shape {t.shape})")
    itemsize = np.dtype(t.dtype).itemsize
    row_bytes = math.prod(t.shape[1:]) * itemsize
    for what, nbytes in (("", math.prod(t.shape) * itemsize), (" per dim-0 row", row_bytes)):
        if nbytes > INT64_MAX:
            _fail(f"{name} of shape {t.shape} would hold {nbytes} bytes{what}, more than int64 can count")


def effective_num_out_tokens(num_out_tokens: int, total_length: int) -> int:
    """numOutTokens <= 0 counts from the end (0 keeps all); the result is clamped to [0, tokens * topK]."""
    m = num_out_tokens + total_length if num_out_tokens <= 0 else num_out_tokens
    return max(min(m, total_length), 0)


def mx_scale_cols(elems: int) -> int:
    """E8M0 slots for `elems` elements of a row: one per 32-element block, padded to an even count."""
    blocks = ceil_div(elems, 32)
    return blocks + blocks % 2


def _index_copy(f: dict, n: int, top_k: int, cols: int, token_bytes: int, ub: int, real_core_num: int) -> int:
    """Index-copy fields; returns the key increment (SPLIT_D_MODE or 0)."""
    front = tmod(n, real_core_num) if tmod(n, real_core_num) != 0 else real_core_num
    tail = 0 if n <= real_core_num else real_core_num - front
    calc_num = ceil_div(n, real_core_num)
    calc_tail = tdiv(n, real_core_num)
    ub_left = ub - MAX_INDICES_NUM * INT32_DTYPE_SIZE
    row_bytes = cols * token_bytes
    row_bytes_align = align_up(row_bytes, BLOCK_BYTES) if BLOCK_BYTES else row_bytes
    last_move = once_move = move_times = once_move_times = once_ub_tokens = 1
    key = 0
    if ub_left >= BUFFER_NUM * row_bytes_align:
        once_ub_tokens = min(tdiv(ub, row_bytes_align * BUFFER_NUM + top_k * BUFFER_NUM * INT32_DTYPE_SIZE),
                             MAX_BLOCK_COUNT)
        top_k_ub_left = ub - once_ub_tokens * row_bytes_align * BUFFER_NUM
        once_move_times = tdiv(top_k_ub_left, once_ub_tokens * top_k * INT32_DTYPE_SIZE)
        once_tokens = once_move_times * once_ub_tokens
        once_indices = once_tokens * top_k
        token_ub = once_ub_tokens * row_bytes_align
        indices_ub = align_up(once_indices * INT32_DTYPE_SIZE, BLOCK_BYTES)
    else:
        once_tokens = tdiv(MAX_INDICES_NUM, top_k)
        once_indices = once_tokens * top_k
        once_move = tdiv(tdiv(tdiv(ub_left, BUFFER_NUM), DATA_MOVE_ALIGN) * DATA_MOVE_ALIGN, token_bytes)
        if once_move < 0:
            # below the fixed indices buffer the real tiling computes a negative piece (and a negative
            # copyInQueue); a piece of 0 elements (the UB holds the indices but not two 512-byte blocks)
            # is its figure and stays
            _fail(f"UB of {ub} bytes leaves no room for one hidden piece after the fixed buffers "
                  f"({MAX_INDICES_NUM * INT32_DTYPE_SIZE} bytes of indices): a piece is whole "
                  f"{DATA_MOVE_ALIGN}-byte blocks of {token_bytes}-byte elements, double-buffered, so it needs "
                  f"{BUFFER_NUM * max(DATA_MOVE_ALIGN, align_up(token_bytes, DATA_MOVE_ALIGN))} bytes more")
        move_times = ceil_div(cols, once_move)
        last_move = cols - (move_times - 1) * once_move
        key = SPLIT_D_MODE
        token_ub = once_move * token_bytes
        indices_ub = MAX_INDICES_NUM * INT32_DTYPE_SIZE
    front_loop = ceil_div(calc_num, once_tokens)
    front_last = calc_num - (front_loop - 1) * once_tokens
    tail_loop = ceil_div(calc_tail, once_tokens)
    tail_last = calc_tail - (tail_loop - 1) * once_tokens
    tail_last_times = ceil_div(tail_last, once_ub_tokens)
    front_last_times = ceil_div(front_last, once_ub_tokens)
    values = dict(
        need_core_num=front + tail, front_core_num=front, tail_core_num=tail, core_calc_num=calc_num,
        core_calc_tail=calc_tail, one_token_btype_size=row_bytes, once_indices_token_move_times=once_move_times,
        once_ub_token_nums=once_ub_tokens, once_indices_token_nums=once_tokens, once_indices=once_indices,
        one_token_last_move=last_move, one_token_once_move=once_move, one_token_move_times=move_times,
        front_core_loop=front_loop, front_core_last_token_nums=front_last, tail_core_loop=tail_loop,
        tail_core_last_token_nums=tail_last, tail_last_once_indices_token_move_times=tail_last_times,
        tail_last_indices_last_token_nums=tail_last - (tail_last_times - 1) * once_ub_tokens,
        front_last_once_indices_token_move_times=front_last_times,
        front_last_indices_last_token_nums=front_last - (front_last_times - 1) * once_ub_tokens,
        token_ub=token_ub, indices_ub=indices_ub)
    for k, v in values.items():
        f[f"index_copy_{k}"] = v
    return key


def sort_ub_plan(pipe: str, f: dict, multi_core: bool, key_bytes: int, block_idx: int = 0) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeSortOneCore / MoeSortMultiCore for one sort, as core `block_idx` makes them.

    The one-core sort sizes its buffers from the whole key count on every core. The multi-core sort's
    Init sizes them from the core's own loop of keys, so the last VBS core may differ from the others;
    TilingResult.ub_plan holds core 0's rows and the kernel's PipePhase asks for each core's
    (ops/common/moe_sort.py). The keys' width does not change the sizes (int64 keys are copied as
    pairs of int32 into the same 8-byte-per-key in-queue)."""
    if not multi_core:
        tile = align_up(f["vbs_last_core_per_loop_elements"] * 4, 32) // 4     # Align(elements, sizeof(int32))
        sort_num = ceil_div(tile, 32) * 32
        index_bytes = sort_num * 4
        return (UbBuffer("sortDataCopyInQueue", index_bytes * 2, 1, "TQue", "VECIN", 1, pipe),
                UbBuffer("indexBuffer", index_bytes, pipe=pipe),
                UbBuffer("sortDataCopyOutQueue", index_bytes * 2, 1, "TQue", "VECOUT", 1, pipe),
                UbBuffer("sortedBuffer", index_bytes * 2, pipe=pipe))
    loop_elems = core_loop_elements(block_idx, f["vbs_need_core_num"], f["vbs_per_core_per_loop_elements"],
                                    f["vbs_last_core_per_loop_elements"])
    return multi_core_ub_plan(pipe, multi_core_index_num(loop_elems, f["sort_out_one_loop_max_elements"]))


def index_copy_ub_plan(f: dict, split_d: bool) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeindexCopyOp / MoeindexCopySpiltDOp."""
    token_ub, indices_ub = f["index_copy_token_ub"], f["index_copy_indices_ub"]
    indices_pos = "VECIN" if split_d else "VECOUT"
    name = "indicesQueue" if split_d else "indicesBuffer"
    pipe = "MoeindexCopyPipe"
    plan = (UbBuffer("copyInQueue", token_ub, 2, "TQueBind", "VECIN->VECOUT", 1, pipe),
            UbBuffer(name, indices_ub, 1, "TQue", indices_pos, 1, pipe))
    return plan


@memoised_tiling
def moe_token_permute(tokens, indices, num_out_tokens=0, padded_mode=False, quant_mode=QUANT_NONE, *,
                      soc="ascend910b", permute_tokens_out=None, sorted_indices_out=None) -> TilingResult:
    """Host tiling of MoeTokenPermute for one chip profile (the V1 rules; V2 on A2/A3 is V1). On ascend950
    (no MoeTokenPermute kernel there) the tiling of the MoeInitRoutingV3 launch of V2's chain: see
    `v3_chain_tiling`.

    tokens (N, ...) and indices (N, K) or (N,): anything with .shape and .dtype (or TensorDesc).
    The output descriptions default to the inferred shapes; give them to reproduce the tiling's
    output-shape checks. Raises TilingError exactly where the real tiling returns GRAPH_FAILED, and where
    a UB too small would make the real tiling go on with a sort loop of no keys or a negative split-D piece
    (or shapes no int64 tensor can have); a piece or batch of 0 that the real tiling computes stays.

    `ub_plan` lists the InitBuffer calls of core 0. With the multi-core sort the last VBS core sizes its two
    sort TPipes from its own loop of keys (sort_ub_plan(..., block_idx)); the launch lays out each core's.
    """
    soc = get_soc(soc)
    if soc.is_regbase:
        return v3_chain_tiling(tokens, indices, quant_mode, soc=soc)
    t, idx = TensorDesc.of(tokens), TensorDesc.of(indices)
    if padded_mode:
        _fail("padded_mode = true is not supported (only false)")
    _check_shape("tokens", t)
    _check_shape("indices", idx)
    if t.ndim < 1:
        _fail(f"tokens must have at least 1 dim (dim 0 is the token count), but got shape {t.shape}")
    cols = math.prod(t.shape[1:])
    if idx.ndim not in (1, 2):
        _fail(f"the dim number of indices should be 2 or 1, but got {idx.ndim} (shape {idx.shape})")
    if t.dim(0) != idx.dim(0):
        _fail(f"tokens dim 0 ({t.dim(0)}) must equal indices dim 0 ({idx.dim(0)})")
    token_bytes = np.dtype(t.dtype).itemsize
    n = idx.dim(0)
    top_k = 1 if idx.ndim == 1 else idx.dim(1)
    if top_k > MAX_INDICES_NUM:
        _fail(f"indices dim 1 (topK = {top_k}) must not exceed {MAX_INDICES_NUM}")
    total = n * top_k
    if total >= SORT_LIMIT_LENGTH:
        _fail(f"indices has {total} elements; it must have fewer than {SORT_LIMIT_LENGTH}")
    m = effective_num_out_tokens(int(num_out_tokens), total)
    out_t = TensorDesc.of(permute_tokens_out) or TensorDesc((m, *t.shape[1:]), t.dtype)
    out_s = TensorDesc.of(sorted_indices_out) or TensorDesc((total,), np.int32)
    _check_shape("permute_tokens_out", out_t)
    _check_shape("sorted_indices_out", out_s)
    if out_t.ndim < 2:
        _fail(f"the dim number of output permute_tokens should be greater than 1, but got {out_t.ndim}")
    if out_s.ndim != 1:
        _fail(f"output sorted_indices should be 1-D, but got shape {out_s.shape}")
    if out_s.dim(0) != total:
        _fail(f"the size of output sorted_indices should be {total}, but got {out_s.dim(0)}")
    out_cols = math.prod(out_t.shape[1:])
    if out_cols != cols:
        _fail(f"the hidden size of output permute_tokens should be {cols}, but got {out_cols}")
    if out_t.dim(0) != m:
        _fail(f"dim 0 of output permute_tokens should be numOutTokens = {m}, but got {out_t.dim(0)}")

    aiv_num = 1 if idx.size <= 32 else soc.aiv_num
    ub = tdiv(soc.ub_size_for_tiling, BLOCK_BYTES) * BLOCK_BYTES
    f = struct_fields(FIELDS)
    f.update(core_num=aiv_num, n=n, cols=cols, top_k=top_k,
             cols_align=ceil_div(cols, tdiv(BLOCK_BYTES, token_bytes)) * tdiv(BLOCK_BYTES, token_bytes))
    mode, vbs = vbs_tiling(total, checked_sort_loop_max_element(OP, ub, aiv_num, total), aiv_num)
    f.update({f"vbs_{k}": v for k, v in vbs.items()})
    f["vms_middle_need_core_num"] = vms_middle_need_core_num(vbs["need_core_num"])
    f["sort_out_one_loop_max_elements"] = SORT_OUT_ONE_LOOP_MAX
    key = mode + (ENABLE_NUMOUTTOKENS if m != total else 0)
    f["index_copy_num_out_tokens"] = m
    split = _index_copy(f, n, top_k, cols, token_bytes, ub, soc.aiv_num)
    key += split
    block_dim = max(aiv_num, f["index_copy_need_core_num"])
    workspace = 4 * total * 2 * 3 + aiv_num * 32 * 2 + LIB_API_WORKSPACE
    multi = mode == 2
    key_bytes = np.dtype(idx.dtype).itemsize
    plan = (sort_ub_plan("sortPipe", f, multi, key_bytes) + sort_ub_plan("sortPipe2", f, multi, 4)
            + index_copy_ub_plan(f, bool(split)))
    return TilingResult(tiling_key=key, block_dim=block_dim, workspace_size=workspace, fields=f, ub_plan=plan,
                        schedule_mode=1, soc=soc)


V3_EXPERT_NUM = 10240     # the aclnn's EXPERT_NUM: MoeInitRoutingV3 keeps expert ids in [0, 10240)


def v3_chain_tiling(tokens, indices, quant_mode=QUANT_NONE, *, soc="ascend950") -> TilingResult:
    """The tiling of l0op::MoeInitRoutingV3 as aclnnMoeTokenPermuteV2 launches it on Ascend 950: int32 ids
    viewed as (N, K) (1-D indices as (N, 1)), activeNum = N * K, capacity 0, expertNum 10240, no drop / pad,
    count-type expert tokens on, activeExpertRange [0, 10240), gather-type row index, outputs of N * K rows
    (the MX codes / E8M0 scales in the shapes of ops.permute.allocate_outputs)."""
    from .moe_init_routing_v3 import moe_init_routing_v3
    t, idx = TensorDesc.of(tokens), TensorDesc.of(indices)
    shape = (idx.dim(0), 1) if idx.ndim == 1 else idx.shape
    total = math.prod(shape)
    hidden = t.dim(1) if t.ndim == 2 else 0
    if quant_mode == QUANT_MXFP4_E2M1:
        x_out, scale = TensorDesc((total, hidden // 2), np.uint8), TensorDesc((total, ceil_div(hidden, 64), 2),
                                                                             ml_dtypes.float8_e8m0fnu)
    elif quant_mode in (QUANT_MXFP8_E5M2, QUANT_MXFP8_E4M3FN):
        elem = ml_dtypes.float8_e5m2 if quant_mode == QUANT_MXFP8_E5M2 else ml_dtypes.float8_e4m3fn
        x_out, scale = TensorDesc((total, hidden), elem), TensorDesc((total, mx_scale_cols(hidden)),
                                                                              ml_dtypes.float8_e8m0fnu)
    else:
        x_out, scale = TensorDesc((total,) + tuple(t.shape[1:]), t.dtype), TensorDesc((total,), np.float32)
    return moe_init_routing_v3(
        t, TensorDesc(shape, np.int32), active_num=total, expert_capacity=0, expert_num=V3_EXPERT_NUM,
        drop_pad_mode=0, expert_tokens_num_type=1, expert_tokens_num_flag=True, quant_mode=quant_mode,
        active_expert_range=(0, V3_EXPERT_NUM), row_idx_type=0, expanded_x_out=x_out,
        expanded_row_idx_out=TensorDesc((total,), np.int32),
        expert_tokens_count_or_cumsum_out=TensorDesc((V3_EXPERT_NUM,), np.int64), expanded_scale_out=scale,
        soc=soc)
