"""ops.torch.patch_megatron() against Megatron-Core's own MoE code (megatron-core 0.16, the [torch-test] extra).

Megatron-Core's moe_utils.permute / unpermute round trip and its MoE token dispatchers run forward and backward
twice, with the patch off (Megatron's index_select / scatter_add reference) and on (the simulated
MoeTokenPermuteWithRoutingMap / MoeTokenUnpermuteWithRoutingMap and their Grads), and the outputs and gradients
are compared: bit for bit where both sides do the same roundings in the same order, within a bound derived below
where they do not.

Where the two sides round differently (bf16 tokens and probs):
  Megatron's unpermute rounds every product x*p to bf16, then scatter-adds the K products in bf16 (one rounding
  per add after the first); the kernel multiplies and adds in fp32 and rounds once to bf16. With u = 2^-8 (bf16's
  unit roundoff), e = 2^-24 (fp32's) and T = sum_k |x_k p_k|, Megatron is within K u T (1+u)^K of the exact sum
  and the kernel within (u + (K-1) e) T, so they differ by at most ((K+1) u + (K-1) e) T (1+u)^K.
  The probs gradient from the unpermute is sum_h g_h x_h over H: Megatron rounds each product to the tensor's
  dtype (unit roundoff u_p: u for bf16, e for fp32), sums in fp32 (torch's CPU reductions accumulate bf16 in
  fp32, in their own order) and rounds, within (2 u_p + (H-1) e) S of the exact value (S = sum_h |g_h x_h|); the
  kernel forms exact fp32 products, sums them in fp32 in hidden order and rounds once, within (u_p + (H-1) e) S.
  Autograd then adds the permuted probs' gradient 2p (exact in both) with one more rounding each, u_p (S + 2|p|).
  So they differ by at most (5 u_p + 2 (H-1) e) (1 + u_p)^2 (S + 2|p|).
Everything else (the permuted tokens and probs, fp32 sums of two terms, the tokens' gradient, the dispatchers,
whose experts see identical inputs) must be equal bit for bit.

Megatron-Core on a CPU-only torch: both dispatchers get a single-process gloo group (an in-memory store, no
network) as their TP / EP groups, so their sizes are 1 and the AllGather dispatcher communicates nothing; the
AlltoAll dispatcher's all_to_all needs a group even then and returns its input. The AlltoAll dispatcher also
creates a CUDA stream for its device-to-host copies of the split sizes, and in the dropless mode records a CUDA
event around them. On a CPU every tensor is already on the host, so the test sets that stream to a placeholder
and skips the copy (`CpuAlltoAllDispatcher`): the only change to Megatron's code path, and one that moves nothing.
"""
from __future__ import annotations

import warnings

import pytest
import torch

with warnings.catch_warnings():      # "Transformer Engine and Apex are not installed": expected on a CPU
    warnings.simplefilter("ignore")
    moe_utils = pytest.importorskip("megatron.core.transformer.moe.moe_utils",
                                    reason="needs megatron-core: pip install -e '.[torch-test]'")
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe import token_dispatcher
    from megatron.core.transformer.transformer_config import TransformerConfig

import ops.torch as nt
import ops.torch.megatron as patched
from ops.torch._bridge import as_numpy
from tests.bits import assert_bits_equal

# Megatron's config defaults warn on construction (a deprecated CUDA-graph scope default); nothing to act on here
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:megatron.*")

N, H, E, K = 8, 16, 4, 2
U_BF16, U_FP32 = 2.0 ** -8, 2.0 ** -24
UNIT = {torch.float32: U_FP32, torch.bfloat16: U_BF16}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def routing(seed=0, pad=False):
    """(routing_map (N, E) bool with K experts per token, probs (N, E) zero off the map); with pad, Megatron's own
    drop-and-pad (apply_router_token_dropping, capacity factor 1: every expert gets exactly N*K/E tokens)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(N)])
    routing_map = torch.zeros(N, E, dtype=torch.bool).scatter_(1, idx, True)
    probs = torch.rand(N, E, generator=g) * routing_map
    if pad:
        probs, routing_map = moe_utils.apply_router_token_dropping(probs, routing_map, K, 1.0, pad_to_capacity=True)
    return routing_map, probs


def rand(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def assert_within(got, want, bound, what):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    diff = (got.double() - want.double()).abs()
    assert bool((diff <= bound).all()), f"{what}: |diff| - bound peaks at {(diff - bound).max().item()}"


def both(run, monkeypatch):
    """run() with the patch off (Megatron's own permute / unpermute), then on (the simulated operators); the
    patched run must have gone through the simulated permute and unpermute."""
    reference = run()
    calls = []

    def counting(fn, name):
        def counted(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)
        return counted

    for name in ("permute", "unpermute"):
        monkeypatch.setattr(patched, name, counting(getattr(patched, name), name))
    with nt.patch_megatron():
        simulated = run()
    assert {"permute", "unpermute"} <= set(calls), calls
    return reference, simulated


# --- moe_utils.permute / unpermute round trip ---------------------------------------------------------------------
@pytest.mark.parametrize("pad", [False, True], ids=["dropless", "drop_and_pad"])
@pytest.mark.parametrize("dname", list(DTYPES))
def test_moe_utils_round_trip_forward_and_backward(monkeypatch, dname, pad):
    dt = DTYPES[dname]
    routing_map, probs32 = routing(pad=pad)
    x0, probs0, w = rand(N, H, dtype=dt, seed=1), probs32.to(dt), rand(N, H, dtype=dt, seed=2)
    num_out_tokens = int(routing_map.sum())

    def run():
        x, probs = x0.clone().requires_grad_(), probs0.clone().requires_grad_()
        permuted, permuted_probs, _ = moe_utils.permute(x, routing_map, probs=probs, num_out_tokens=num_out_tokens,
                                                        drop_and_pad=pad)
        y = moe_utils.unpermute(permuted, _, x.shape, probs=probs, routing_map=routing_map, drop_and_pad=pad)
        # a loss that uses the permuted probs too, so their backward (the permute grad's probs path) runs
        (y * w).sum().add_((permuted_probs * permuted_probs).sum()).backward()
        return permuted.detach(), permuted_probs.detach(), y.detach(), x.grad, probs.grad

    (p_ref, pp_ref, y_ref, gx_ref, gp_ref), (p_sim, pp_sim, y_sim, gx_sim, gp_sim) = both(run, monkeypatch)
    assert_bits_equal(as_numpy(p_sim), as_numpy(p_ref), "permuted tokens")
    assert_bits_equal(as_numpy(pp_sim), as_numpy(pp_ref), "permuted probs")
    assert_bits_equal(as_numpy(gx_sim), as_numpy(gx_ref), "tokens' gradient")

    # forward: each output element sums the products of the token with its experts' probs
    terms = (x0.double()[:, None, :] * probs0.double()[:, :, None]).abs()            # (N, E, H), zero off the map
    k = int(routing_map.sum(1).max())
    if dt == torch.float32 and k <= 2:         # a sum of two fp32 products is the same in either order
        assert_bits_equal(as_numpy(y_sim), as_numpy(y_ref), "unpermuted tokens")
    else:
        u = UNIT[dt]
        assert_within(y_sim, y_ref, ((k + 1) * u + (k - 1) * U_FP32) * (1 + u) ** k * terms.sum(1), "unpermuted")

    # the probs' gradient: d/dp[t, e] = sum_h w[t, h] x[t, h] (+ 2 p[t, e] from the permuted-probs term)
    s = (w.double() * x0.double()).abs().sum(1, keepdim=True) + 2 * probs0.double().abs()
    u = UNIT[dt]
    bound = (5 * u + 2 * (H - 1) * U_FP32) * (1 + u) ** 2 * s * routing_map
    assert_within(gp_sim, gp_ref, bound, "probs' gradient")
    assert_bits_equal(as_numpy(gp_sim[~routing_map]), as_numpy(gp_ref[~routing_map]),
                      "probs' gradient off the routing map")


# --- the token dispatchers -----------------------------------------------------------------------------------------
class CpuAlltoAllDispatcher(token_dispatcher.MoEAlltoAllTokenDispatcher):
    """MoEAlltoAllTokenDispatcher on a CPU: the device-to-host copy of the split sizes is a no-op (they are host
    tensors already), so the CUDA stream and event around it are skipped; everything else is Megatron's."""

    def _maybe_dtoh_and_synchronize(self, point, tokens_per_expert=None):
        return tokens_per_expert


@pytest.fixture(scope="module")
def single_process_group():
    """A one-rank gloo world (an in-memory store, no network): the AlltoAll dispatcher's EP group."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def dispatcher(kind, pad, group):
    config = TransformerConfig(
        num_layers=1, hidden_size=H, moe_ffn_hidden_size=H, num_attention_heads=1, num_moe_experts=E, moe_router_topk=K,
        add_bias_linear=False, moe_token_dispatcher_type=kind,
        **(dict(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True,
                moe_router_load_balancing_type="aux_loss") if pad else {}))
    groups = ProcessGroupCollection(ep=group, expt_tp=group, tp_ep=group)
    cls = token_dispatcher.MoEAllGatherTokenDispatcher if kind == "allgather" else CpuAlltoAllDispatcher
    return cls(E, list(range(E)), config, pg_collection=groups)


def experts(hidden, tokens_per_expert, probs, scale):
    """Expert e scales its tokens by scale[e] (H,) and weights them by their probs; rows are grouped by expert."""
    chunks = torch.split(hidden, [int(c) for c in tokens_per_expert])
    out = torch.cat([c * scale[e] for e, c in enumerate(chunks)])
    return out * probs.to(out.dtype).unsqueeze(-1)


@pytest.mark.parametrize("kind, pad", [("allgather", False), ("alltoall", False), ("alltoall", True)],
                         ids=["allgather-dropless", "alltoall-dropless", "alltoall-drop_and_pad"])
@pytest.mark.parametrize("dname", list(DTYPES))
def test_token_dispatcher_forward_and_backward(single_process_group, monkeypatch, dname, kind, pad):
    # the stream Megatron creates once, on the base class, for its device-to-host copies: a placeholder here
    monkeypatch.setattr(token_dispatcher.MoEAlltoAllTokenDispatcher, "cuda_dtoh_stream", object())
    dt = DTYPES[dname]
    routing_map, probs32 = routing(seed=3, pad=pad)
    x0, probs0 = rand(N, H, dtype=dt, seed=4), probs32.to(dt)
    scale0, w = rand(E, H, dtype=dt, seed=5), rand(N, H, dtype=dt, seed=6)

    def run():
        d = dispatcher(kind, pad, single_process_group)
        x, probs, scale = (t.clone().requires_grad_() for t in (x0, probs0, scale0))
        hidden, p = d.dispatch_preprocess(x, routing_map, probs)
        hidden, p = d.token_dispatch(hidden, p)
        hidden, tokens_per_expert, p = d.dispatch_postprocess(hidden, p)
        out = d.combine_postprocess(d.token_combine(d.combine_preprocess(experts(hidden, tokens_per_expert, p,
                                                                                 scale))))
        (out * w).sum().backward()
        return hidden.detach(), tokens_per_expert, out.detach(), x.grad, probs.grad, scale.grad

    reference, simulated = both(run, monkeypatch)
    for what, got, want in zip(("expert inputs", "tokens per expert", "output", "tokens' gradient",
                                "probs' gradient", "experts' gradient"), simulated, reference):
        assert_bits_equal(as_numpy(got), as_numpy(want), what)
