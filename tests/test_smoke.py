"""Smoke test: one small case of each of the nine aclnn operators on Ascend 910B, bit for bit against its golden.

`pytest -m smoke` runs only these: a quick check that every operator still builds, tiles, launches and gives the
golden's bits (under a minute with a warm kernel cache). The goldens are the operators' own (ops/*/golden.py),
written from the documented formulas in the kernels' summation orders; the full suites sweep shapes, dtypes, chips
and every tiling key.
"""
from __future__ import annotations

import numpy as np
import pytest

import ops
from ops import aclnn
from ops.permute import allocate_outputs as permute_outputs
from ops.permute import examples as permute_ex
from ops.permute import golden as permute_golden
from ops.permute_grad import examples as permute_grad_ex
from ops.permute_grad.golden import golden as permute_grad_golden
from ops.permute_with_routing_map import examples as pwrm_ex
from ops.permute_with_routing_map import resolve_num_out_tokens
from ops.permute_with_routing_map.golden import permute_with_routing_map_golden
from ops.permute_with_routing_map_grad import examples as pwrm_grad_ex
from ops.permute_with_routing_map_grad.golden import golden as pwrm_grad_golden
from ops.unpermute import examples as unpermute_ex
from ops.unpermute.golden import golden as unpermute_golden
from ops.unpermute_grad import examples as unpermute_grad_ex
from ops.unpermute_grad.golden import golden as unpermute_grad_golden
from ops.unpermute_with_routing_map import examples as uwrm_ex
from ops.unpermute_with_routing_map.golden import golden as uwrm_golden
from ops.unpermute_with_routing_map_grad import examples as uwrm_grad_ex
from ops.unpermute_with_routing_map_grad.golden import golden as uwrm_grad_golden
from tiling import moe_token_unpermute_grad as unpermute_grad_tiling
from tiling import moe_token_unpermute_with_routing_map_grad as uwrm_grad_tiling

pytestmark = pytest.mark.smoke

SOC = "ascend910b"
N, H, E, K = 8, 16, 4, 2        # tokens, hidden, experts, topK: one small bf16 case each


def _permute():
    """aclnnMoeTokenPermute (V1), both phases by hand: the friendly call runs V2."""
    x, idx = permute_ex.make_inputs(N, H, E, topk=K)
    outs = permute_outputs(x, idx, soc=SOC)[:2]
    size, executor = aclnn.moe_token_permute_get_workspace_size(x, idx, 0, False, *outs, soc=SOC)
    aclnn.moe_token_permute(np.empty(size, np.uint8), size, executor)
    return outs, permute_golden.golden(x, idx)


def _permute_v2():
    x, idx = permute_ex.make_inputs(N, H, E, topk=K)
    return ops.moe_token_permute(x, idx, soc=SOC), permute_golden.golden_v2(x, idx)


def _permute_grad():
    a = permute_grad_ex.make_inputs(N, H, K)
    got = ops.moe_token_permute_grad(a["permuted_output_grad"], a["sorted_indices"], K, soc=SOC)
    return (got,), (permute_grad_golden(a["permuted_output_grad"], a["sorted_indices"], K),)


def _permute_with_routing_map():
    a = pwrm_ex.make_inputs(N, H, E, topk=K)
    m = resolve_num_out_tokens(a["routing_map"], a["num_out_tokens"], False)
    want = permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], m, False)[:3]
    return ops.moe_token_permute_with_routing_map(**a, soc=SOC), want


def _permute_with_routing_map_grad():
    a = pwrm_grad_ex.make_inputs(N, H, E, topk=K)
    return ops.moe_token_permute_with_routing_map_grad(*a.values(), soc=SOC), pwrm_grad_golden(*a.values())


def _unpermute():
    a = unpermute_ex.make_inputs(N, H, E, K)
    got = ops.moe_token_unpermute(**a, soc=SOC)
    return (got,), (unpermute_golden(a["permuted_tokens"], a["sorted_indices"], a["probs"]),)


def _unpermute_grad():
    a = unpermute_grad_ex.make_inputs(N, H, topk=K)
    p, g, s, pr = a["permuted_tokens"], a["unpermuted_tokens_grad"], a["sorted_indices"], a["probs"]
    piece = unpermute_grad_tiling(p, g, s, pr, soc=SOC).fields["hidden_size_align"]    # the kernel's hidden split
    return ops.moe_token_unpermute_grad(p, g, s, pr, soc=SOC), unpermute_grad_golden(p, g, s, pr, hidden_piece=piece)


def _unpermute_with_routing_map():
    a = uwrm_ex.make_inputs(N, H, E, topk=K)
    got = ops.moe_token_unpermute_with_routing_map(**a, soc=SOC)
    return got, uwrm_golden(*a.values(), out_shape=got[0].shape)


def _unpermute_with_routing_map_grad():
    a = uwrm_grad_ex.make_inputs(N, H, E, topk=K)
    piece = uwrm_grad_tiling(*a.values(), soc=SOC).fields["hidden_size_align"]
    return (ops.moe_token_unpermute_with_routing_map_grad(*a.values(), soc=SOC),
            uwrm_grad_golden(*a.values(), hidden_piece=piece))


# aclnn operator (snake_case): its case, returning (outputs, golden outputs)
CASES = {
    "moe_token_permute": _permute,
    "moe_token_permute_v2": _permute_v2,
    "moe_token_permute_grad": _permute_grad,
    "moe_token_permute_with_routing_map": _permute_with_routing_map,
    "moe_token_permute_with_routing_map_grad": _permute_with_routing_map_grad,
    "moe_token_unpermute": _unpermute,
    "moe_token_unpermute_grad": _unpermute_grad,
    "moe_token_unpermute_with_routing_map": _unpermute_with_routing_map,
    "moe_token_unpermute_with_routing_map_grad": _unpermute_with_routing_map_grad,
}


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def _assert_same_bits(got, want, where: str) -> None:
    """got and want have one shape, one dtype and the same bits; else the message names the first differing
    element and both values."""
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{where}: got {got.dtype}{got.shape}, golden {want.dtype}{want.shape}"
    differ = np.flatnonzero(_bits(got).reshape(-1) != _bits(want).reshape(-1))
    if differ.size:
        i = np.unravel_index(differ[0], got.shape)
        raise AssertionError(f"{where}: {differ.size} of {got.size} elements differ; first at {tuple(map(int, i))}: "
                             f"got {got[i]!r} (0x{int(_bits(got)[i]):x}), golden {want[i]!r} "
                             f"(0x{int(_bits(want)[i]):x})")


def test_the_nine_aclnn_operators_are_covered():
    assert sorted(CASES) == sorted(name for name in aclnn.__all__ if not name.endswith("_get_workspace_size"))


@pytest.mark.parametrize("op", list(CASES))
def test_smoke(op):
    got, want = CASES[op]()
    got, want = tuple(got), tuple(want)
    assert len(got) == len(want), f"{op}: {len(got)} outputs, the golden has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if w is None:       # an output the op leaves unwritten here (MoeTokenUnpermuteWithRoutingMap's out_index
            continue        # and permute_token_id outside padded mode), as the CLI's golden check skips it
        _assert_same_bits(g, w, f"{op} output {k}")
