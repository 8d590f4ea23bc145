"""Tiling of MoeTokenPermuteWithRoutingMapGrad.

source: moe/moe_token_permute_with_routing_map_grad/op_host/moe_token_permute_with_routing_map_grad_tiling.cpp,
moe_token_permute_with_routing_map_grad_tiling.h, moe_token_permute_with_routing_map_grad_unpermute_tiling.h
@ 25fb6b92890d.

The struct MoeTokenPermuteWithRoutingMapGradTilingData nests two sub-structs, in this order:
the 12 fields of the unpermute gather (T-G, see tiling.unpermute_gather) and the 5 drop-and-pad
fields (capacity, expertNum, tokenNum, singleCoreLen, lastCoreLen). Each branch fills only its own
sub-struct; the other stays 0.

* dropAndPad false, key 0: T-G with permuted rows = numOutTokens = Gp.dim0,
  topK = Gp.dim0 / tokens_num (attr), tokens = Gp.dim0 / topK, no probs, 4-byte indices;
  block dim = min(tokens, cores). topK > 512 fails.
* dropAndPad true, key 1000 (TILINGKEY_DROPPAD): capacity = Gp.dim0 / num_experts; one core when
  capacity * experts <= cores, else every core; the slots are split evenly, the last core takes the
  rest.

Both branches ask for the 16 MiB system workspace only. Divisions are the tiling's safeDiv / safeMod
(truncating, 0 for a 0 divisor).
"""
from __future__ import annotations

from typing import NoReturn

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, as_dtype, length_by_type, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError
from .unpermute_gather import GATHER_FIELDS, INDEX_BYTES, gather_tiling, gather_ub_plan

OP = "MoeTokenPermuteWithRoutingMapGrad"

DROP_PAD_FIELDS = ("capacity", "expert_num", "token_num", "single_core_len", "last_core_len")
"""MoeTokenpermuteWithRoutingMapDropPadTilingData in declaration order."""
FIELDS = GATHER_FIELDS + DROP_PAD_FIELDS
"""MoeTokenPermuteWithRoutingMapGradTilingData: the unpermute sub-struct, then the drop-pad sub-struct."""

TILING_KEY_GATHER = 0
TILING_KEY_DROP_PAD = 1000      # TILINGKEY_DROPPAD
MAX_TOPK_NUM = 512
SYS_WORKSPACE_BYTES = 16 * 1024 * 1024
PROB_GRAD_OUT_QUE_BYTES = 32    # BLOCK_SIZE: the one-element staging buffer of the drop-pad kernel

GATHER_PIPE = "pipe"            # KernelMoeTokenUnpermute's TPipe
DROP_PAD_PIPE = "pipe_"         # KernelMoeTokenPermuteWithRoutingMap's TPipe (member pipe_)


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def drop_pad_ub_plan() -> tuple[UbBuffer, ...]:
    """KernelMoeTokenPermuteWithRoutingMap::Init: one VECOUT queue of one 32-byte block."""
    return (UbBuffer("ProbGradOutQue", PROB_GRAD_OUT_QUE_BYTES, 1, "TQue", "VECOUT", 1, DROP_PAD_PIPE),)


def moe_token_permute_with_routing_map_grad(permuted_token_output_grad, permuted_probs_output_grad=None,
                                            sorted_indices=None, routing_map=None, num_experts=1, tokens_num=1,
                                            drop_and_pad=False, *, soc="ascend910b") -> TilingResult:
    """Host tiling of the l0 kernel MoeTokenPermuteWithRoutingMapGrad for one chip profile.

    Args:
        permuted_token_output_grad: Gp (M, H), bf16 / fp16 / fp32 (anything with .shape and .dtype). In
            drop-and-pad mode the aclnn hands the kernel a (M, 0) tensor instead; only M is read.
        permuted_probs_output_grad, sorted_indices, routing_map: not read by the tiling (kept for the
            aclnn argument order).
        num_experts, tokens_num: the int64 attrs.
        drop_and_pad: the padded_mode attr.

    Raises TilingError where the real tiling returns GRAPH_FAILED: Gp not 2-D (the tiling reads dims
    0 and 1) and, without drop-and-pad, topK = M / tokens_num > 512.
    """
    soc = get_soc(soc)
    g = TensorDesc.of(permuted_token_output_grad)
    if g is None:
        _fail("permuted_token_output_grad has no shape")
    if g.ndim != 2:
        _fail(f"permuted_token_output_grad must be 2-D (rows, hidden), got shape {g.shape}")
    rows, hidden = g.dim(0), g.dim(1)
    f = struct_fields(FIELDS)
    if drop_and_pad:
        capacity = tdiv(rows, int(num_experts))
        slots = int(num_experts) * capacity
        core_num = soc.aiv_num if slots > soc.aiv_num else 1
        single = tdiv(slots, core_num)
        f.update(capacity=capacity, expert_num=int(num_experts), token_num=int(tokens_num),
                 single_core_len=single, last_core_len=slots - single * (core_num - 1))
        return TilingResult(tiling_key=TILING_KEY_DROP_PAD, block_dim=core_num, workspace_size=SYS_WORKSPACE_BYTES,
                            fields=f, ub_plan=drop_pad_ub_plan(), soc=soc)

    top_k = tdiv(rows, int(tokens_num))
    if top_k > MAX_TOPK_NUM:
        _fail(f"numOutTokens / tokens_num = {rows} / {tokens_num} = topK {top_k} exceeds the maximum topK "
              f"{MAX_TOPK_NUM}")
    k = 1 if top_k == -1 else top_k
    tg = gather_tiling(ub_bytes=soc.ub_size_for_tiling, core_num=soc.aiv_num, token_bytes=length_by_type(g.dtype),
                       num_tokens=tdiv(rows, k), top_k=k, hidden=hidden, num_out_tokens=rows,
                       index_bytes=INDEX_BYTES)
    f.update(tg.fields)
    dt = as_dtype(g.dtype)
    plan = gather_ub_plan(tg.fields, token_bytes=dt.itemsize, tokens_fp32=dt.itemsize == 4, pipe=GATHER_PIPE)
    return TilingResult(tiling_key=TILING_KEY_GATHER, block_dim=tg.used_core_num, workspace_size=SYS_WORKSPACE_BYTES,
                        fields=f, ub_plan=plan, soc=soc)
