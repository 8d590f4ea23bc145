"""The operators as torch ops: op-plugin's schemas under torch_npu's names (namespace `npu`), the
cann_ops_transformer extension's `moe_token_permute` (namespace `cann_ops_transformer`), a CPU kernel per op that
runs the simulated aclnn call on zero-copy views, a fake kernel per op (op-plugin's / register_meta's output-size
rules) and the autograd formulas of op-plugin's derivatives.yaml.

Sources (facts only): Ascend/op-plugin@517f2e7 op_plugin/config/op_plugin_functions.yaml (schemas, output sizes,
the aclnn each op runs), op_plugin/config/derivatives.yaml (backward formulas), op_plugin/utils/KernelNpuOutputSize
.cpp (shape rules and their TORCH_CHECKs), op_plugin/ops/opapi/MoeToken*OpApi.cpp (hand-written ones).

Where op-plugin returns an undefined tensor (no probs: permuted probs, probs grads) a Python kernel cannot, so
the op returns an empty (0,) tensor of the dtype op-plugin would use; `_npu_moe_token_unpermute`'s second output
(op-plugin: the input itself, kept for the backward) is likewise an empty tensor, since a custom op's output may
not alias its input; the backward keeps permuted_tokens itself.
"""
from __future__ import annotations

import numpy as np
import torch

import ops.aclnn as aclnn
from ascend_sim.errors import SimulatorError
from tiling.status import AclnnError

from ._bridge import (
    _BIT_VIEWS,
    as_numpy,
    check_tensor,
    current_soc,
    deterministic,
    device,
    raise_as_runtime_error,
    workspace,
)

NS = "npu"
NS_EXT = "cann_ops_transformer"

SCHEMAS = {
    "npu_moe_token_permute":
        "(Tensor tokens, Tensor indices, int? num_out_tokens=None, bool padded_mode=False) -> (Tensor, Tensor)",
    "npu_moe_token_permute_grad":
        "(Tensor tokens, Tensor grad_permuted_tokens, Tensor indices, Tensor sorted_indices, bool padded_mode=False)"
        " -> Tensor",
    "npu_moe_token_permute_grad_v2":
        "(Tensor grad_permuted_tokens, Tensor sorted_indices, int tokens_size_0, ScalarType tokens_dtype, "
        "int num_topK, bool padded_mode=False) -> Tensor",
    "npu_moe_token_unpermute":
        "(Tensor permuted_tokens, Tensor sorted_indices, Tensor? probs=None, bool padded_mode=False, "
        "int[]? restore_shape=None) -> Tensor",
    "_npu_moe_token_unpermute":
        "(Tensor permuted_tokens, Tensor sorted_indices, Tensor? probs=None, bool padded_mode=False, "
        "int[]? restore_shape=None) -> (Tensor unpermuted_tokens, Tensor permuted_tokens_for_backward)",
    "npu_moe_token_unpermute_grad":
        "(Tensor permuted_tokens, Tensor grad_unpermuted_tokens, Tensor sorted_indices, Tensor? probs=None, "
        "bool padded_mode=False, int[]? restore_shape=None) -> (Tensor, Tensor)",
    "npu_moe_token_unpermute_grad_v2":
        "(Tensor grad_unpermuted_tokens, Tensor sorted_indices, int permuted_tokens_size_0, "
        "ScalarType permuted_tokens_dtype, Tensor? probs=None, bool padded_mode=False, int[]? restore_shape=None, "
        "Tensor? permuted_tokens=None) -> (Tensor, Tensor)",
    "npu_moe_token_permute_with_routing_map":
        "(Tensor tokens, Tensor routing_map, *, Tensor? probs=None, int? num_out_tokens=None, "
        "bool drop_and_pad=False) -> (Tensor, Tensor, Tensor)",
    "npu_moe_token_permute_with_routing_map_grad":
        "(Tensor permuted_token_out_grad, Tensor? probs_grad, Tensor sorted_indices, Tensor routing_map, "
        "SymInt experts_num, SymInt tokens_num, bool drop_and_pad) -> (Tensor, Tensor)",
    "npu_moe_token_unpermute_with_routing_map":
        "(Tensor permuted_tokens, Tensor sorted_indices, int[] restore_shape, *, Tensor? probs=None, "
        "Tensor? routing_map=None, bool drop_and_pad=False) -> Tensor",
    "_npu_moe_token_unpermute_with_routing_map":
        "(Tensor permuted_tokens, Tensor sorted_indices, int[] restore_shape, *, Tensor? probs=None, "
        "Tensor? routing_map=None, bool drop_and_pad=False) -> (Tensor, Tensor, Tensor, Tensor)",
    # positional twins of the two ops with keyword-only tensors (torch.library's autograd takes none of those)
    "_sim_moe_token_permute_with_routing_map":
        "(Tensor tokens, Tensor routing_map, Tensor? probs, int? num_out_tokens, bool drop_and_pad)"
        " -> (Tensor, Tensor, Tensor)",
    "_sim_moe_token_unpermute_with_routing_map":
        "(Tensor permuted_tokens, Tensor sorted_indices, int[] restore_shape, Tensor? probs, Tensor? routing_map, "
        "bool drop_and_pad) -> (Tensor, Tensor, Tensor, Tensor)",
    "npu_moe_token_unpermute_with_routing_map_grad":
        "(Tensor unpermuted_tokens_grad, Tensor out_index, Tensor permuted_token_id, Tensor? routing_map, "
        "Tensor? permuted_tokens, Tensor? probs, bool drop_and_pad, int[] restore_shape) -> (Tensor, Tensor)",
}
EXT_SCHEMAS = {
    "moe_token_permute":
        "(Tensor tokens, Tensor indices, int? num_out_tokens=None, bool padded_mode=False, int quant_mode=-1)"
        " -> (Tensor, Tensor, Tensor)",
}


def _npu(name):
    return getattr(getattr(torch.ops, NS), name).default


# CompositeImplicitAutograd ops: op-plugin's public unpermutes keep their underscore twin's first output; the ops
# with keyword-only tensors forward to their positional twins
def _unpermute_composite(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    return _npu("_npu_moe_token_unpermute")(permuted_tokens, sorted_indices, probs, padded_mode, restore_shape)[0]


def _pwrm_composite(tokens, routing_map, *, probs=None, num_out_tokens=None, drop_and_pad=False):
    return _npu("_sim_moe_token_permute_with_routing_map")(tokens, routing_map, probs, num_out_tokens, drop_and_pad)


def _uwrm_twin_composite(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
                         drop_and_pad=False):
    return _npu("_sim_moe_token_unpermute_with_routing_map")(permuted_tokens, sorted_indices, restore_shape, probs,
                                                            routing_map, drop_and_pad)


def _uwrm_composite(permuted_tokens, sorted_indices, restore_shape, *, probs=None, routing_map=None,
                    drop_and_pad=False):
    return _npu("_npu_moe_token_unpermute_with_routing_map")(permuted_tokens, sorted_indices, restore_shape,
                                                            probs=probs, routing_map=routing_map,
                                                            drop_and_pad=drop_and_pad)[0]


COMPOSITE = {
    "npu_moe_token_unpermute": _unpermute_composite,
    "npu_moe_token_permute_with_routing_map": _pwrm_composite,
    "_npu_moe_token_unpermute_with_routing_map": _uwrm_twin_composite,
    "npu_moe_token_unpermute_with_routing_map": _uwrm_composite,
}

QUANT_NONE, QUANT_MXFP8_E5M2, QUANT_MXFP8_E4M3FN, QUANT_MXFP4_E2M1 = -1, 2, 3, 9
_QUANT_DTYPE = {QUANT_MXFP8_E5M2: torch.float8_e5m2, QUANT_MXFP8_E4M3FN: torch.float8_e4m3fn,
                QUANT_MXFP4_E2M1: torch.uint8}


def _check_dim(op, name, t, dims):
    """op-plugin's TORCH_CHECK on a tensor's rank (a RuntimeError, as there)."""
    if t.dim() not in dims:
        want = " or ".join(str(d) for d in dims)
        raise RuntimeError(f"{op}: the dims of input {name} should be {want} dimensional, "
                           f"but got {t.dim()}-dimensional.")


def _actual_num_out_tokens(num_out_tokens, flatten_size):
    """op-plugin's rule for MoeTokenPermute's row count: a positive request is capped at tokens * topK; zero or a
    negative one counts back from it."""
    value = 0 if num_out_tokens is None else num_out_tokens
    return min(value, flatten_size) if value > 0 else value + flatten_size


# --- output shapes (shared by the fake kernels and the CPU kernels) -------------------------------------------
# Each returns [(shape, dtype), ...] for the op's outputs, from the input tensors' shapes alone.
def _permute_shapes(tokens, indices, num_out_tokens, op="npu_moe_token_permute"):
    _check_dim(op, "tokens", tokens, (2,))
    _check_dim(op, "indices", indices, (1, 2))
    rows = _actual_num_out_tokens(num_out_tokens, indices.numel())
    return [((rows, tokens.shape[1]), tokens.dtype), ((indices.numel(),), torch.int32)]


def _quant_permute_shapes(tokens, indices, num_out_tokens, quant_mode, soc):
    """cann_ops_transformer's meta rule; quant_mode acts on ascend950 only, as on the chips."""
    (rows_h, tok_dtype), sorted_ = _permute_shapes(tokens, indices, num_out_tokens, "moe_token_permute")
    quant = quant_mode if soc.name == "ascend950" else QUANT_NONE
    if quant == QUANT_NONE:
        return [(rows_h, tok_dtype), sorted_, ((0,), torch.float32)]
    if quant not in _QUANT_DTYPE:
        raise RuntimeError(f"moe_token_permute: quant_mode must be -1, 2, 3 or 9, got {quant_mode}")
    rows, h = rows_h
    blocks = -(-h // 32)
    if quant == QUANT_MXFP4_E2M1:
        if h % 2:
            raise RuntimeError(f"moe_token_permute: quant_mode 9 (MXFP4) packs two values a byte: the hidden size "
                               f"must be even, got {h}")
        return [((rows, h // 2), torch.uint8), sorted_, ((rows, -(-h // 64), 2), torch.float8_e8m0fnu)]
    return [((rows, h), _QUANT_DTYPE[quant]), sorted_, ((rows, blocks + blocks % 2), torch.float8_e8m0fnu)]


def _permute_grad_v2_shapes(grad, sorted_indices, tokens_size_0, tokens_dtype, op="npu_moe_token_permute_grad_v2"):
    _check_dim(op, "grad_permuted_tokens", grad, (2,))
    _check_dim(op, "sorted_indices", sorted_indices, (1, 2))
    return [((tokens_size_0, grad.shape[1]), tokens_dtype)]


def _unpermute_shapes(permuted_tokens, sorted_indices, probs):
    op = "npu_moe_token_unpermute"
    if probs is not None:
        _check_dim(op, "probs", probs, (2,))
    _check_dim(op, "permuted_tokens", permuted_tokens, (2,))
    _check_dim(op, "sorted_indices", sorted_indices, (1,))
    topk = 1 if probs is None else probs.shape[1]
    if topk <= 0:
        raise RuntimeError(f"{op}: the topk should be greater than zero, but got {topk}")
    return [((sorted_indices.shape[0] // topk, permuted_tokens.shape[-1]), permuted_tokens.dtype),
            ((0,), permuted_tokens.dtype)]


def _unpermute_grad_shapes(permuted_rows, permuted_dtype, grad, sorted_indices, probs, op):
    _check_dim(op, "grad_unpermuted_tokens", grad, (2,))
    _check_dim(op, "sorted_indices", sorted_indices, (1,))
    if probs is not None:
        _check_dim(op, "probs", probs, (2,))
        probs_out = (tuple(probs.shape), probs.dtype)
    else:
        probs_out = ((), grad.dtype)    # op-plugin sizes it {}: a 0-dim tensor
    return [((permuted_rows, grad.shape[1]), permuted_dtype), probs_out]


def _pwrm_shapes(tokens, routing_map, probs, num_out_tokens, drop_and_pad):
    value = tokens.shape[0] if num_out_tokens is None else num_out_tokens
    per = routing_map.shape[1 if drop_and_pad else 0]
    # C++ integer division of int64 (truncation); a zero divisor is the aclnn's to refuse, with its status
    rows = int(value / per) * per if per else 0
    probs_out = ((rows,), probs.dtype) if probs is not None else ((0,), tokens.dtype)
    return [((rows, tokens.shape[1]), tokens.dtype), probs_out, ((rows,), torch.int32)]


def _pwrm_grad_shapes(grad, probs_grad, experts_num, tokens_num):
    probs_out = ((tokens_num, experts_num), probs_grad.dtype) if probs_grad is not None else ((0,), grad.dtype)
    return [((tokens_num, grad.shape[1]), grad.dtype), probs_out]


def _uwrm_shapes(permuted_tokens, sorted_indices, restore_shape, probs):
    if len(restore_shape) < 2:
        raise RuntimeError(f"npu_moe_token_unpermute_with_routing_map: restore_shape must hold (tokens, hidden), "
                           f"got {list(restore_shape)}")
    s = (tuple(sorted_indices.shape), sorted_indices.dtype)
    probs_out = (tuple(sorted_indices.shape), probs.dtype) if probs is not None else ((0,), permuted_tokens.dtype)
    return [((restore_shape[0], restore_shape[1]), permuted_tokens.dtype), s, s, probs_out]


def _uwrm_grad_shapes(grad, out_index, probs):
    probs_out = (tuple(probs.shape), grad.dtype) if probs is not None else ((0,), grad.dtype)
    return [((out_index.shape[0], grad.shape[1]), grad.dtype), probs_out]


# --- kernels ---------------------------------------------------------------------------------------------------
def _outputs(like, shapes, zero=True):
    """Output tensors of `shapes` on like's device (zeros on the CPU: a slot the real op leaves unwritten reads
    as 0 here, deterministically)."""
    if zero and like.device.type == "cpu":
        return [_calloc(shape, dtype) for shape, dtype in shapes]
    return [torch.empty(shape, dtype=dtype, device=like.device) for shape, dtype in shapes]


# torch dtype -> the NumPy dtype of its bits (bfloat16 / float8 have none of their own); filled on first use
_CARRIERS: dict = {}


def _carrier(dtype) -> np.dtype:
    carrier = _CARRIERS.get(dtype)
    if carrier is None:
        bits = _BIT_VIEWS[dtype][0] if dtype in _BIT_VIEWS else dtype
        carrier = _CARRIERS[dtype] = torch.empty(0, dtype=bits).numpy().dtype
    return carrier


def _calloc(shape, dtype) -> "torch.Tensor":
    """A zeroed CPU tensor from np.zeros (calloc: the pages are zeroed as the kernel first writes them, as for the
    friendly calls' outputs), not torch.zeros, whose memset is one more pass over the output (5.7 ms on a
    4096 x 4096 bf16 permute, 1.8x the friendly call). bfloat16 / float8 are allocated as their bits and viewed."""
    t = torch.from_numpy(np.zeros(tuple(shape), dtype=_carrier(dtype)))
    return t if t.dtype == dtype else t.view(dtype)


def _run(op, get_workspace_size, run, *args, **kwargs):
    """Both phases of a simulated aclnn call on NumPy views, on the profile in use."""
    try:                    # aclnn_errors, written out: a context manager costs ~2 us per small call
        size, executor = get_workspace_size(*args, soc=current_soc(), **kwargs)
        run(workspace(size), size, executor)
    except (AclnnError, SimulatorError) as e:
        raise_as_runtime_error(op, e)


def _tensors(op, **named):
    """check_tensor each keyword argument: a name ending in _opt is optional, one starting with idx_ is an index
    tensor (the suffix and prefix are not part of the argument's name)."""
    out = []
    for key, t in named.items():
        optional, index = key.endswith("_opt"), key.startswith("idx_")
        name = key.removeprefix("idx_").removesuffix("_opt")
        out.append(check_tensor(op, name, t, index=index, optional=optional))
    return out


def _np(*ts):
    return [as_numpy(t) for t in ts]


def permute_cpu(tokens, indices, num_out_tokens=None, padded_mode=False):
    op = "npu_moe_token_permute"
    _tensors(op, tokens=tokens, idx_indices=indices)
    shapes = _permute_shapes(tokens, indices, num_out_tokens)
    out, sorted_indices = _outputs(tokens, shapes)
    actual = _actual_num_out_tokens(num_out_tokens, indices.numel())
    _run(op, aclnn.moe_token_permute_get_workspace_size, aclnn.moe_token_permute,
         *_np(tokens, indices), actual, padded_mode, *_np(out, sorted_indices))
    return out, sorted_indices


def ext_permute_cpu(tokens, indices, num_out_tokens=None, padded_mode=False, quant_mode=-1):
    op = "moe_token_permute"
    _tensors(op, tokens=tokens, idx_indices=indices)
    soc = current_soc()
    shapes = _quant_permute_shapes(tokens, indices, num_out_tokens, quant_mode, soc)
    outs = _outputs(tokens, shapes)
    actual = _actual_num_out_tokens(num_out_tokens, indices.numel())
    _run(op, aclnn.moe_token_permute_v2_get_workspace_size, aclnn.moe_token_permute_v2,
         *_np(tokens, indices), actual, padded_mode, quant_mode, *_np(*outs))
    return tuple(outs)


def permute_grad_v2_cpu(grad_permuted_tokens, sorted_indices, tokens_size_0, tokens_dtype, num_topK,
                        padded_mode=False):
    op = "npu_moe_token_permute_grad_v2"
    _tensors(op, grad_permuted_tokens=grad_permuted_tokens, idx_sorted_indices=sorted_indices)
    (out,) = _outputs(grad_permuted_tokens,
                      _permute_grad_v2_shapes(grad_permuted_tokens, sorted_indices, tokens_size_0, tokens_dtype))
    _run(op, aclnn.moe_token_permute_grad_get_workspace_size, aclnn.moe_token_permute_grad,
         *_np(grad_permuted_tokens, sorted_indices), num_topK, padded_mode, as_numpy(out))
    return out


def permute_grad_cpu(tokens, grad_permuted_tokens, indices, sorted_indices, padded_mode=False):
    op = "npu_moe_token_permute_grad"
    _tensors(op, tokens=tokens, grad_permuted_tokens=grad_permuted_tokens, idx_indices=indices,
             idx_sorted_indices=sorted_indices)
    _check_dim(op, "tokens", tokens, (2,))
    _check_dim(op, "indices", indices, (1, 2))
    (out,) = _outputs(tokens, _permute_grad_v2_shapes(grad_permuted_tokens, sorted_indices, tokens.shape[0],
                                                      tokens.dtype, op))
    topk = 1 if indices.dim() == 1 else indices.shape[1]
    _run(op, aclnn.moe_token_permute_grad_get_workspace_size, aclnn.moe_token_permute_grad,
         *_np(grad_permuted_tokens, sorted_indices), topk, padded_mode, as_numpy(out))
    return out


def _restore(restore_shape):
    return (1,) if restore_shape is None else tuple(restore_shape)


def unpermute_cpu(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    op = "npu_moe_token_unpermute"
    _tensors(op, permuted_tokens=permuted_tokens, idx_sorted_indices=sorted_indices, probs_opt=probs)
    out, keep = _outputs(permuted_tokens, _unpermute_shapes(permuted_tokens, sorted_indices, probs))
    _run(op, aclnn.moe_token_unpermute_get_workspace_size, aclnn.moe_token_unpermute,
         *_np(permuted_tokens, sorted_indices, probs), padded_mode, _restore(restore_shape), as_numpy(out))
    return out, keep


def _unpermute_grad(op, permuted_tokens, grad, sorted_indices, probs, padded_mode, restore_shape, rows, dtype):
    _tensors(op, grad_unpermuted_tokens=grad, idx_sorted_indices=sorted_indices, probs_opt=probs,
             permuted_tokens_opt=permuted_tokens)
    shapes = _unpermute_grad_shapes(rows, dtype, grad, sorted_indices, probs, op)
    out, probs_grad = _outputs(grad, shapes)
    _run(op, aclnn.moe_token_unpermute_grad_get_workspace_size, aclnn.moe_token_unpermute_grad,
         *_np(permuted_tokens, grad, sorted_indices, probs), padded_mode, _restore(restore_shape),
         as_numpy(out), as_numpy(probs_grad) if probs is not None else None)
    return out, probs_grad


def unpermute_grad_cpu(permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs=None, padded_mode=False,
                       restore_shape=None):
    op = "npu_moe_token_unpermute_grad"
    check_tensor(op, "permuted_tokens", permuted_tokens)
    _check_dim(op, "permuted_tokens", permuted_tokens, (2,))
    return _unpermute_grad(op, permuted_tokens, grad_unpermuted_tokens, sorted_indices, probs, padded_mode,
                           restore_shape, permuted_tokens.shape[0], permuted_tokens.dtype)


def unpermute_grad_v2_cpu(grad_unpermuted_tokens, sorted_indices, permuted_tokens_size_0, permuted_tokens_dtype,
                          probs=None, padded_mode=False, restore_shape=None, permuted_tokens=None):
    return _unpermute_grad("npu_moe_token_unpermute_grad_v2", permuted_tokens, grad_unpermuted_tokens,
                           sorted_indices, probs, padded_mode, restore_shape, permuted_tokens_size_0,
                           permuted_tokens_dtype)


def pwrm_cpu(tokens, routing_map, probs, num_out_tokens, drop_and_pad):
    op = "npu_moe_token_permute_with_routing_map"
    _tensors(op, tokens=tokens, idx_routing_map=routing_map, probs_opt=probs)
    _check_dim(op, "tokens", tokens, (2,))
    _check_dim(op, "routing_map", routing_map, (2,))
    out, permuted_probs, sorted_indices = _outputs(tokens, _pwrm_shapes(tokens, routing_map, probs, num_out_tokens,
                                                                        drop_and_pad))
    value = tokens.shape[0] if num_out_tokens is None else num_out_tokens
    _run(op, aclnn.moe_token_permute_with_routing_map_get_workspace_size, aclnn.moe_token_permute_with_routing_map,
         *_np(tokens, routing_map, probs), value, drop_and_pad, as_numpy(out),
         as_numpy(permuted_probs) if probs is not None else None, as_numpy(sorted_indices))
    return out, permuted_probs, sorted_indices


def pwrm_grad_cpu(permuted_token_out_grad, probs_grad, sorted_indices, routing_map, experts_num, tokens_num,
                  drop_and_pad):
    op = "npu_moe_token_permute_with_routing_map_grad"
    _tensors(op, permuted_token_out_grad=permuted_token_out_grad, probs_grad_opt=probs_grad,
             idx_sorted_indices=sorted_indices, idx_routing_map=routing_map)
    _check_dim(op, "permuted_token_out_grad", permuted_token_out_grad, (2,))
    out, probs_out = _outputs(permuted_token_out_grad,
                              _pwrm_grad_shapes(permuted_token_out_grad, probs_grad, experts_num, tokens_num))
    _run(op, aclnn.moe_token_permute_with_routing_map_grad_get_workspace_size,
         aclnn.moe_token_permute_with_routing_map_grad,
         *_np(permuted_token_out_grad, probs_grad, sorted_indices, routing_map), experts_num, tokens_num,
         drop_and_pad, as_numpy(out), as_numpy(probs_out) if probs_grad is not None else None,
         deterministic=deterministic())
    return out, probs_out


def uwrm_cpu(permuted_tokens, sorted_indices, restore_shape, probs, routing_map, drop_and_pad):
    op = "npu_moe_token_unpermute_with_routing_map"
    _tensors(op, permuted_tokens=permuted_tokens, idx_sorted_indices=sorted_indices, probs_opt=probs,
             idx_routing_map_opt=routing_map)
    outs = _outputs(permuted_tokens, _uwrm_shapes(permuted_tokens, sorted_indices, restore_shape, probs))
    out, out_index, token_id, permuted_probs = outs
    _run(op, aclnn.moe_token_unpermute_with_routing_map_get_workspace_size,
         aclnn.moe_token_unpermute_with_routing_map,
         *_np(permuted_tokens, sorted_indices, routing_map, probs), drop_and_pad, tuple(restore_shape),
         *_np(out, out_index, token_id), as_numpy(permuted_probs) if probs is not None else None,
         deterministic=deterministic())
    return out, out_index, token_id, permuted_probs


def uwrm_grad_cpu(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map, permuted_tokens, probs,
                  drop_and_pad, restore_shape):
    op = "npu_moe_token_unpermute_with_routing_map_grad"
    _tensors(op, unpermuted_tokens_grad=unpermuted_tokens_grad, idx_out_index=out_index,
             idx_permuted_token_id=permuted_token_id, idx_routing_map_opt=routing_map,
             permuted_tokens_opt=permuted_tokens, probs_opt=probs)
    _check_dim(op, "unpermuted_tokens_grad", unpermuted_tokens_grad, (2,))
    _check_dim(op, "out_index", out_index, (1,))
    out, probs_grad = _outputs(unpermuted_tokens_grad, _uwrm_grad_shapes(unpermuted_tokens_grad, out_index, probs))
    _run(op, aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size,
         aclnn.moe_token_unpermute_with_routing_map_grad,
         *_np(unpermuted_tokens_grad, out_index, permuted_token_id, routing_map, permuted_tokens, probs),
         drop_and_pad, tuple(restore_shape), as_numpy(out), as_numpy(probs_grad) if probs is not None else None)
    return out, probs_grad


CPU_KERNELS = {
    "npu_moe_token_permute": permute_cpu,
    "npu_moe_token_permute_grad": permute_grad_cpu,
    "npu_moe_token_permute_grad_v2": permute_grad_v2_cpu,
    "_npu_moe_token_unpermute": unpermute_cpu,
    "npu_moe_token_unpermute_grad": unpermute_grad_cpu,
    "npu_moe_token_unpermute_grad_v2": unpermute_grad_v2_cpu,
    "_sim_moe_token_permute_with_routing_map": pwrm_cpu,
    "npu_moe_token_permute_with_routing_map_grad": pwrm_grad_cpu,
    "_sim_moe_token_unpermute_with_routing_map": uwrm_cpu,
    "npu_moe_token_unpermute_with_routing_map_grad": uwrm_grad_cpu,
}


# --- fake kernels --------------------------------------------------------------------------------------------
def _fake(like, shapes):
    return tuple(like.new_empty(shape, dtype=dtype) for shape, dtype in shapes)


FAKE_KERNELS = {
    "npu_moe_token_permute": lambda tokens, indices, num_out_tokens=None, padded_mode=False:
        _fake(tokens, _permute_shapes(tokens, indices, num_out_tokens)),
    "npu_moe_token_permute_grad": lambda tokens, grad, indices, sorted_indices, padded_mode=False:
        _fake(grad, _permute_grad_v2_shapes(grad, sorted_indices, tokens.shape[0], tokens.dtype,
                                            "npu_moe_token_permute_grad"))[0],
    "npu_moe_token_permute_grad_v2": lambda grad, sorted_indices, size0, dtype, topk, padded_mode=False:
        _fake(grad, _permute_grad_v2_shapes(grad, sorted_indices, size0, dtype))[0],
    "_npu_moe_token_unpermute": lambda permuted, sorted_indices, probs=None, padded_mode=False, restore_shape=None:
        _fake(permuted, _unpermute_shapes(permuted, sorted_indices, probs)),
    "npu_moe_token_unpermute_grad": lambda permuted, grad, sorted_indices, probs=None, padded_mode=False,
        restore_shape=None: _fake(grad, _unpermute_grad_shapes(permuted.shape[0], permuted.dtype, grad,
                                                               sorted_indices, probs, "npu_moe_token_unpermute_grad")),
    "npu_moe_token_unpermute_grad_v2": lambda grad, sorted_indices, size0, dtype, probs=None, padded_mode=False,
        restore_shape=None, permuted_tokens=None: _fake(grad, _unpermute_grad_shapes(
            size0, dtype, grad, sorted_indices, probs, "npu_moe_token_unpermute_grad_v2")),
    "_sim_moe_token_permute_with_routing_map": lambda tokens, routing_map, probs, num_out_tokens,
        drop_and_pad: _fake(tokens, _pwrm_shapes(tokens, routing_map, probs, num_out_tokens, drop_and_pad)),
    "npu_moe_token_permute_with_routing_map_grad": lambda grad, probs_grad, sorted_indices, routing_map,
        experts_num, tokens_num, drop_and_pad: _fake(grad, _pwrm_grad_shapes(grad, probs_grad, experts_num,
                                                                            tokens_num)),
    "_sim_moe_token_unpermute_with_routing_map": lambda permuted, sorted_indices, restore_shape, probs,
        routing_map, drop_and_pad: _fake(permuted, _uwrm_shapes(permuted, sorted_indices, restore_shape,
                                                                           probs)),
    "npu_moe_token_unpermute_with_routing_map_grad": lambda grad, out_index, token_id, routing_map, permuted,
        probs, drop_and_pad, restore_shape: _fake(grad, _uwrm_grad_shapes(grad, out_index, probs)),
}


def ext_permute_fake(tokens, indices, num_out_tokens=None, padded_mode=False, quant_mode=-1):
    return _fake(tokens, _quant_permute_shapes(tokens, indices, num_out_tokens, quant_mode, current_soc()))


# --- autograd (derivatives.yaml) -------------------------------------------------------------------------------
def _save_soc(ctx):
    ctx.soc = current_soc()     # the backward runs on the forward's chip, wherever backward() is called


def _permute_setup(ctx, inputs, output):
    tokens, indices, _num_out_tokens, padded_mode = inputs[:4]
    ctx.rows, ctx.dtype = tokens.shape[0], tokens.dtype
    ctx.topk = 1 if indices.dim() == 1 else indices.shape[-1]
    ctx.padded_mode = padded_mode
    ctx.quantised = len(inputs) > 4 and output[0].dtype != tokens.dtype
    ctx.save_for_backward(output[1])
    _save_soc(ctx)


def _permute_backward(ctx, grad, *_unused):
    if ctx.quantised:
        raise RuntimeError("moe_token_permute: a quantised (MX) permute has no gradient")
    (sorted_indices,) = ctx.saved_tensors
    with device(ctx.soc):
        d_tokens = _npu("npu_moe_token_permute_grad_v2")(grad.contiguous(), sorted_indices, ctx.rows, ctx.dtype,
                                                         ctx.topk, ctx.padded_mode)
    return (d_tokens,) + (None,) * (ctx.n_inputs - 1)


def _permute_setup_v1(ctx, inputs, output):
    ctx.n_inputs = 4
    _permute_setup(ctx, inputs, output)


def _permute_setup_ext(ctx, inputs, output):
    ctx.n_inputs = 5
    _permute_setup(ctx, inputs, output)


def _unpermute_setup(ctx, inputs, output):
    permuted, sorted_indices, probs, padded_mode, restore_shape = inputs
    ctx.padded_mode, ctx.restore_shape = padded_mode, restore_shape
    ctx.has_probs = probs is not None
    ctx.save_for_backward(permuted, sorted_indices, probs)
    _save_soc(ctx)


def _unpermute_backward(ctx, grad, _unused):
    permuted, sorted_indices, probs = ctx.saved_tensors
    with device(ctx.soc):
        d_permuted, d_probs = _npu("npu_moe_token_unpermute_grad_v2")(
            grad.contiguous(), sorted_indices, permuted.shape[0], permuted.dtype, probs, ctx.padded_mode,
            ctx.restore_shape, permuted)
    return d_permuted, None, d_probs if ctx.has_probs else None, None, None


def _pwrm_setup(ctx, inputs, output):
    tokens, routing_map, probs, _num_out_tokens, drop_and_pad = inputs
    ctx.tokens_num, ctx.experts_num = tokens.shape[0], routing_map.shape[1]
    ctx.drop_and_pad, ctx.has_probs = drop_and_pad, probs is not None
    ctx.probs_dtype = output[1].dtype
    ctx.save_for_backward(output[2], routing_map)
    _save_soc(ctx)


def _pwrm_backward(ctx, d_tokens_out, d_probs_out, _unused):
    sorted_indices, routing_map = ctx.saved_tensors
    if ctx.has_probs and d_probs_out is None:       # the permuted probs were not used: their gradient is zero
        d_probs_out = torch.zeros(sorted_indices.shape, dtype=ctx.probs_dtype)
    with device(ctx.soc):
        d_tokens, d_probs = _npu("npu_moe_token_permute_with_routing_map_grad")(
            d_tokens_out.contiguous(), d_probs_out.contiguous() if ctx.has_probs else None, sorted_indices,
            routing_map, ctx.experts_num, ctx.tokens_num, ctx.drop_and_pad)
    return d_tokens, None, d_probs if ctx.has_probs else None, None, None


def _uwrm_setup(ctx, inputs, output):
    permuted, sorted_indices, restore_shape, probs, routing_map, drop_and_pad = inputs
    ctx.drop_and_pad = drop_and_pad
    ctx.restore_shape, ctx.has_probs = restore_shape, probs is not None
    ctx.has_map = routing_map is not None
    ctx.save_for_backward(permuted, sorted_indices, probs, routing_map, output[1], output[2])
    _save_soc(ctx)


def _uwrm_backward(ctx, grad, *_unused):
    permuted, sorted_indices, probs, routing_map, out_index, token_id = ctx.saved_tensors
    if not ctx.drop_and_pad:    # derivatives.yaml: without drop-and-pad the forward's sorted_indices serve as both
        out_index = token_id = sorted_indices
    with device(ctx.soc):
        d_permuted, d_probs = _npu("npu_moe_token_unpermute_with_routing_map_grad")(
            grad.contiguous(), out_index, token_id, routing_map if ctx.has_map else None,
            permuted if ctx.has_probs else None, probs if ctx.has_probs else None, ctx.drop_and_pad,
            ctx.restore_shape)
    return d_permuted, None, None, d_probs if ctx.has_probs else None, None, None


AUTOGRAD = {
    "npu_moe_token_permute": (_permute_setup_v1, _permute_backward),
    "_npu_moe_token_unpermute": (_unpermute_setup, _unpermute_backward),
    "_sim_moe_token_permute_with_routing_map": (_pwrm_setup, _pwrm_backward),
    "_sim_moe_token_unpermute_with_routing_map": (_uwrm_setup, _uwrm_backward),
}
EXT_AUTOGRAD = {"moe_token_permute": (_permute_setup_ext, _permute_backward)}


_REGISTERED = []


def register() -> None:
    """Define every op with its schema and register its kernels, once per process."""
    if _REGISTERED:
        return
    for ns, schemas, cpu, fake, grads in ((NS, SCHEMAS, CPU_KERNELS, FAKE_KERNELS, AUTOGRAD),
                                          (NS_EXT, EXT_SCHEMAS, {"moe_token_permute": ext_permute_cpu},
                                           {"moe_token_permute": ext_permute_fake}, EXT_AUTOGRAD)):
        lib = torch.library.Library(ns, "FRAGMENT")
        _REGISTERED.append(lib)         # a Library deregisters its ops when collected
        for name, schema in schemas.items():
            lib.define(name + schema)
        for name, fn in COMPOSITE.items() if ns == NS else ():
            lib.impl(name, fn, "CompositeImplicitAutograd")
        for name, fn in cpu.items():
            lib.impl(name, fn, "CPU")
        for name, fn in fake.items():
            torch.library.register_fake(f"{ns}::{name}", fn, lib=lib)
        for name, (setup, backward) in grads.items():
            torch.library.register_autograd(f"{ns}::{name}", backward, setup_context=setup, lib=lib)
