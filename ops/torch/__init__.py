"""The MoE token permute / unpermute operators as PyTorch ops, backed by the simulated aclnn calls.

    import ops.torch as npu                   # registers torch.ops.npu.* and torch.ops.cann_ops_transformer.*
    out, sorted_indices = npu.npu_moe_token_permute(tokens, indices)
    with npu.device("ascend950"):             # the chip profile; ascend910b outside every block
        ...

The ops carry torch_npu's names and op-plugin's schemas (torch.ops.npu.npu_moe_token_permute, ...), CPU kernels
that run the simulated operators on zero-copy views of the tensors, fake kernels (FakeTensor, the meta device,
torch.compile) and the autograd formulas of op-plugin's derivatives.yaml, so the forward ops are differentiable
through the simulated Grad operators. `moe_token_permute` is the cann_ops_transformer extension's op, with
quant_mode (MX quantisation on ascend950, ignored elsewhere as on the chips). `patch_megatron()` routes
Megatron-Core's moe_utils permute / unpermute through them, as MindSpeed routes them to torch_npu.

This package imports torch; `ops`, `tiling` and `ascend_sim` never do. Install it with `pip install -e '.[torch]'`.
"""
from __future__ import annotations

try:
    import torch
except ImportError as e:     # pragma: no cover - the core package is usable without torch
    raise ImportError("ops.torch needs PyTorch: pip install -e '.[torch]' (pins torch==2.13.0)") from e

from . import _library
from ._bridge import AclnnRuntimeError, TorchArgumentError, check_tensor, current_soc, device
from .megatron import patch_megatron

_library.register()

_npu = torch.ops.npu


def _checked(op: str, tensors: dict, index=()):
    """The public calls' argument checks, before the dispatcher: a tensor on another device or with a bad layout
    gets a message naming the argument instead of the dispatcher's missing-kernel error."""
    for name, t in tensors.items():
        check_tensor(op, name, t, index=name in index, optional=t is None)


def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    """torch_npu.npu_moe_token_permute: (permuted_tokens (M, H) tokens dtype, sorted_indices (N*K,) int32);
    M = min(num_out_tokens, N*K) when positive, else N*K + num_out_tokens (None counts as 0)."""
    _checked("npu_moe_token_permute", {"tokens": tokens, "indices": indices}, ("indices",))
    return _npu.npu_moe_token_permute(tokens, indices, num_out_tokens, padded_mode)


def npu_moe_token_permute_grad(tokens, grad_permuted_tokens, indices, sorted_indices, padded_mode=False):
    """torch_npu.npu_moe_token_permute_grad: the tokens' gradient (N, H), tokens dtype."""
    _checked("npu_moe_token_permute_grad", {"tokens": tokens, "grad_permuted_tokens": grad_permuted_tokens,
                                            "indices": indices, "sorted_indices": sorted_indices},
             ("indices", "sorted_indices"))
    return _npu.npu_moe_token_permute_grad(tokens, grad_permuted_tokens, indices, sorted_indices, padded_mode)


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    """torch_npu.npu_moe_token_unpermute: (len(sorted_indices) / K, H), permuted_tokens dtype (K = probs.shape[1]
    or 1)."""
    _checked("npu_moe_token_unpermute", {"permuted_tokens": permuted_tokens, "sorted_indices": sorted_indices,
                                         "probs": probs}, ("sorted_indices",))
    return _npu.npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs, padded_mode, restore_shape)


def npu_moe_token_unpermute_grad(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs=None,
                                 padded_mode=False, restore_shape=None):
    """torch_npu.npu_moe_token_unpermute_grad: (permuted tokens' gradient, probs' gradient); the latter is a
    0-dim tensor without probs, as op-plugin sizes it."""
    _checked("npu_moe_token_unpermute_grad", {"permuted_tokens": permuted_tokens,
                                              "grad_unpermuted_tokens": grad_unpermuted_tokens,
                                              "sorted_indices": sorted_indices, "probs": probs}, ("sorted_indices",))
    return _npu.npu_moe_token_unpermute_grad(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs,
                                             padded_mode, restore_shape)


def npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None, num_out_tokens=None,
                                           drop_and_pad=False):
    """torch_npu.npu_moe_token_permute_with_routing_map: (permuted_tokens (M, H), permuted_probs (M,) or an empty
    tensor without probs, sorted_indices (M,) int32); M = num_out_tokens (default N) rounded down to a multiple of
    N, or of E with drop_and_pad, as op-plugin sizes it."""
    _checked("npu_moe_token_permute_with_routing_map", {"tokens": tokens, "routing_map": routing_map,
                                                        "probs": probs}, ("routing_map",))
    return _npu.npu_moe_token_permute_with_routing_map(tokens, routing_map, probs=probs,
                                                       num_out_tokens=num_out_tokens, drop_and_pad=drop_and_pad)


def npu_moe_token_permute_with_routing_map_grad(permuted_token_out_grad, probs_grad, sorted_indices, routing_map,
                                                experts_num, tokens_num, drop_and_pad):
    """torch_npu.npu_moe_token_permute_with_routing_map_grad: (tokens' gradient (tokens_num, H), probs' gradient
    (tokens_num, experts_num) or an empty tensor without probs_grad)."""
    _checked("npu_moe_token_permute_with_routing_map_grad",
             {"permuted_token_out_grad": permuted_token_out_grad, "probs_grad": probs_grad,
              "sorted_indices": sorted_indices, "routing_map": routing_map}, ("sorted_indices", "routing_map"))
    return _npu.npu_moe_token_permute_with_routing_map_grad(permuted_token_out_grad, probs_grad, sorted_indices,
                                                            routing_map, experts_num, tokens_num, drop_and_pad)


def npu_moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, restore_shape, *, probs=None,
                                             routing_map=None, drop_and_pad=False):
    """torch_npu.npu_moe_token_unpermute_with_routing_map: the tokens (restore_shape[0], restore_shape[1])."""
    _checked("npu_moe_token_unpermute_with_routing_map", {"permuted_tokens": permuted_tokens,
                                                          "sorted_indices": sorted_indices, "probs": probs,
                                                          "routing_map": routing_map},
             ("sorted_indices", "routing_map"))
    return _npu.npu_moe_token_unpermute_with_routing_map(permuted_tokens, sorted_indices, restore_shape, probs=probs,
                                                         routing_map=routing_map, drop_and_pad=drop_and_pad)


def npu_moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map,
                                                  permuted_tokens, probs, drop_and_pad, restore_shape):
    """torch_npu.npu_moe_token_unpermute_with_routing_map_grad: (permuted tokens' gradient (len(out_index), H),
    probs' gradient (probs' shape, in the gradient's dtype as op-plugin allocates it) or an empty tensor)."""
    _checked("npu_moe_token_unpermute_with_routing_map_grad",
             {"unpermuted_tokens_grad": unpermuted_tokens_grad, "out_index": out_index,
              "permuted_token_id": permuted_token_id, "routing_map": routing_map, "permuted_tokens": permuted_tokens,
              "probs": probs}, ("out_index", "permuted_token_id", "routing_map"))
    return _npu.npu_moe_token_unpermute_with_routing_map_grad(unpermuted_tokens_grad, out_index, permuted_token_id,
                                                              routing_map, permuted_tokens, probs, drop_and_pad,
                                                              restore_shape)


def moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False, quant_mode=-1):
    """cann_ops_transformer.ops.moe_token_permute: (permuted_tokens, sorted_indices, expanded_scale). On ascend950,
    quant_mode 2 / 3 gives float8_e5m2 / float8_e4m3fn tokens (M, H) and float8_e8m0fnu scales
    (M, AlignUp(ceil(H/32), 2)); 9 gives packed MXFP4 uint8 (M, H/2) and scales (M, ceil(H/64), 2). Elsewhere (or
    with -1) the tokens keep their dtype and expanded_scale is an empty float32 tensor."""
    _checked("moe_token_permute", {"tokens": tokens, "indices": indices}, ("indices",))
    return torch.ops.cann_ops_transformer.moe_token_permute(tokens, indices, num_out_tokens, padded_mode, quant_mode)


__all__ = [
    "AclnnRuntimeError", "TorchArgumentError", "current_soc", "device", "patch_megatron", "moe_token_permute",
    "npu_moe_token_permute", "npu_moe_token_permute_grad", "npu_moe_token_unpermute", "npu_moe_token_unpermute_grad",
    "npu_moe_token_permute_with_routing_map", "npu_moe_token_permute_with_routing_map_grad",
    "npu_moe_token_unpermute_with_routing_map", "npu_moe_token_unpermute_with_routing_map_grad",
]
