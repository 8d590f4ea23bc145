"""Arguments every operator validates the same way (ops/_validate.py): tensors, outputs, aliasing,
attributes, the two-phase protocol; and the edge results and errors that depend on them."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import ops
from ascend_sim import OutOfBoundsError, UBOverflowError
from ops import aclnn
from ops.permute import allocate_outputs
from ops.permute import examples as permute_examples
from ops.permute import golden as permute_golden
from ops.permute import kernel as permute_kernel
from ops.unpermute_with_routing_map_grad import examples as uwrm_examples
from tests.bits import assert_bits_equal
from tiling import TensorDesc, get_soc
from tiling.status import ParamInvalidError, ParamNullptrError

BF16 = ml_dtypes.bfloat16


def _permute_case(tokens=24, hidden=16, topk=2, seed=0):
    x, idx = permute_examples.make_inputs(tokens, hidden, 8, topk=topk, seed=seed)
    return x, idx


def _uwrm_case(with_probs=True, drop_and_pad=False):
    kw = dict(capacity=4, drop_and_pad=True) if drop_and_pad else dict(topk=2)
    return uwrm_examples.make_inputs(16, 32, 4, dtype="bf16", with_probs=with_probs, seed=3, **kw)


def _uwrm_outputs(args):
    g, probs = args["unpermuted_tokens_grad"], args["probs"]
    out = np.zeros((args["out_index"].size, g.shape[1]), g.dtype)
    return out, None if probs is None else np.zeros(probs.shape, probs.dtype)


# --- TensorDesc ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,dtype,fragment", [
    ((4.0, 8), "bf16", "whole numbers"),
    ((4, -1), "bf16", "[0, 2**63)"),
    ((4, 2 ** 63), "bf16", "[0, 2**63)"),
    ((True, 8), "bf16", "whole numbers"),
    ("48", "bf16", "sequence"),
    (4, "bf16", "sequence"),
    ((4, 8), "fp9", "not a dtype"),
    ((4, 8), object, "operators know"),
    ((4, 8), "U3", "operators know"),
], ids=["float-dim", "negative-dim", "dim-over-int64", "bool-dim", "string-shape", "int-shape", "unknown-name",
        "object-dtype", "string-dtype"])
def test_tensor_desc_accepts_only_whole_dims_and_real_dtypes(shape, dtype, fragment):
    with pytest.raises(ParamInvalidError, match=re.escape(fragment)):
        TensorDesc(shape, dtype)


def test_tensor_desc_normalises_numpy_dims_and_dtype_names():
    d = TensorDesc((np.int64(4), np.uint8(8)), "bf16")
    assert d.shape == (4, 8) and all(type(v) is int for v in d.shape) and d.dtype == np.dtype(BF16)
    assert TensorDesc.of(np.zeros((3, 2), np.int32)) == TensorDesc((3, 2), np.int32)


# --- tensors and outputs ------------------------------------------------------------------------------
def test_non_native_byte_order_is_named():
    x, idx = _permute_case()
    with pytest.raises(ParamInvalidError, match="byte order") as info:
        ops.moe_token_permute(x.astype(np.float32).astype(">f4"), idx)
    assert info.value.status == 161002 and "tokens" in info.value.message
    with pytest.raises(ParamInvalidError, match="byte order"):
        ops.moe_token_permute(x, idx.astype(">i4"))


def test_unknown_tensor_dtype_is_161002():
    x, idx = _permute_case()
    with pytest.raises(ParamInvalidError, match="no operator"):
        ops.moe_token_permute(x.astype(np.complex64), idx)


@pytest.mark.parametrize("which", ["permute_tokens_out=tokens", "sorted_indices_out=indices",
                                   "sorted_indices_out inside permute_tokens_out", "expanded_scale_out=tokens"])
def test_permute_outputs_must_not_alias(which):
    x, idx = _permute_case()
    idx = idx.astype(np.int32)
    perm, sorted_idx, scale = allocate_outputs(x, idx)
    if which == "permute_tokens_out=tokens":
        perm = x[: perm.shape[0]]
    elif which == "sorted_indices_out=indices":
        sorted_idx = idx.reshape(-1)
    elif which == "sorted_indices_out inside permute_tokens_out":
        sorted_idx = perm.reshape(-1).view(np.int32)[: sorted_idx.size]
    else:
        scale = x.reshape(-1).view(np.float32)[:0]    # empty: never aliases
        perm = np.zeros_like(perm)
    if which == "expanded_scale_out=tokens":     # an empty view of an input never aliases it
        size, ex = aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, perm, sorted_idx, scale)
        aclnn.moe_token_permute_v2(np.empty(size, np.uint8), size, ex)
        want_perm, want_sorted = permute_golden.golden(x, idx)
        assert np.array_equal(sorted_idx, want_sorted)
        assert_bits_equal(perm, want_perm)
        return
    with pytest.raises(ParamInvalidError, match="shares memory") as info:
        aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, perm, sorted_idx, scale)
    assert info.value.status == 161002


@pytest.mark.parametrize("out", ["unpermuted_tokens_grad", "permuted_tokens", "probs"])
def test_routing_map_grad_outputs_must_not_alias(out):
    args = _uwrm_case()
    grad_out, probs_grad_out = _uwrm_outputs(args)
    if out == "probs":
        probs_grad_out = args["probs"]
    elif out == "permuted_tokens":
        grad_out = args["permuted_tokens"]
    else:
        grad_out = np.zeros_like(grad_out)
        grad_out_view = grad_out                       # outputs overlapping each other
        probs_grad_out = grad_out_view.reshape(-1)[: probs_grad_out.size].reshape(probs_grad_out.shape)
    with pytest.raises(ParamInvalidError, match="shares memory"):
        aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(*args.values(), None, grad_out,
                                                                            probs_grad_out)


def test_workspace_must_not_alias_the_tensors():
    x, idx = _permute_case()
    outs = allocate_outputs(x, idx)
    size, ex = aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, *outs)
    big = np.zeros(size + outs[0].nbytes, np.uint8)
    with pytest.raises(ParamInvalidError, match="workspace shares memory"):
        perm = big[: outs[0].nbytes].view(outs[0].dtype).reshape(outs[0].shape)
        size, ex = aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, perm, *outs[1:])
        aclnn.moe_token_permute_v2(big, size, ex)


# --- attributes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [np.array([1, 0]), "yes", 2, 0.0, None], ids=repr)
def test_flags_must_be_single_bools(value):
    args = _uwrm_case(with_probs=False)
    args["drop_and_pad"] = value
    with pytest.raises(ParamInvalidError, match="drop_and_pad must be a single bool") as info:
        ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert info.value.status == 161002
    x, idx = _permute_case()
    with pytest.raises(ParamInvalidError, match="padded_mode must be a single bool"):
        ops.moe_token_permute(x, idx, padded_mode=value)


@pytest.mark.parametrize("value", [np.bool_(False), np.array(False), 0, False], ids=repr)
def test_flags_accept_numpy_bools_and_zero(value):
    args = _uwrm_case(with_probs=False)
    args["drop_and_pad"] = value
    grad, _ = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert grad.shape == (args["out_index"].size, 32)


@pytest.mark.parametrize("value,fragment", [("ab", "list or tuple"), ([1.5, 2], r"restore_shape\[0\]"),
                                            ([[1, 2]], r"restore_shape\[0\]"), (np.array([1.0, 2.0]), "1-D"),
                                            (np.zeros((2, 2), np.int64), "1-D"), ([True], r"restore_shape\[0\]"),
                                            ([2 ** 64], "int64")],
                         ids=["string", "float", "nested", "float-array", "2-D", "bool", "huge"])
def test_restore_shape_is_validated(value, fragment):
    args = _uwrm_case()
    args["restore_shape"] = value
    with pytest.raises(ParamInvalidError, match=fragment):
        ops.moe_token_unpermute_with_routing_map_grad(*args.values())


@pytest.mark.parametrize("value", [(16, 32), [16, 32], np.array([16, 32]), ()], ids=repr)
def test_restore_shape_accepts_int_sequences(value):
    args = _uwrm_case()
    args["restore_shape"] = value
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    assert probs_grad.shape == args["probs"].shape


@pytest.mark.parametrize("name,value", [("num_out_tokens", 3.0), ("num_out_tokens", "3"), ("quant_mode", True),
                                        ("num_out_tokens", 2 ** 70)], ids=repr)
def test_integer_attributes_are_not_truncated(name, value):
    x, idx = _permute_case()
    with pytest.raises(ParamInvalidError, match=name):
        ops.moe_token_permute(x, idx, **{name: value})


# --- the two-phase protocol ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1.5, "999999", None, -1], ids=repr)
def test_workspace_size_must_be_an_integer(value):
    x, idx = _permute_case()
    outs = allocate_outputs(x, idx)
    size, ex = aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, *outs)
    with pytest.raises(ParamInvalidError, match="workspace_size"):
        aclnn.moe_token_permute_v2(np.empty(size, np.uint8), value, ex)


def test_an_executor_runs_only_through_its_own_aclnn_function():
    x, idx = _permute_case()
    outs = allocate_outputs(x, idx)
    size, ex = aclnn.moe_token_permute_v2_get_workspace_size(x, idx, 0, False, -1, *outs)
    ws = np.empty(size, np.uint8)
    with pytest.raises(ParamInvalidError, match="aclnnMoeTokenPermuteV2"):
        aclnn.moe_token_permute(ws, size, ex)
    with pytest.raises(ParamInvalidError, match="aclnnMoeTokenPermuteV2"):
        aclnn.moe_token_unpermute_with_routing_map_grad(ws, size, ex)
    with pytest.raises(ParamNullptrError):
        aclnn.moe_token_permute_v2(ws, size, None)
    aclnn.moe_token_permute_v2(ws, size, ex)
    assert np.array_equal(outs[1], permute_golden.golden(x, idx)[1])


# --- edge results and compile reuse --------------------------------------------------------------------
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("tokens,topk", [(5, 1), (40, 3), (2500, 4)], ids=["tiny", "small", "multi-core-sort"])
def test_hidden_size_zero_still_returns_the_inverse_permutation(tokens, topk, soc):
    x, idx = _permute_case(tokens, 1, topk, seed=tokens)
    x = x[:, :0]
    perm, sorted_indices, _ = ops.moe_token_permute(x, idx, soc=soc)
    flat = idx.reshape(-1)
    order = np.argsort(flat, kind="stable")          # ids are small: fp32 keys equal the ints
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    assert perm.shape == (tokens * topk, 0)
    if soc == "ascend950":
        # MoeInitRoutingV3's EMPTY_TENSOR branch (cols == 0, n * k > 0) zeroes expanded_row_idx instead of sorting
        assert not sorted_indices.any() and sorted_indices.shape == (tokens * topk,)
        return
    assert np.array_equal(sorted_indices, inverse.astype(np.int32))


def test_read_only_inputs_reuse_the_compiled_kernels():
    x, idx = _permute_case(seed=5)
    writeable = ops.moe_token_permute(x, idx)
    dispatchers = [permute_kernel.index_copy, permute_kernel.index_copy_split_d]
    from ops.common import moe_sort
    dispatchers += [moe_sort.one_core_stage, moe_sort.vbs_stage, moe_sort.vms_stage, moe_sort.sort_out_stage]
    before = {d: len(d.overloads) for d in dispatchers}
    x_ro, idx_ro = x.copy(), idx.copy()
    x_ro.flags.writeable = False
    idx_ro.flags.writeable = False
    read_only = ops.moe_token_permute(x_ro, idx_ro)
    assert {d: len(d.overloads) for d in dispatchers} == before
    for a, b in zip(writeable, read_only):
        assert a.dtype == b.dtype
        assert_bits_equal(a, b)


def test_ub_overflow_names_the_tpipe_and_the_knobs():
    """The documented key-101 quirk: bf16 gradients with fp32 probs, 256 slots per core, hidden near the
    largest piece."""
    soc = get_soc("910b", aiv_num=1)
    args = uwrm_examples.make_inputs(128, 8192, 8, topk=2, dtype="bf16", probs_dtype="fp32", with_probs=True,
                                     seed=4)
    with pytest.raises(UBOverflowError) as info:
        ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    e = info.value
    assert e.tiling_key == 101 and e.pipe == "pipe" and e.needed_bytes > e.capacity_bytes == 196608
    assert f"needs {e.needed_bytes} bytes" in str(e)
    for knob in ("bf16 probs", "fewer tokens per core", "smaller hidden size", "probGradTBuf"):
        assert knob in e.detail


@pytest.mark.parametrize("field,bad", [("out_index", 10 ** 6), ("out_index", -7), ("permute_token_id", 999)],
                         ids=["out-index-too-big", "out-index-negative", "token-id-too-big"])
def test_out_of_bounds_from_a_bad_index_names_the_index_element(field, bad):
    args = _uwrm_case(with_probs=False, drop_and_pad=field == "permute_token_id" or bad < 0)
    arr = args[field].copy()
    k = arr.size // 2
    arr[k] = bad
    args[field] = arr
    with pytest.raises(OutOfBoundsError) as info:
        ops.moe_token_unpermute_with_routing_map_grad(*args.values())
    e = info.value
    assert (e.index_tensor, e.index_element, e.index_value) == (field, k, bad), str(e)
    assert f"{field}[{k}] = {bad}" in str(e)
