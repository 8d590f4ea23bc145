"""Host tiling T-G of the shared gather-and-reduce kernel G (KernelMoeTokenUnpermute).

source: moe/moe_token_unpermute/op_host/moe_token_unpermute_tiling.cpp (TilingCompute),
moe/moe_token_permute_grad/op_host/moe_token_permute_grad_tiling.cpp,
moe/moe_token_permute_with_routing_map_grad/op_host/moe_token_permute_with_routing_map_grad_tiling.cpp,
moe/moe_token_unpermute_with_routing_map/op_host/moe_token_unpermute_with_routing_map_tiling.cpp @ 25fb6b92890d.

The same routine appears, copied, in four tilings: moe_token_unpermute_tiling.cpp (TilingCompute),
moe_token_permute_grad_tiling.cpp, moe_token_permute_with_routing_map_grad_tiling.cpp (non-pad path)
and moe_token_unpermute_with_routing_map_tiling.cpp (non-pad path). Each operator works out its own
token count, topK, permuted-row count and dtype sizes, then calls `gather_tiling`; this module knows
no kernel and no operator.

The tiling budgets the UB per hidden element and per routed slot:

* per hidden element: `buffer_num` input token buffers, one output buffer and, for 2-byte tokens,
  two fp32 accumulators: unitH(b) = tokBytes * (QUE_NUM + b - 1) + 4 * castNum;
* the hidden length that fits is AlignN((UB - 5120) / unitH - 512, 512) (5120 bytes are kept for
  the indices and probs of topK = 512; note: subtract 512, then round up);
* the UB left after the hidden buffers (minus 256) holds a chunk of tokens' indices and probs.

All arithmetic is the tilings' own: signed 64-bit, division truncating toward zero, a zero divisor
giving 0 (safeDiv / safeMod), and AlignN as the bit trick `(x + N - 1) & ~(N - 1)`, which rounds
negative values toward +infinity in steps of N (a tiny UB gives a negative hidden length; the
figures stay what the real tiling computes, and the tiling still succeeds).
"""
from __future__ import annotations

from typing import NamedTuple

from ascend_sim.pipe import UbBuffer

from .common import tdiv, tmod

GATHER_FIELDS = (
    "hidden_size", "top_k", "num_out_tokens",
    "hidden_splited_length", "hidden_splited_num", "hidden_splited_remain",
    "tokens_core_length", "tokens_core_remain",
    "tokens_splited_length", "tokens_splited_num", "tokens_splited_remain",
    "buffer_num",
)
"""MoeTokenUnpermuteTilingData in declaration order (UWRM inserts used_core_num before buffer_num)."""

FLOAT_DATA_SIZE = 4      # bytes of one fp32 accumulator element
QUE_NUM = 2              # output queue + the first input buffer
CAST_NUM = 2             # fp32 temp buffers of 2-byte tokens (temp_buffer0, temp_buffer1)
MIN_BUFFER_NUM = 2
MAX_BUFFER_NUM = 4
ALIGN_512 = 512
ALIGN_256 = 256
RESERVE_BYTES = 5120     # room for the indices + probs of topK = 512
INDEX_BYTES = 4          # sizeof(int32_t): every kernel instantiation reads int32 sorted indices
TEMP_BUFFER0_EXTRA_BYTES = 256   # temp_buffer0 is 256 bytes longer than temp_buffer1

_U32 = 1 << 32
_I64 = 1 << 64


class GatherTiling(NamedTuple):
    """Result of T-G.

    Attributes:
        fields: the 12 GATHER_FIELDS in struct order (ints).
        used_core_num: cores with work, min(tokens, cores): the block dim of the non-UWRM ops, and the
            used_core_num field of UWRM.
    """
    fields: dict
    used_core_num: int


def _i64(x: int) -> int:
    """x wrapped to a signed 64-bit value, as the C++ int64_t arithmetic would leave it."""
    x %= _I64
    return x - _I64 if x >= _I64 // 2 else x


def align_n(x: int, n: int) -> int:
    """AlignN(x, N) = (x + N - 1) & ~(N - 1) on int64 (N a power of two): rounds toward +inf, also
    for negative x."""
    return _i64((x + n - 1) & ~(n - 1))


def unit_h_bytes(token_bytes: int, buffer_num: int) -> int:
    """ComputeUnitHSpace: UB bytes per hidden element with `buffer_num` input buffers."""
    cast_num = 0 if token_bytes == FLOAT_DATA_SIZE else CAST_NUM
    return token_bytes * (QUE_NUM + buffer_num - 1) + FLOAT_DATA_SIZE * cast_num


def max_hidden_elems(ub_bytes: int, token_bytes: int, buffer_num: int) -> int:
    """ComputeMaxHiddenSize: hidden elements one piece may have with `buffer_num` input buffers."""
    per_elem = tdiv(ub_bytes - RESERVE_BYTES, unit_h_bytes(token_bytes, buffer_num))
    return align_n(per_elem - ALIGN_512, ALIGN_512)


def unit_token_bytes(index_bytes: int, prob_bytes: int | None) -> int:
    """UB bytes per routed slot of a token chunk: its index, plus its prob and (non-fp32 probs) the fp32
    copy of the prob."""
    unit = index_bytes
    if prob_bytes is not None:
        unit += prob_bytes
        if prob_bytes != FLOAT_DATA_SIZE:
            unit += FLOAT_DATA_SIZE
    return unit


def gather_tiling(*, ub_bytes: int, core_num: int, token_bytes: int, num_tokens: int, top_k: int, hidden: int,
                  num_out_tokens: int, index_bytes: int, prob_bytes: int | None = None) -> GatherTiling:
    """T-G: split the hidden dimension, pick the input buffer depth, split tokens over cores and chunks.

    Args (all whole numbers; byte sizes from the §1.2 GetLengthByType table, so INT8 tokens give 0):
        ub_bytes: GetCoreMemSize(UB) as the op passes it (ini ub_size - 256, not floored).
        core_num: GetCoreNumAiv().
        token_bytes: bytes per permuted-token element.
        num_tokens: output tokens N (rows of the result).
        top_k: slots per output token K.
        hidden: hidden size H (elements per row).
        num_out_tokens: rows of the permuted tensor; slots whose index is >= it are skipped by the kernel.
        index_bytes: bytes per sorted index (the sorted-indices dtype; PWRM-grad passes a fixed 4).
        prob_bytes: bytes per prob, None when the op has no probs.

    Never fails: degenerate inputs give the degenerate figures the real tiling gives.
    """
    used = num_tokens if num_tokens < core_num else core_num

    max_h = max_hidden_elems(ub_bytes, token_bytes, MIN_BUFFER_NUM)
    if align_n(hidden, ALIGN_512) <= max_h:
        h_len, h_num, h_remain = hidden, 1, 0
    else:
        h_len, h_num, h_remain = max_h, tdiv(hidden, max_h), tmod(hidden, max_h)

    buffer_num = MAX_BUFFER_NUM
    while buffer_num > MIN_BUFFER_NUM and h_len > max_hidden_elems(ub_bytes, token_bytes, buffer_num):
        buffer_num -= 1

    remain_ub = _i64(ub_bytes - align_n(h_len, ALIGN_512) * unit_h_bytes(token_bytes, buffer_num) - ALIGN_256)

    core_len, core_remain = tdiv(num_tokens, used), tmod(num_tokens, used)
    unit_tok = unit_token_bytes(index_bytes, prob_bytes)
    need = _i64(core_len * top_k * unit_tok)
    if remain_ub >= need:
        t_len, t_num, t_remain = core_len, 1, 0
    else:
        max_tok = tdiv(remain_ub, _i64(top_k * unit_tok))
        t_len, t_num, t_remain = max_tok, tdiv(core_len, max_tok), tmod(core_len, max_tok)

    values = (hidden, top_k, num_out_tokens, h_len, h_num, h_remain, core_len, core_remain, t_len, t_num, t_remain,
              buffer_num)
    return GatherTiling(dict(zip(GATHER_FIELDS, (int(v) for v in values), strict=True)), int(used))


def gather_buffers(tokens_fp32: bool, has_probs: bool, probs_fp32: bool) -> tuple[str, ...]:
    """Names of kernel G's InitBuffer calls in Init() order for one template instantiation."""
    names = ["tokens_inque", "indices_inque", "outque"]
    if not tokens_fp32:
        names += ["temp_buffer0", "temp_buffer1"]
    if has_probs:
        names.append("probs_inque")
        if not probs_fp32:
            names.append("temp_buffer2")
    return tuple(names)


def _init_len(nbytes: int) -> int:
    """InitBuffer's length parameter is a uint32: a negative int64 size (tiny UB) arrives as a huge length,
    which the UB plan then rejects as an overflow."""
    return nbytes % _U32


def gather_ub_plan(fields: dict, *, token_bytes: int, prob_bytes: int | None = None, tokens_fp32: bool, pipe: str,
                   index_bytes: int = INDEX_BYTES) -> tuple[UbBuffer, ...]:
    """Kernel G's InitBuffer rows in Init() order (names as the original's members), for TilingResult.ub_plan.

    Args:
        fields: the 12 GATHER_FIELDS (a larger struct dict holding them is fine).
        token_bytes: sizeof(T1) of the kernel (2 or 4; the real element size, not the tiling table's).
        prob_bytes: sizeof(T3), None without probs.
        tokens_fp32: T1 is float (no fp32 temp buffers; the output queue is the accumulator).
        pipe: the TPipe's name (UbBuffer.pipe).
        index_bytes: sizeof(T2); every registered instantiation uses int32.

    Sizes use the tiling's tokens_splited_length (not the +1 a remainder core adds: its extra token goes
    into the remainder chunk, which is never longer than a full chunk).
    """
    h_align = align_n(fields["hidden_splited_length"], ALIGN_512)
    slots = _i64(fields["tokens_splited_length"] * fields["top_k"])
    rows = [
        UbBuffer("tokens_inque", _init_len(h_align * token_bytes), fields["buffer_num"], "TQue", "VECIN", 1, pipe),
        UbBuffer("indices_inque", _init_len(slots * index_bytes), 1, "TQue", "VECIN", 1, pipe),
        UbBuffer("outque", _init_len(h_align * token_bytes), 1, "TQue", "VECOUT", 1, pipe),
    ]
    if not tokens_fp32:
        rows += [
            UbBuffer("temp_buffer0", _init_len(h_align * FLOAT_DATA_SIZE + TEMP_BUFFER0_EXTRA_BYTES), pipe=pipe),
            UbBuffer("temp_buffer1", _init_len(h_align * FLOAT_DATA_SIZE), pipe=pipe),
        ]
    if prob_bytes is not None:
        rows.append(UbBuffer("probs_inque", _init_len(slots * prob_bytes), 1, "TQue", "VECIN", 1, pipe))
        if prob_bytes != FLOAT_DATA_SIZE:
            rows.append(UbBuffer("temp_buffer2", _init_len(slots * FLOAT_DATA_SIZE), pipe=pipe))
    return tuple(rows)
