"""Tiling of MoeTokenUnpermuteWithRoutingMap (moe_token_unpermute_with_routing_map_tiling.cpp).

source: moe/moe_token_unpermute_with_routing_map/op_host/moe_token_unpermute_with_routing_map_tiling.cpp,
moe_token_unpermute_with_routing_map_tiling.h @ 25fb6b92890d.

Two branches, chosen by paddedMode:

* not padded (keys 0 / 1): T-G, the gather-and-reduce tiling shared with MoeTokenUnpermute
  (tiling.unpermute_gather), with this op's inputs: R = rows of permuted_tokens (numOutTokens),
  L = len(sorted_indices); with probs topK = R / probs.dim0 and tokensNum = probs.dim0, without
  probs topK = R / restore_shape[0] and tokensNum = L / topK. Then the masked-select tiling
  (tiling.masked_select) over the token-major probs (tokensNum x probs.dim1; 1 x 0-byte values
  without probs), computed for key 0 too although that kernel never runs it. Key 1 = probs given.
  blockDim = max(T-G cores, masked-select cores); workspace 2 x 16 MiB; SetScheduleMode(1) with probs.
* padded (key 1000, the aclnn launches it only with probs): the per-slot prob gather. capacity =
  L / probs.dim1; the E * capacity slots are split "front/tail" over all cores; every loop of a core
  may hold UB / dtype_bytes probs (4 bytes for FP32 probs, else 2). Only the 14 pad fields are set;
  workspace 16 MiB. No checks: capacity > tokens only warns.

The struct is MoeTokenUnpermuteWithRoutingMapTilingData: 13 int64 fields, then the nested
MaskedSelectMTUTilingData (12) and MoeTokenUnpermuteWithRoutingMapPadTilingData (14), flattened
here in that order. Where the C++ would divide by zero (no tokens, no experts, restore_shape[0] = 0)
the real host process faults; this tiling raises TilingError instead.
"""
from __future__ import annotations

from typing import NoReturn

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, as_dtype, length_by_type, struct_fields, tdiv
from .masked_select import MS_FIELDS, masked_select_tiling, masked_select_ub_plan
from .platform import get_soc
from .status import TilingError
from .unpermute_gather import GATHER_FIELDS, gather_tiling, gather_ub_plan

OP = "MoeTokenUnpermuteWithRoutingMap"

MAIN_FIELDS = GATHER_FIELDS[:-1] + ("used_core_num", "buffer_num")
"""MoeTokenUnpermuteWithRoutingMapTilingData's own fields: T-G's twelve with used_core_num before buffer_num."""

PAD_FIELDS = (
    "core_num_use", "num_tokens", "num_experts", "capacity",
    "front_core", "loop_time_each_front_core", "num_tokens_each_front_core",
    "num_tokens_front_core_each_loop", "num_tokens_front_core_last_loop",
    "tail_core", "loop_time_each_tail_core", "num_tokens_each_tail_core",
    "num_tokens_tail_core_each_loop", "num_tokens_tail_core_last_loop",
)
"""MoeTokenUnpermuteWithRoutingMapPadTilingData, in declaration order."""

FIELDS = MAIN_FIELDS + MS_FIELDS + PAD_FIELDS

KEY_NO_PROBS = 0
KEY_PROBS = 1
KEY_PAD = 1000
MAX_TOP_K = 512
NOT_PAD_WORKSPACE_BYTES = 2 * 16 * 1024 * 1024
PAD_WORKSPACE_BYTES = 16 * 1024 * 1024
MS_PIPE = "sortPipe"       # the TPipe GENERAL_OP_IMPL builds for the masked select
GATHER_PIPE = "pipe"       # kernel G's member TPipe
PAD_PIPE = "padPipe"       # KernelMoeTokenUnpermuteWithRoutingMapPad's member TPipe (also `pipe` in C++; renamed
                           # here because its one buffer differs from kernel G's)
PAD_QUEUE = "unpermutedTokensOutQue"


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


# --- pad branch (InitSplitInfoPad) ------------------------------------------------------------------------
def _ceil_int(a: int, b: int) -> int:
    """GetCeilInt: 0 for a zero divisor."""
    return 0 if b == 0 else (a + b - 1) // b


def _div(a: int, b: int) -> int:
    """GetDiv: 0 for a zero divisor."""
    return 0 if b == 0 else a // b


def _div_rem(a: int, b: int) -> int:
    """GetDivRem: the dividend itself for a zero divisor (unlike every other helper)."""
    return a if b == 0 else a % b


def _align(a: int, b: int) -> int:
    """GetAlign: AlignDown, 0 for a zero divisor."""
    return 0 if b == 0 else a // b * b


def pad_loop_elems(f: dict, front: bool) -> int:
    """Probs one Compute() call of a front (or tail) core writes at most: the loop count of its non-last loops, or
    of its single loop. The real kernel sizes its queue by num_tokens_*_each_loop, which AlignDown makes 0
    whenever the core has fewer probs than a loop holds (facts §12.10); the simulator sizes it by this count."""
    side = "front" if front else "tail"
    loops = f[f"loop_time_each_{side}_core"]
    each, last = f[f"num_tokens_{side}_core_each_loop"], f[f"num_tokens_{side}_core_last_loop"]
    return each if loops > 1 or last == 0 else last


def _tiling_pad(f: dict, pr: TensorDesc, l_slots: int, ub_bytes: int, core_num: int) -> None:
    n, e = pr.dim(0), pr.dim(1)
    if e == 0:
        _fail(f"probs has 0 experts (shape {pr.shape}): capacity = len(sorted_indices) / experts divides by zero")
    capacity = l_slots // e
    rows = e * capacity
    front = _div_rem(rows, core_num) or core_num
    tail = 0 if rows <= core_num else core_num - front
    per_loop_max = ub_bytes // (4 if pr.dtype == as_dtype("float32") else 2)
    per_front, per_tail = _ceil_int(rows, core_num), _div(rows, core_num)
    f.update(core_num_use=front + tail, num_tokens=n, num_experts=e, capacity=capacity, front_core=front,
             loop_time_each_front_core=_ceil_int(per_front, per_loop_max), num_tokens_each_front_core=per_front,
             num_tokens_front_core_each_loop=_align(per_front, per_loop_max),
             num_tokens_front_core_last_loop=_div_rem(per_front, per_loop_max), tail_core=tail,
             loop_time_each_tail_core=_ceil_int(per_tail, per_loop_max), num_tokens_each_tail_core=per_tail,
             num_tokens_tail_core_each_loop=_align(per_tail, per_loop_max),
             num_tokens_tail_core_last_loop=_div_rem(per_tail, per_loop_max))


def pad_ub_plan(f: dict, probs_bytes: int, *, front: bool = True) -> tuple[UbBuffer, ...]:
    """The pad kernel's one InitBuffer (VECOUT queue, depth 1), sized by the probs a front (tail) core's loop
    really writes; see pad_loop_elems."""
    return (UbBuffer(PAD_QUEUE, pad_loop_elems(f, front) * probs_bytes, 1, "TQue", "VECOUT", 1, PAD_PIPE),)


# --- non-pad branch ---------------------------------------------------------------------------------------
def _tiling_not_pad(f: dict, p: TensorDesc, s: TensorDesc, pr: TensorDesc | None, restore_shape, ub_bytes: int,
                    core_num: int) -> int:
    """InputParamCheck, Init, TilingCompute and Tiling4MaskedSelect. Returns the block dim."""
    if p.ndim != 2:
        _fail(f"permuted_tokens must be 2-D, got shape {p.shape}")
    rows = p.dim(0)
    if pr is not None:
        if pr.ndim != 2:
            _fail(f"probs must be 2-D, got shape {pr.shape}")
        tokens = pr.dim(0)
        if tokens == 0:
            _fail(f"probs has 0 tokens (shape {pr.shape}): topK = permuted rows / tokens divides by zero")
        top_k = tdiv(rows, tokens)
        experts = pr.dim(1)
    else:
        if not restore_shape:
            _fail("restore_shape is required without probs (restore_shape[0] gives the token count)")
        if restore_shape[0] == 0:
            _fail("restore_shape[0] is 0: topK = permuted rows / restore_shape[0] divides by zero")
        top_k = tdiv(rows, restore_shape[0])
        tokens = tdiv(s.dim(0), top_k)
        experts = 1
    if top_k > MAX_TOP_K:
        _fail(f"topK (permuted rows / tokens = {rows} / {tokens if pr is not None else restore_shape[0]}) must be "
              f"at most {MAX_TOP_K}, got {top_k}")
    # topK > experts only warns
    prob_bytes = length_by_type(pr.dtype) if pr is not None else None
    g = gather_tiling(ub_bytes=ub_bytes, core_num=core_num, token_bytes=length_by_type(p.dtype), num_tokens=tokens,
                      top_k=top_k, hidden=p.dim(1), num_out_tokens=rows, index_bytes=length_by_type(s.dtype),
                      prob_bytes=prob_bytes)
    f.update(g.fields)
    f["used_core_num"] = g.used_core_num
    f.update(masked_select_tiling(ub_bytes=ub_bytes, core_num=core_num, num_tokens=tokens, num_experts=experts,
                                  elem_bytes=prob_bytes or 0, skip_empty_tile=False))
    return max(g.used_core_num, f["need_core_num"])


def not_pad_ub_plan(key: int, f: dict, token_dtype, probs_dtype) -> tuple[UbBuffer, ...]:
    """Key 1: the masked select's TPipe, then kernel G's; key 0: kernel G's alone."""
    token_bytes = as_dtype(token_dtype).itemsize
    rows: tuple[UbBuffer, ...] = ()
    prob_bytes = None
    if key == KEY_PROBS:
        prob_bytes = as_dtype(probs_dtype).itemsize
        rows = masked_select_ub_plan(f, elem_bytes=prob_bytes, with_values=True, with_indices=False, pipe=MS_PIPE)
    return rows + gather_ub_plan(f, token_bytes=token_bytes, prob_bytes=prob_bytes, tokens_fp32=token_bytes == 4,
                                 pipe=GATHER_PIPE)


def moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, routing_map=None, probs=None,
                                         padded_mode=False, restore_shape=None, *, soc="ascend910b",
                                         unpermuted_tokens=None, out_index=None, permute_token_id=None,
                                         permute_probs=None) -> TilingResult:
    """Host tiling of MoeTokenUnpermuteWithRoutingMap for one chip profile.

    Tensors: anything with .shape and .dtype (or TensorDesc); None for absent optional inputs. restore_shape:
    a sequence of ints (only element 0 is read, without probs). The outputs are not read by the tiling.
    Raises TilingError where the real tiling returns GRAPH_FAILED (non-pad: permuted_tokens or probs not 2-D,
    topK > 512) or would divide by zero; padded mode without probs has no tiling (the aclnn skips the kernel).
    """
    soc = get_soc(soc)
    p, s, pr = TensorDesc.of(permuted_tokens), TensorDesc.of(sorted_indices), TensorDesc.of(probs)
    TensorDesc.of(routing_map)     # validated only: the tiling does not read the map
    if p is None or s is None:
        _fail("permuted_tokens and sorted_indices are required")
    if s.ndim != 1:
        _fail(f"sorted_indices must be 1-D, got shape {s.shape}")
    f = struct_fields(FIELDS)
    ub_bytes, core_num = soc.ub_size_for_tiling, soc.aiv_num
    if padded_mode:
        if pr is None:
            _fail("padded mode tiles the permuteProbs gather, which needs probs (without probs the aclnn runs no "
                  "MoeTokenUnpermuteWithRoutingMap kernel)")
        if pr.ndim != 2:
            _fail(f"probs must be 2-D, got shape {pr.shape}")
        _tiling_pad(f, pr, s.dim(0), ub_bytes, core_num)
        probs_bytes = as_dtype(pr.dtype).itemsize
        return TilingResult(tiling_key=KEY_PAD, block_dim=f["core_num_use"], workspace_size=PAD_WORKSPACE_BYTES,
                            fields=f, ub_plan=pad_ub_plan(f, probs_bytes), schedule_mode=0, soc=soc)
    block_dim = _tiling_not_pad(f, p, s, pr, tuple(restore_shape or ()), ub_bytes, core_num)
    key = KEY_PROBS if pr is not None else KEY_NO_PROBS
    return TilingResult(tiling_key=key, block_dim=block_dim, workspace_size=NOT_PAD_WORKSPACE_BYTES, fields=f,
                        ub_plan=not_pad_ub_plan(key, f, p.dtype, pr.dtype if pr is not None else None),
                        schedule_mode=1 if pr is not None else 0, soc=soc)
