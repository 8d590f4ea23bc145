"""ops.torch: the operators as torch ops. Forward results equal the NumPy friendly calls bit for bit (and, for
the permute / unpermute pair, formulas written here); every op passes torch.library.opcheck and traces under
torch.compile(fullgraph=True); fake / meta shapes follow op-plugin; gradients are checked against central finite
differences in fp32 and against the fp32 gradients in bf16; bad arguments give errors naming them."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from torch.library import opcheck

import ops
import ops.torch as nt
from ops.torch._bridge import as_numpy
from tests.bits import assert_bits_equal

N, H, E, K = 8, 16, 4, 2
npu = torch.ops.npu


def routing(seed=0, n=N, e=E, k=K):
    """(indices (n, k) int32, distinct experts per row; the same routing as a bool map (n, e))."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(n)]).int()
    rm = torch.zeros(n, e, dtype=torch.bool)
    rm.scatter_(1, idx.long(), True)
    return idx, rm


def rand(*shape, dtype=torch.float32, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def np_of(t):
    return None if t is None else as_numpy(t)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# --- zero copy --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn], ids=["bf16", "fp32", "fp8"])
def test_numpy_view_shares_the_tensors_storage(dtype):
    t = torch.zeros(4, 8, dtype=dtype)
    a = as_numpy(t)
    assert a.ctypes.data == t.data_ptr() and a.nbytes == t.numel() * t.element_size()


# --- forward against the friendly calls and the formulas --------------------------------------------------------
# fp32 on 950 compiles a set of kernel specialisations nothing else in the default suite needs (~20 s cold): slow
TOPK_CASES = [pytest.param(d, s, id=f"{d}-{s}", marks=[pytest.mark.slow] if (d, s) == ("fp32", "ascend950") else [])
              for d in DTYPES for s in ("ascend910b", "ascend950")]


@pytest.mark.parametrize("dname, soc", TOPK_CASES)
def test_topk_family_matches_the_friendly_calls(dname, soc):
    dt = DTYPES[dname]
    idx, _ = routing()
    x, probs = rand(N, H, dtype=dt), rand(N, K, dtype=dt, seed=2).abs()
    with nt.device(soc):
        out, s = nt.npu_moe_token_permute(x, idx)
        un = nt.npu_moe_token_unpermute(out, s, probs)
        g = rand(N, H, dtype=dt, seed=3)
        d_perm, d_probs = nt.npu_moe_token_unpermute_grad(out, g, s, probs)
        d_x = nt.npu_moe_token_permute_grad(x, d_perm, idx, s)
    ro, rs, _ = ops.moe_token_permute(np_of(x), np_of(idx), soc=soc)
    assert_bits_equal(np_of(out), ro)
    assert_bits_equal(np_of(s), rs)
    assert_bits_equal(np_of(un), ops.moe_token_unpermute(ro, rs, np_of(probs), soc=soc))
    rdp, rdpr = ops.moe_token_unpermute_grad(ro, np_of(g), rs, np_of(probs), soc=soc)
    assert_bits_equal(np_of(d_perm), rdp)
    assert_bits_equal(np_of(d_probs), rdpr)
    assert_bits_equal(np_of(d_x), ops.moe_token_permute_grad(rdp, rs, K, soc=soc))


def test_permute_and_unpermute_follow_their_formulas():
    """sorted_indices[j] = the permuted row of slot j (slot = token * K + k), experts ascending, stable in slot;
    unpermute sums probs[t, k] * row; written from the definition, not from the kernels."""
    idx, _ = routing()
    x, probs = rand(N, H), rand(N, K, seed=2)
    out, s = nt.npu_moe_token_permute(x, idx)
    order = np.argsort(idx.numpy().ravel(), kind="stable")          # slots in permuted order
    want_s = np.empty(N * K, dtype=np.int32)
    want_s[order] = np.arange(N * K)
    assert np.array_equal(s.numpy(), want_s)
    assert torch.equal(out, x[torch.from_numpy(order // K)])
    un = nt.npu_moe_token_unpermute(out, s, probs)
    want = (probs.double()[:, :, None] * out.double()[s.long()].view(N, K, H)).sum(1)
    torch.testing.assert_close(un.double(), want, rtol=0, atol=4 * K * 2 ** -24 * want.abs().max().item())


@pytest.mark.parametrize("pad", [False, True], ids=["dropless", "drop_and_pad"])
@pytest.mark.parametrize("dname", ["fp32", "bf16"])
def test_routing_map_family_matches_the_friendly_calls(dname, pad):
    dt = DTYPES[dname]
    _, rm = routing()
    x, probs = rand(N, H, dtype=dt), (rand(N, E, dtype=dt, seed=2).abs() * rm).to(dt)
    slots = E * (N // 2) if pad else N * K
    po, pp, ps = nt.npu_moe_token_permute_with_routing_map(x, rm, probs=probs, num_out_tokens=slots,
                                                           drop_and_pad=pad)
    ro, rp, rs = ops.moe_token_permute_with_routing_map(np_of(x), np_of(rm), np_of(probs), slots, pad)
    assert_bits_equal(np_of(po), ro)
    assert_bits_equal(np_of(pp), rp)
    assert_bits_equal(np_of(ps), rs)
    un = nt.npu_moe_token_unpermute_with_routing_map(po, ps, [N, H], probs=probs, routing_map=rm, drop_and_pad=pad)
    ru, r_oi, r_tid, _ = ops.moe_token_unpermute_with_routing_map(ro, rs, np_of(rm), np_of(probs), pad, (N, H))
    assert_bits_equal(np_of(un), ru)
    g = rand(N, H, dtype=dt, seed=3)
    oi, tid = (torch.from_numpy(r_oi), torch.from_numpy(r_tid)) if pad else (ps, ps)
    dp, dpr = nt.npu_moe_token_unpermute_with_routing_map_grad(g, oi, tid, rm, po, probs, pad, [N, H])
    rdp, rdpr = ops.moe_token_unpermute_with_routing_map_grad(np_of(g), np_of(oi), np_of(tid), np_of(rm), ro,
                                                              np_of(probs), pad, (N, H))
    assert_bits_equal(np_of(dp), rdp)
    assert_bits_equal(np_of(dpr), rdpr)
    dx, dprobs = nt.npu_moe_token_permute_with_routing_map_grad(dp, pp, ps, rm, E, N, pad)
    rdx, rdprobs = ops.moe_token_permute_with_routing_map_grad(rdp, rp, rs, np_of(rm), E, N, pad)
    assert_bits_equal(np_of(dx), rdx)
    assert_bits_equal(np_of(dprobs), rdprobs)


@pytest.mark.parametrize("quant_mode", [-1, 2, 3, 9], ids=["none", "mxfp8_e5m2", "mxfp8_e4m3fn", "mxfp4"])
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_cann_moe_token_permute_quantises_on_950_only(soc, quant_mode):
    idx, _ = routing()
    x = rand(N, 64, dtype=torch.bfloat16)
    with nt.device(soc):
        outs = nt.moe_token_permute(x, idx, quant_mode=quant_mode)
        fake = nt.moe_token_permute(x.to("meta"), idx.to("meta"), quant_mode=quant_mode)
    want = ops.moe_token_permute(np_of(x), np_of(idx), 0, False, quant_mode, soc=soc)
    for i, (o, w) in enumerate(zip(outs, want)):
        assert_bits_equal(np_of(o), w, f"output {i}")
    assert [(f.shape, f.dtype) for f in fake] == [(o.shape, o.dtype) for o in outs]
    if soc == "ascend910b" or quant_mode == -1:
        assert outs[0].dtype == torch.bfloat16 and outs[2].shape == (0,)


def test_cann_moe_token_permute_mxfp8_takes_masters_round_scale_rule():
    """The torch op has no scale-rule argument: it runs the simulator's default, the MoeInitRoutingV3 MXFP8 rule at
    master 25fb6b92890d. A bf16 block of 1.9 in E4M3FN: scale code 120, elements 0x77 (the OCP floor rule would
    give 119 and 0x7E)."""
    x = torch.full((4, 32), 1.9, dtype=torch.bfloat16)
    idx = torch.tensor([[0], [1], [2], [3]], dtype=torch.int32)
    with nt.device("ascend950"):
        data, _, scale = nt.moe_token_permute(x, idx, quant_mode=3)
    assert (np_of(scale).view(np.uint8)[:, 0] == 120).all() and (np_of(data).view(np.uint8) == 0x77).all()


# --- op-plugin's output sizes on the meta device and under FakeTensorMode -----------------------------------------
@pytest.mark.parametrize("num_out_tokens, rows", [(None, N * K), (0, N * K), (5, 5), (100, N * K), (-3, N * K - 3)],
                         ids=["none", "zero", "five", "capped", "negative"])
def test_permute_rows_follow_op_plugin(num_out_tokens, rows):
    idx, _ = routing()
    out, s = nt.npu_moe_token_permute(torch.empty(N, H, device="meta"), idx.to("meta"), num_out_tokens)
    assert out.shape == (rows, H) and s.shape == (N * K,) and s.dtype == torch.int32
    if num_out_tokens is not None and num_out_tokens > 0:
        assert nt.npu_moe_token_permute(rand(N, H), idx, num_out_tokens)[0].shape == (rows, H)


@pytest.mark.parametrize("num_out_tokens, pad, rows", [(None, False, N), (N * K + 3, False, N * K),
                                                       (N * K, True, N * K), (N * K + 3, True, N * K)],
                         ids=["default-N", "floor-to-N", "pad", "pad-floor-to-E"])
def test_routing_map_rows_follow_op_plugin(num_out_tokens, pad, rows):
    from torch._subclasses.fake_tensor import FakeTensorMode
    _, rm = routing()
    with FakeTensorMode():
        po, pp, ps = torch.ops.npu.npu_moe_token_permute_with_routing_map(
            torch.empty(N, H), torch.empty(N, E, dtype=torch.bool), probs=torch.empty(N, E),
            num_out_tokens=num_out_tokens, drop_and_pad=pad)
    assert (po.shape, pp.shape, ps.shape) == ((rows, H), (rows,), (rows,))


# --- opcheck and torch.compile -----------------------------------------------------------------------------------
def _opcheck_cases():
    idx, rm = routing()
    x, probs, dprobs = rand(N, H), rand(N, K, seed=2), rand(N, E, seed=2).abs() * rm
    out, s = nt.npu_moe_token_permute(x, idx)
    po, pp, ps = nt.npu_moe_token_permute_with_routing_map(x, rm, probs=dprobs, num_out_tokens=N * K)
    g = rand(N, H, seed=3)
    return {
        "npu_moe_token_permute": ((x, idx), {}),
        "npu_moe_token_permute_grad": ((x, out, idx, s), {}),
        "npu_moe_token_permute_grad_v2": ((out, s, N, torch.float32, K), {}),
        "npu_moe_token_unpermute": ((out, s, probs), {}),
        "_npu_moe_token_unpermute": ((out, s, probs), {}),
        "npu_moe_token_unpermute_grad": ((out, g, s, probs), {}),
        "npu_moe_token_unpermute_grad_v2": ((g, s, N * K, torch.float32, probs, False, None, out), {}),
        "npu_moe_token_permute_with_routing_map": ((x, rm), {"probs": dprobs, "num_out_tokens": N * K}),
        "npu_moe_token_permute_with_routing_map_grad": ((po, pp, ps, rm, E, N, False), {}),
        "npu_moe_token_unpermute_with_routing_map": ((po, ps, [N, H]), {"probs": dprobs, "routing_map": rm}),
        "_npu_moe_token_unpermute_with_routing_map": ((po, ps, [N, H]), {"probs": dprobs, "routing_map": rm}),
        "npu_moe_token_unpermute_with_routing_map_grad": ((g, ps, ps, rm, po, dprobs, False, [N, H]), {}),
    }


@pytest.mark.parametrize("name", [
    "npu_moe_token_permute", "npu_moe_token_permute_grad", "npu_moe_token_permute_grad_v2",
    "npu_moe_token_unpermute", "_npu_moe_token_unpermute", "npu_moe_token_unpermute_grad",
    "npu_moe_token_unpermute_grad_v2", "npu_moe_token_permute_with_routing_map",
    "npu_moe_token_permute_with_routing_map_grad", "npu_moe_token_unpermute_with_routing_map",
    "_npu_moe_token_unpermute_with_routing_map", "npu_moe_token_unpermute_with_routing_map_grad"])
def test_opcheck(name):
    args, kwargs = _opcheck_cases()[name]
    opcheck(getattr(npu, name).default, args, kwargs)


def test_opcheck_cann_moe_token_permute_quantised_on_950():
    idx, _ = routing()
    with nt.device("ascend950"):
        opcheck(torch.ops.cann_ops_transformer.moe_token_permute.default,
                (rand(N, H, dtype=torch.bfloat16), idx, None, False, 3))


class TinyMoe(torch.nn.Module):
    """Permute -> one scale per expert row block -> unpermute with probs, in both styles."""

    def __init__(self, style):
        super().__init__()
        self.style = style
        self.w = torch.nn.Parameter(rand(H, H, seed=5) / H ** 0.5)

    def forward(self, x, idx, probs, rm, dense_probs):
        if self.style == "topk":
            out, s = npu.npu_moe_token_permute(x, idx)
            return npu.npu_moe_token_unpermute(out @ self.w, s, probs)
        out, _, s = npu.npu_moe_token_permute_with_routing_map(x, rm, probs=dense_probs, num_out_tokens=N * K)
        return npu.npu_moe_token_unpermute_with_routing_map(out @ self.w, s, [N, H], probs=dense_probs,
                                                            routing_map=rm)


@pytest.mark.parametrize("style", ["topk", "routing_map"])
def test_torch_compile_fullgraph_forward_and_backward(style):
    idx, rm = routing()
    probs, dense = rand(N, K, seed=2), rand(N, E, seed=2).abs() * rm
    model = TinyMoe(style)
    x = rand(N, H).requires_grad_()
    eager = model(x, idx, probs, rm, dense)
    eager.sum().backward()
    gx, gw = x.grad.clone(), model.w.grad.clone()
    x.grad, model.w.grad = None, None
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = compiled(x, idx, probs, rm, dense)
    got.sum().backward()
    assert torch.equal(got, eager) and torch.equal(x.grad, gx) and torch.equal(model.w.grad, gw)


# --- gradients ----------------------------------------------------------------------------------------------------
def _losses(style, dtype):
    """(loss(x, p) through the simulated ops in `dtype`, the inputs x (N, H) and p, and p's routing) for a style."""
    idx, rm = routing()
    up = rand(N, H, seed=7)
    if style == "topk":
        p0 = rand(N, K, seed=2).abs()

        def loss(x, p):
            out, s = npu.npu_moe_token_permute(x.to(dtype), idx)
            return (npu.npu_moe_token_unpermute(out * 1.5, s, p.to(dtype)).float() * up).sum()
    else:
        p0 = rand(N, E, seed=2).abs() * rm

        def loss(x, p):
            out, pp, s = npu.npu_moe_token_permute_with_routing_map(x.to(dtype), rm, probs=p.to(dtype),
                                                                   num_out_tokens=N * K)
            y = npu.npu_moe_token_unpermute_with_routing_map(out * pp[:, None], s, [N, H], probs=p.to(dtype),
                                                             routing_map=rm)
            return (y.float() * up).sum()
    return loss, rand(N, H), p0, rm


def _grads(style, dtype):
    loss, x, p, mask = _losses(style, dtype)
    x, p = x.clone().requires_grad_(), p.clone().requires_grad_()
    loss(x, p).backward()
    return x.grad, p.grad, loss, x.detach(), p.detach(), mask


@pytest.mark.parametrize("style", ["topk", "routing_map"])
def test_fp32_gradients_match_central_differences(style):
    """The loss is linear in x and quadratic in p at most: central differences are exact up to fp32 rounding of
    the two losses, bounded here by their magnitude."""
    gx, gp, loss, x, p, mask = _grads(style, torch.float32)
    g = torch.Generator().manual_seed(11)
    for _ in range(2):
        vx = torch.randn(x.shape, generator=g)
        vp = torch.randn(p.shape, generator=g) * (mask if style != "topk" else 1)
        for grad, v, which in ((gx, vx, 0), (gp, vp, 1)):
            h = 1e-2
            args_p = [x, p]
            args_m = [x, p]
            args_p[which] = args_p[which] + h * v
            args_m[which] = args_m[which] - h * v
            with torch.no_grad():
                lp, lm = loss(*args_p).double(), loss(*args_m).double()
            numeric = (lp - lm) / (2 * h)
            analytic = (grad.double() * v.double()).sum()
            bound = 1e-4 * (abs(numeric) + (grad.double() * v.double()).abs().sum()) + \
                (abs(lp) + abs(lm)) * 2 ** -22 / h
            assert abs(analytic - numeric) <= bound, (which, analytic.item(), numeric.item())


@pytest.mark.parametrize("style", ["topk", "routing_map"])
def test_bf16_gradients_match_fp32_within_bf16_rounding(style):
    gx32, gp32, *_ = _grads(style, torch.float32)
    gx16, gp16, *_ = _grads(style, torch.bfloat16)
    # each gradient element is a short sum of products of bf16-rounded values (2^-8 relative each, a few of them)
    for a, b in ((gx16, gx32), (gp16, gp32)):
        torch.testing.assert_close(a.float(), b, rtol=0, atol=8 * 2 ** -8 * b.abs().max().item())


def test_backward_runs_on_the_forwards_chip():
    idx, _ = routing()
    x = rand(N, H, dtype=torch.bfloat16).requires_grad_()
    with nt.device("ascend950"):
        out, s = nt.npu_moe_token_permute(x, idx)
    seen = []
    real = ops.aclnn.moe_token_permute_grad_get_workspace_size

    def spy(*args, soc, **kwargs):
        seen.append(soc.name)
        return real(*args, soc=soc, **kwargs)

    ops.aclnn.moe_token_permute_grad_get_workspace_size = spy
    try:
        out.sum().backward()         # outside the device block
    finally:
        ops.aclnn.moe_token_permute_grad_get_workspace_size = real
    assert seen == ["ascend950"] and nt.current_soc().name == "ascend910b"
    want = ops.moe_token_permute_grad(np.ones((N * K, H), ml_dtypes.bfloat16), np_of(s), K, soc="ascend950")
    assert_bits_equal(np_of(x.grad), want)


# --- bad input ----------------------------------------------------------------------------------------------------
def test_non_contiguous_tokens_are_refused_naming_the_argument():
    idx, _ = routing()
    with pytest.raises(nt.TorchArgumentError, match="tokens must be contiguous"):
        nt.npu_moe_token_permute(rand(H, N).t(), idx)


def test_an_index_tensor_that_requires_grad_is_refused():
    x = rand(N, H)
    with pytest.raises(nt.TorchArgumentError, match="indices is an index tensor and must not require grad"):
        nt.npu_moe_token_permute(x, torch.zeros(N, K).requires_grad_())


@pytest.mark.parametrize("case", ["tokens-fp64", "indices-fp32", "sorted-int64"])
def test_wrong_dtypes_give_the_aclnn_status(case):
    idx, _ = routing()
    with pytest.raises(nt.AclnnRuntimeError, match="161002") as info:
        if case == "tokens-fp64":
            nt.npu_moe_token_permute(rand(N, H).double(), idx)
        elif case == "indices-fp32":
            nt.npu_moe_token_permute(rand(N, H), idx.float())
        else:
            out, s = nt.npu_moe_token_permute(rand(N, H), idx)
            nt.npu_moe_token_unpermute(out, s.long())
    assert info.value.status == 161002 and isinstance(info.value, RuntimeError)


def test_shape_rules_raise_runtime_errors_as_op_plugin():
    with pytest.raises(RuntimeError, match="tokens should be 2 dimensional"):
        nt.npu_moe_token_permute(rand(N * H), routing()[0])
    with pytest.raises(RuntimeError, match="sorted_indices should be 1 dimensional"):
        nt.npu_moe_token_unpermute(rand(N, H), torch.zeros(N, 1, dtype=torch.int32))


def test_a_dtype_no_operator_takes_is_refused():
    with pytest.raises(nt.TorchArgumentError, match="tokens has dtype torch.complex64"):
        nt.npu_moe_token_permute(torch.zeros(N, H, dtype=torch.complex64), routing()[0])
