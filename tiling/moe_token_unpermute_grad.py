"""Tiling of MoeTokenUnpermuteGrad (op_host/moe_token_unpermute_grad_tiling.cpp).

source: moe/moe_token_unpermute_grad/op_host/moe_token_unpermute_grad_tiling.cpp,
moe_token_unpermute_grad_tiling.h @ 25fb6b92890d.

Order of the real function:

1. tokensNum = unpermuted_tokens_grad dim 0, hiddenSize = its dim 1, topK = probs dim 1 (1 without probs),
   numOutTokens = len(sorted_indices) (an older version took permuted_tokens dim 0; master reads
   the indices, which is why permuted_tokens could become optional). Any of them 0 -> "input shape has 0" (561002);
   topK > 512 -> 561002.
2. Core split over tokens with every vector core: the first tokensNum mod C ("former") cores take one
   token more; block dim = C (idle cores get 0 tokens).
3. In-core split. Its status is LOGGED BUT IGNORED by the real tiling: a 0-byte dtype (size table of
   tiling.common.length_by_type) or an impossible hidden split leaves the in-core fields at 0 and the
   tiling still succeeds. The aclnn layer (ops/unpermute_grad) refuses such a tiling before launch,
   because the kernel would divide by those zeros.
   * no probs (key 0): whole rows of the gradient are copied in batches of indicesReserveNum rows;
     the hidden dimension is cut only when a batch of 8 rows does not fit.
   * probs (key 1): batches of whole tokens (at most 256 slots, or topK slots when topK > 256);
     inputReserveNum permuted rows are loaded at once (a divisor of topK); when not even one row fits
     next to the fp32 work buffers, the hidden dimension is cut into pieces of hiddenSizeAlign.
4. tilingKey = 10 * paddedMode-key (always 0) + hasProbs; workspace 16 MiB.

The host code mixes uint64 (the UB size) with int64 values; where a C++ expression is unsigned (the
UB size minus a larger reservation wraps around) the figures here wrap the same way.
"""
from __future__ import annotations

from typing import NoReturn

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, align_down, align_up, length_by_type, struct_fields, tdiv, tmod
from .platform import get_soc
from .status import TilingError

OP = "MoeTokenUnpermuteGrad"

FIELDS = (
    "tokens_num", "top_k", "hidden_size", "num_out_tokens",
    "former_core_num", "tail_core_num", "token_num_each_core", "token_num_tail_core",
    "row_id_map_each_core", "row_id_map_tail_core",
    "hidden_size_align", "hidden_size_loop_times", "hidden_size_tail",
    "input_reserve_num", "indices_reserve_num", "indices_reserve_num_align",
    "total_ub_size",
)
"""MoeTokenUnpermuteGradTilingData in declaration order."""

BLOCK_SIZE_32 = 32
BLOCK_SIZE_512 = 512
BUFFER_NUM = 2
INDICES_RESERVE_MAX_NUM = 256
MAX_TOP_K = 512
FP32_BYTES = 4
REDUCE_RESERVE_BYTES = 256       # tmpBufferReserve of the probs kernel
WORKSPACE_BYTES = 16 * 1024 * 1024

KEY_PROB_NONE = 0
KEY_PROB = 1

_U64 = 1 << 64


def _i64(x: int) -> int:
    """x wrapped to int64 (a uint64 value converted back to a signed C++ integer)."""
    x %= _U64
    return x - _U64 if x >= _U64 // 2 else x


def _udiv(a: int, b: int) -> int:
    """C++ uint64 a / b (both converted to uint64), assigned to an int64."""
    return _i64((a % _U64) // (b % _U64))


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _greatest_divisor(num: int, div: int) -> int:
    """GetGreatestDivisor: the largest d <= div that divides num (div >= 1)."""
    while num % div != 0:
        div -= 1
    return div


def _split_prob_none(f: dict, tok_len: int, idx_len: int, ub: int) -> bool:
    """CoreSplitInfoProbIsNone; False where the real function returns false (fields untouched)."""
    h = f["hidden_size"]
    tok_block = BLOCK_SIZE_32 // tok_len
    idx_block = BLOCK_SIZE_32 // idx_len
    h_align = align_up(h, tok_block)
    indices_reserve = _udiv(ub, BUFFER_NUM * (h_align * tok_len + idx_len))
    indices_reserve = max(align_down(indices_reserve, idx_block), idx_block)
    if indices_reserve <= 0:
        return False
    h_tmp_max = _udiv(ub - indices_reserve * BUFFER_NUM * idx_len, BUFFER_NUM * tok_len * indices_reserve)
    if h_tmp_max < h_align:
        h_align = align_down(h_tmp_max, tok_block)
    if h_align == 0:
        # the real tiling computes (hiddenSize + 0 - 1) / 0 here: an integer division by zero on the host
        _fail(f"UB of {ub} bytes cannot hold even {tok_block} hidden elements for {indices_reserve} rows "
              "(the real host tiling divides by zero here)")
    loops = tdiv(h + h_align - 1, h_align)
    f.update(hidden_size_align=h_align, hidden_size_loop_times=loops, hidden_size_tail=h - (loops - 1) * h_align,
             input_reserve_num=indices_reserve, indices_reserve_num=indices_reserve,
             indices_reserve_num_align=indices_reserve)
    return True


def _split_prob(f: dict, tok_len: int, prob_len: int, ub: int) -> bool:
    """CoreSplitInfoProbIsNotNone; False where the real function returns false (fields untouched)."""
    h, top_k = f["hidden_size"], f["top_k"]
    tok_block512 = BLOCK_SIZE_512 // tok_len
    prob_block = BLOCK_SIZE_32 // prob_len
    h_align = align_up(h, tok_block512)
    if top_k <= INDICES_RESERVE_MAX_NUM:
        indices_reserve = min(f["token_num_each_core"] * top_k, align_down(INDICES_RESERVE_MAX_NUM, top_k))
    else:
        indices_reserve = top_k
    idx_align = align_up(indices_reserve, prob_block)
    fixed = BUFFER_NUM * prob_len * idx_align * 2 + idx_align * FP32_BYTES * 3 + REDUCE_RESERVE_BYTES
    input_max = tdiv(_i64(ub - fixed - (BUFFER_NUM * tok_len * 2 + 3 * FP32_BYTES) * h_align),
                     BUFFER_NUM * tok_len * h_align)
    input_reserve = 1
    loops = 1
    if input_max < 1:
        # not even one permuted row fits: cut the hidden dimension (three 2-buffer token rows + three fp32 rows)
        loop_max = _udiv(ub - fixed, 3 * BUFFER_NUM * tok_len + 3 * FP32_BYTES)
        loop_max = align_down(loop_max, tok_block512)
        if loop_max == 0:
            return False
        loops = tdiv(h + loop_max - 1, loop_max)
        h = h - (loops - 1) * loop_max
        h_align = loop_max
    else:
        input_reserve = _greatest_divisor(top_k, min(input_max, top_k))
    if indices_reserve == 0 or input_reserve == 0:
        return False
    f.update(hidden_size_align=h_align, hidden_size_loop_times=loops, hidden_size_tail=h,
             input_reserve_num=input_reserve, indices_reserve_num=indices_reserve,
             indices_reserve_num_align=idx_align)
    return True


def in_core_split_done(fields: dict) -> bool:
    """Whether the in-core split filled its fields (the real tiling succeeds either way; a kernel launched
    with the zeros of a failed split would divide by them)."""
    return fields["indices_reserve_num"] > 0 and fields["hidden_size_align"] > 0


def ub_plan(tiling_key: int, f: dict, token_bytes: int, probs_bytes: int) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the kernel class the key selects, in the order its Init() makes them."""
    h_align = f["hidden_size_align"]
    if tiling_key == KEY_PROB_NONE:
        return (
            UbBuffer("inQueueRowIdMap", f["indices_reserve_num"] * 4, 2, "TQue", "VECIN", 2),
            UbBuffer("inOutque", f["input_reserve_num"] * h_align * token_bytes, 2, "TQueBind", "VECIN->VECOUT", 1),
        )
    idx_align = f["indices_reserve_num_align"]
    return (
        UbBuffer("inQueueUnpermuted", BUFFER_NUM * h_align * token_bytes),
        UbBuffer("inQueuePermutedTokens", BUFFER_NUM * f["input_reserve_num"] * h_align * token_bytes),
        UbBuffer("inQueueProb", BUFFER_NUM * idx_align * probs_bytes),
        UbBuffer("outQueueProbGrad", BUFFER_NUM * idx_align * probs_bytes),
        UbBuffer("outQueuePermutedTokensGrad", BUFFER_NUM * h_align * token_bytes),
        UbBuffer("tmpBufferPermutedTokensCast", h_align * FP32_BYTES),
        UbBuffer("tmpBufferReserve", REDUCE_RESERVE_BYTES),
        UbBuffer("tmpBufferUnpermutedCast", h_align * FP32_BYTES),
        UbBuffer("tmpBufferProbGradReduceSum", idx_align * FP32_BYTES),
        UbBuffer("tmpBufferProbCast", idx_align * FP32_BYTES),
        UbBuffer("tmpBufferProbGradCast", idx_align * FP32_BYTES),
        UbBuffer("tmpBufferPermutedTokensGrad", h_align * FP32_BYTES),
    )


def _dim(t: TensorDesc, i: int) -> int:
    """StorageShape::GetDim(i); a dimension the tensor does not have reads as 0 here (the aclnn layer
    refuses such shapes before tiling matters)."""
    return t.shape[i] if i < t.ndim else 0


def moe_token_unpermute_grad(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs=None,
                             padded_mode=False, restore_shape=None, *, soc="ascend910b") -> TilingResult:
    """Host tiling of MoeTokenUnpermuteGrad for one chip profile.

    Tensors: anything with .shape and .dtype (or TensorDesc); None for an absent optional input
    (permuted_tokens is optional in the OpDef: dtypes come from unpermuted_tokens_grad; probs optional).
    Raises TilingError (561002) exactly where the real tiling returns GRAPH_FAILED: a missing gradient or
    index tensor, a zero tokens / topK / hidden / len(sorted_indices), topK > 512. padded_mode does not
    change the key (its key part is always 0); restore_shape is not read.
    """
    soc = get_soc(soc)
    g, s, pr = (TensorDesc.of(t) for t in (unpermuted_tokens_grad, sorted_indices, probs))
    TensorDesc.of(permuted_tokens)          # validated, not read
    if g is None:
        _fail("unpermuted_tokens_grad has no shape")
    if s is None:
        _fail("sorted_indices has no shape")
    f = struct_fields(FIELDS)
    n, h = _dim(g, 0), _dim(g, 1)
    top_k = 1 if pr is None else _dim(pr, 1)
    num_out = _dim(s, 0)
    f.update(tokens_num=n, top_k=top_k, hidden_size=h, num_out_tokens=num_out)
    if n == 0 or top_k == 0 or h == 0 or num_out == 0:
        _fail(f"input shape has 0: tokens_num {n}, topK {top_k}, hidden_size {h}, len(sorted_indices) {num_out} "
              "must all be positive")
    if top_k > MAX_TOP_K:
        _fail(f"topK (probs dim 1) only supports values no greater than {MAX_TOP_K}, got {top_k}")

    core_num = soc.aiv_num
    ub = soc.ub_size_for_tiling
    tail = tdiv(n, core_num)
    former = tmod(n, core_num)
    each = tail + 1 if former else tail
    f.update(former_core_num=former, tail_core_num=core_num - former, token_num_each_core=each,
             token_num_tail_core=tail, row_id_map_each_core=each * top_k, row_id_map_tail_core=tail * top_k,
             total_ub_size=ub)

    tok_len = length_by_type(g.dtype)
    prob_len = tok_len if pr is None else length_by_type(pr.dtype)
    idx_len = length_by_type(s.dtype)
    if tok_len and prob_len and idx_len:      # a 0-byte dtype: logged, split skipped, tiling succeeds
        if pr is None:
            _split_prob_none(f, tok_len, idx_len, ub)
        else:
            _split_prob(f, tok_len, prob_len, ub)

    key = KEY_PROB_NONE if pr is None else KEY_PROB
    token_bytes = g.dtype.itemsize
    probs_bytes = token_bytes if pr is None else pr.dtype.itemsize
    return TilingResult(tiling_key=key, block_dim=core_num, workspace_size=WORKSPACE_BYTES, fields=f,
                        ub_plan=ub_plan(key, f, token_bytes, probs_bytes), soc=soc)
