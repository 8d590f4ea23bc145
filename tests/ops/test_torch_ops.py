"""ops.torch (issue 22, in progress): the torch_npu-named ops against the NumPy friendly calls, autograd through
the Grad operators, torch.compile(fullgraph) and opcheck. Skipped where torch is not installed (the CI install
does not pull the [torch] extra yet)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
npu = pytest.importorskip("ops.torch")

import ops  # noqa: E402


def _bf16_numpy(t):
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("num_out_tokens", [None, 20, -4], ids=["all", "20", "minus4"])
def test_permute_equals_the_friendly_call(dtype, num_out_tokens):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 64, generator=g).to(dtype)
    idx = torch.randint(0, 8, (16, 2), generator=g, dtype=torch.int64)
    pt, si = npu.npu_moe_token_permute(x, idx, num_out_tokens)
    xn = _bf16_numpy(x) if dtype == torch.bfloat16 else x.numpy()
    want_pt, want_si, _ = ops.moe_token_permute(xn, idx.numpy(), num_out_tokens or 0)
    got_pt = _bf16_numpy(pt) if dtype == torch.bfloat16 else pt.numpy()
    assert np.array_equal(got_pt.view(np.uint8), want_pt.view(np.uint8)) and np.array_equal(si.numpy(), want_si)


def test_permute_unpermute_gradients():
    """d/dx sum(permute(x)) counts each token's K copies; unpermute(permute(x), probs) = x * sum(probs)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 64, generator=g, requires_grad=True)
    idx = torch.randint(0, 8, (16, 2), generator=g, dtype=torch.int64)
    probs = torch.rand(16, 2, generator=g, requires_grad=True)
    pt, si = npu.npu_moe_token_permute(x, idx)
    out = npu.npu_moe_token_unpermute(pt, si, probs)
    assert torch.allclose(out, x.detach() * probs.detach().sum(1, keepdim=True), atol=1e-5)
    out.sum().backward()
    assert torch.allclose(x.grad, probs.detach().sum(1, keepdim=True).expand(-1, 64), atol=1e-5)
    assert torch.allclose(probs.grad, x.detach().sum(1, keepdim=True).expand(-1, 2), atol=1e-4)


def test_compile_fullgraph_and_opcheck():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 64, generator=g)
    idx = torch.randint(0, 8, (16, 2), generator=g, dtype=torch.int64)
    f = torch.compile(lambda a, b: npu.npu_moe_token_permute(a, b)[0] * 2, fullgraph=True)
    assert torch.equal(f(x, idx), npu.npu_moe_token_permute(x, idx)[0] * 2)
    torch.library.opcheck(torch.ops.npu.npu_moe_token_permute.default, (x, idx, None, False))


def test_bad_device_or_dtype_is_a_named_error():
    x = torch.randn(4, 8)
    with pytest.raises((RuntimeError, ValueError), match="indices"):
        npu.npu_moe_token_permute(x, torch.zeros(4, 2, dtype=torch.float32))
