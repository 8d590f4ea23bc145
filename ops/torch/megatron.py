"""Megatron-Core's MoE permute / unpermute through the simulated operators, the way MindSpeed routes them to
torch_npu on NPUs: `permute` -> npu_moe_token_permute_with_routing_map, `unpermute` ->
npu_moe_token_unpermute_with_routing_map (their gradients through the routing-map Grad operators).

    with ops.torch.patch_megatron():
        ...   # megatron.core.transformer.moe.moe_utils.permute / unpermute (and the token dispatchers' copies)
"""
from __future__ import annotations

import contextlib
import importlib
import sys

import torch

# modules that bind moe_utils' functions under their own names (`from .moe_utils import permute`)
_MODULES = ("megatron.core.transformer.moe.moe_utils", "megatron.core.transformer.moe.token_dispatcher")


def permute(tokens, routing_map, probs=None, num_out_tokens=None, fused=False, drop_and_pad=False):
    """moe_utils.permute's contract on the simulated MoeTokenPermuteWithRoutingMap: (permuted tokens, permuted
    probs or None, sorted indices). `fused` is accepted and ignored: there is one implementation here."""
    del fused
    permuted, permuted_probs, sorted_indices = torch.ops.npu.npu_moe_token_permute_with_routing_map(
        tokens.contiguous(), routing_map.contiguous(), probs=None if probs is None else probs.contiguous(),
        num_out_tokens=None if num_out_tokens is None else int(num_out_tokens), drop_and_pad=drop_and_pad)
    return permuted, permuted_probs if probs is not None else None, sorted_indices


def unpermute(permuted_tokens, sorted_indices, restore_shape, probs=None, routing_map=None, fused=False,
              drop_and_pad=False):
    """moe_utils.unpermute's contract on the simulated MoeTokenUnpermuteWithRoutingMap: the tokens restore_shape."""
    del fused
    return torch.ops.npu.npu_moe_token_unpermute_with_routing_map(
        permuted_tokens.contiguous(), sorted_indices, [int(d) for d in restore_shape],
        probs=None if probs is None else probs.contiguous(),
        routing_map=None if routing_map is None else routing_map.contiguous(), drop_and_pad=drop_and_pad)


@contextlib.contextmanager
def patch_megatron():
    """Inside the block, Megatron-Core's moe_utils.permute / unpermute (and the names the token dispatchers
    imported from it) run the simulated operators; the originals are restored on exit. ImportError if
    megatron-core is not installed."""
    saved = []
    try:
        for name in _MODULES:
            module = sys.modules.get(name) or importlib.import_module(name)
            for attr, fn in (("permute", permute), ("unpermute", unpermute)):
                if hasattr(module, attr):
                    saved.append((module, attr, getattr(module, attr)))
                    setattr(module, attr, fn)
        yield
    finally:
        for module, attr, original in reversed(saved):
            setattr(module, attr, original)
