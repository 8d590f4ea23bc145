"""Tiling of MoeTokenUnpermuteWithRoutingMapGrad.

source: moe/moe_token_unpermute_with_routing_map_grad/op_host/moe_token_unpermute_with_routing_map_grad_tiling.cpp
and _tiling.h @ 25fb6b92890d. One tiling serves every chip: the file has no arch35 branch, and the ascend950
(regbase, _apt.cpp) kernels read the same 21-field struct. Per chip only the platform figures differ: the
vector-core count (block dim, core split) and GetCoreMemSize(UB) (totalUbSize, every UB budget below). The
arch35 kernels make the same InitBuffer calls as the membase ones, so ub_plan is the same on every chip.

Three branches, by whether probs is given and by dropAndPad:

* probs absent (keys 0 / 10): the numOutTokens slots are split over all cores ("former"
  cores take one more); the hidden dimension is cut into pieces that fit twice in UB.
* probs + dropAndPad (keys 11 / 111): same slot split; capacity = numOutTokens / experts
  must not exceed tokens; pieces sized for two fp32 inputs, one output and a partial-sum
  array; hidden_size beyond 512 pieces is rejected.
* probs, no dropAndPad (keys 1 / 101): tokens are split over cores (rowIdMap = tokens * topK);
  topK <= 512 and <= experts; experts must leave room for at least one hidden element.

tilingKey = 100 * mixed(probs fp32 with bf16 grads) + 10 * dropAndPad + hasProbs. The
launch always uses every vector core; the workspace is the library's system workspace.
"""
from __future__ import annotations

from typing import NoReturn

import ml_dtypes
import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import (
    TensorDesc,
    TilingResult,
    align_down,
    align_up,
    as_dtype,
    ceil_div,
    length_by_type,
    struct_fields,
    tdiv,
    tmod,
)
from .platform import get_soc
from .status import TilingError

OP = "MoeTokenUnpermuteWithRoutingMapGrad"

FIELDS = (
    "tokens_num", "top_k", "capacity", "num_expert", "hidden_size", "num_out_tokens",
    "former_core_num", "tail_core_num", "token_num_each_core", "token_num_tail_core",
    "row_id_map_each_core", "row_id_map_tail_core",
    "hidden_size_align", "hidden_size_loop_times", "hidden_size_loop_times_align", "hidden_size_tail",
    "input_reserve_num", "indices_reserve_num", "indices_reserve_num_align", "num_expert_align",
    "total_ub_size",
)

BLOCK_SIZE_32 = 32
FP32_BLOCK_NUM = 8
H_BUFFER_NUM = 8
MAX_TOP_K = 512
BUFFER_NUM = 2
INDICES_RESERVE_MAX_NUM = 256
H_LOOP_ALIGN_BUFFER_LENGTH = 512
H_BUFFER_NUM_PAD_FALSE = 3
H_FP32_BUFFER_NUM_PAD_FALSE = 3
SIZE_OF_FLOAT = 4
INDICES_FP32_BUFFER_NUM = 2
PROB_NONE_PERLOOP_NUM = 1

KEY_PROB_NONE = 0
KEY_PROB = 1
KEY_PAD_PROB_NONE = 10
KEY_PAD_PROB = 11
KEY_MIX_PROB = 101
KEY_MIX_PAD_PROB = 111


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _split_slots(f: dict, core_num: int) -> None:
    """Slots (numOutTokens) over all cores: the first (M mod C) cores take one more."""
    m = f["num_out_tokens"]
    tail = tdiv(m, core_num)
    former = tmod(m, core_num)
    f["former_core_num"] = former
    f["tail_core_num"] = core_num - former
    f["row_id_map_each_core"] = tail if former == 0 else tail + 1
    f["row_id_map_tail_core"] = tail


def _tiling_prob_none(f: dict, core_num: int, pad: bool, tok_len: int) -> None:
    _split_slots(f, core_num)
    if not pad:
        f["top_k"] = tdiv(f["num_out_tokens"], f["tokens_num"])
    if tok_len == 0:
        _fail("the dtype size of unpermuted_tokens_grad is 0 (only 2-, 4- and 8-byte types are tiled)")
    align_elems = BLOCK_SIZE_32 // tok_len
    h = f["hidden_size"]
    h_align = align_up(h, align_elems)
    h_tmp_max = tdiv(f["total_ub_size"], BUFFER_NUM * tok_len)
    if h_tmp_max < h_align:
        h_align = align_down(h_tmp_max, align_elems)
    loops = ceil_div(h, h_align)
    f["hidden_size_align"] = h_align
    f["hidden_size_loop_times"] = loops
    f["hidden_size_tail"] = h - (loops - 1) * h_align
    f["input_reserve_num"] = PROB_NONE_PERLOOP_NUM
    f["indices_reserve_num"] = PROB_NONE_PERLOOP_NUM


def _tiling_prob_pad(f: dict, core_num: int, tok_len: int) -> None:
    m, n = f["num_out_tokens"], f["tokens_num"]
    capacity = tdiv(m, f["num_expert"])
    if capacity > n:
        _fail(f"capacity should be smaller than tokens_num, but capacity (numOutTokens / experts = {m} / "
              f"{f['num_expert']}) is {capacity} and tokens_num is {n}")
    _split_slots(f, core_num)
    f["capacity"] = capacity
    if tok_len == 0:
        _fail("the dtype size of unpermuted_tokens_grad is 0 (only 2-, 4- and 8-byte types are tiled)")
    align_elems = BLOCK_SIZE_32 // tok_len
    h = f["hidden_size"]
    h_align = align_up(h, align_elems)
    one_loop_max = tdiv(f["total_ub_size"] - BLOCK_SIZE_32 - H_LOOP_ALIGN_BUFFER_LENGTH * SIZE_OF_FLOAT,
                        BUFFER_NUM * (H_BUFFER_NUM + tok_len))
    h_max = one_loop_max * H_LOOP_ALIGN_BUFFER_LENGTH
    if h > h_max:
        _fail(f"the maximum hidden_size supported with dropAndPad and probs is {h_max} "
              f"(256 * (UB - 2080) / (8 + {tok_len}) for UB {f['total_ub_size']}), but got {h}")
    if one_loop_max < h_align:
        h_align = align_down(one_loop_max, align_elems)
    loops = ceil_div(h, h_align)
    f["hidden_size_align"] = h_align
    f["hidden_size_loop_times"] = loops
    f["hidden_size_loop_times_align"] = align_up(loops, FP32_BLOCK_NUM)
    f["hidden_size_tail"] = h - (loops - 1) * h_align
    f["input_reserve_num"] = PROB_NONE_PERLOOP_NUM
    f["indices_reserve_num"] = PROB_NONE_PERLOOP_NUM


def _tiling_prob_no_pad(f: dict, core_num: int, tok_len: int, prob_len: int) -> None:
    m, n, e = f["num_out_tokens"], f["tokens_num"], f["num_expert"]
    if n == 0:
        _fail("tokens_num (unpermuted_tokens_grad dim 0) is 0")
    top_k = tdiv(m, n)
    if top_k > MAX_TOP_K:
        _fail(f"topK_num (len(out_index) / tokens_num = {m} / {n}) must be at most {MAX_TOP_K}, but is {top_k}")
    if top_k > e:
        _fail(f"topK_num must not exceed experts_num, but topK_num is {top_k} and experts_num is {e}")
    tail = tdiv(n, core_num)
    former = tmod(n, core_num)
    each = tail if former == 0 else tail + 1
    f.update(top_k=top_k, former_core_num=former, tail_core_num=core_num - former, token_num_each_core=each,
             token_num_tail_core=tail, row_id_map_each_core=each * top_k, row_id_map_tail_core=tail * top_k)
    if tok_len == 0:
        _fail("the dtype size of unpermuted_tokens_grad is 0 (only 2-, 4- and 8-byte types are tiled)")
    align_elems = BLOCK_SIZE_32 // tok_len
    h = f["hidden_size"]
    h_align = align_up(h, align_elems)
    if top_k <= INDICES_RESERVE_MAX_NUM:
        indices_reserve = min(f["row_id_map_each_core"], align_down(INDICES_RESERVE_MAX_NUM, top_k))
    else:
        indices_reserve = top_k
    experts_align = align_up(e, BLOCK_SIZE_32)
    remain = (f["total_ub_size"] - tok_len * INDICES_RESERVE_MAX_NUM
              - INDICES_RESERVE_MAX_NUM * SIZE_OF_FLOAT * INDICES_FP32_BUFFER_NUM)
    experts_bytes = (1 + prob_len) * experts_align
    hidden_unit = H_BUFFER_NUM_PAD_FALSE * BUFFER_NUM * tok_len + H_FP32_BUFFER_NUM_PAD_FALSE * SIZE_OF_FLOAT
    experts_max = tdiv(remain - hidden_unit, 1 + prob_len)
    if e > experts_max:
        _fail(f"the maximum experts_num supported is {experts_max} for UB {f['total_ub_size']} "
              f"((UB - (prob_bytes + 1) * AlignUp(E, 32) - (token_bytes + 8) * 256) / (6 * token_bytes + 12) "
              f"must be >= 1), but got {e}")
    h_tmp_max = tdiv(remain - experts_bytes, hidden_unit)
    if h_tmp_max < h_align:
        h_align = align_down(h_tmp_max, align_elems)
    loops = ceil_div(h, h_align)
    f["hidden_size_align"] = h_align
    f["hidden_size_loop_times"] = loops
    f["hidden_size_tail"] = h - (loops - 1) * h_align
    f["indices_reserve_num"] = indices_reserve
    f["indices_reserve_num_align"] = align_up(indices_reserve, align_elems)
    f["num_expert_align"] = experts_align


def ub_plan(tiling_key: int, f: dict, token_bytes: int, probs_bytes: int) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the kernel class the key selects, in the order its Init() makes them."""
    h_align = f["hidden_size_align"]
    if tiling_key in (KEY_PROB_NONE, KEY_PAD_PROB_NONE):
        name = "padFalseInOutque" if tiling_key == KEY_PROB_NONE else "padTrueInOutque"
        return (UbBuffer(name, f["input_reserve_num"] * h_align * token_bytes, 2, "TQueBind", "VECIN->VECOUT", 1),)
    if tiling_key in (KEY_PAD_PROB, KEY_MIX_PAD_PROB):
        return (
            UbBuffer("unpermutedGradTQue", h_align * SIZE_OF_FLOAT, 2, "TQue", "VECIN", 2),
            UbBuffer("permutedTokensTQue", h_align * SIZE_OF_FLOAT, 2, "TQue", "VECIN", 2),
            UbBuffer("probGradReduceSumTBuf", f["hidden_size_loop_times_align"] * SIZE_OF_FLOAT),
            UbBuffer("permutedTokensGradTQue", h_align * token_bytes, 2, "TQue", "VECOUT", 2),
            UbBuffer("probGradOutTBuf", BLOCK_SIZE_32),
        )
    idx_align = f["indices_reserve_num_align"]
    experts_align = f["num_expert_align"]
    return (
        UbBuffer("inQueueUnpermuted", BUFFER_NUM * h_align * token_bytes),
        UbBuffer("inQueuePermutedTokens", BUFFER_NUM * h_align * token_bytes),
        UbBuffer("outQueueProbGrad", idx_align * probs_bytes),
        UbBuffer("outQueuePermutedTokensGrad", BUFFER_NUM * h_align * token_bytes),
        UbBuffer("tmpBufferPermutedTokensCast", h_align * SIZE_OF_FLOAT),
        UbBuffer("tmpBufferUnpermutedCast", h_align * SIZE_OF_FLOAT),
        UbBuffer("tmpBufferProbGradReduceSum", idx_align * SIZE_OF_FLOAT),
        UbBuffer("tmpBufferProbGradCast", idx_align * SIZE_OF_FLOAT),
        UbBuffer("tmpBufferPermutedTokensGrad", h_align * SIZE_OF_FLOAT),
        UbBuffer("routingMapTBuf", experts_align),
        UbBuffer("probGradTBuf", experts_align * probs_bytes),
    )


def moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None,
                                              permuted_tokens=None, probs=None, drop_and_pad=False,
                                              restore_shape=None, *, soc="ascend910b") -> TilingResult:
    """Host tiling of MoeTokenUnpermuteWithRoutingMapGrad for one chip profile.

    Tensors: anything with .shape and .dtype (or TensorDesc); None for absent optional inputs.
    Raises TilingError exactly where the real tiling returns GRAPH_FAILED.
    """
    soc = get_soc(soc)
    g, o, i = (TensorDesc.of(t) for t in (unpermuted_tokens_grad, out_index, permute_token_id))
    rm, p, pr = (TensorDesc.of(t) for t in (routing_map, permuted_tokens, probs))
    tok_dtype = g.dtype if g is not None else None
    prob_dtype = pr.dtype if pr is not None else tok_dtype
    bf16, fp32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
    if tok_dtype != prob_dtype and not (tok_dtype == bf16 and prob_dtype == fp32):
        _fail(f"probs dtype ({prob_dtype}) must equal the unpermuted_tokens_grad dtype ({tok_dtype}), "
              "or be float32 when unpermuted_tokens_grad is bfloat16")
    for name, t, ndim in (("unpermuted_tokens_grad", g, 2), ("out_index", o, 1), ("permute_token_id", i, 1)):
        if t is None:
            _fail(f"{name} has no shape")
        if t.ndim != ndim:
            _fail(f"the dims of {name} should be {ndim}, but got {t.ndim} (shape {t.shape})")
    if o.dim(0) != i.dim(0):
        _fail(f"out_index and permute_token_id must have the same length, but got {o.dim(0)} and {i.dim(0)}")

    f = struct_fields(FIELDS)
    f["tokens_num"], f["hidden_size"] = g.dim(0), g.dim(1)
    f["num_out_tokens"] = o.dim(0)
    core_num = soc.aiv_num
    f["total_ub_size"] = soc.ub_size_for_tiling
    tok_len = length_by_type(tok_dtype)
    if pr is None:
        _tiling_prob_none(f, core_num, bool(drop_and_pad), tok_len)
    else:
        for name, t in (("routing_map", rm), ("permuted_tokens", p), ("probs", pr)):
            if t is None:
                _fail(f"{name} is required when probs is given")
            if t.ndim != 2:
                _fail(f"the dims of {name} should be 2, but got {t.ndim} (shape {t.shape})")
        f["num_expert"] = pr.dim(1)
        if drop_and_pad:
            _tiling_prob_pad(f, core_num, tok_len)
        else:
            _tiling_prob_no_pad(f, core_num, tok_len, length_by_type(prob_dtype))

    mixed = 1 if prob_dtype != tok_dtype else 0
    key = mixed * 100 + (10 if drop_and_pad else 0) + (0 if pr is None else 1)
    token_bytes = as_dtype(tok_dtype).itemsize
    probs_bytes = 4 if mixed else token_bytes
    return TilingResult(tiling_key=key, block_dim=core_num, workspace_size=soc.lib_api_workspace, fields=f,
                        ub_plan=ub_plan(key, f, token_bytes, probs_bytes), schedule_mode=1, soc=soc)
