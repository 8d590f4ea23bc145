"""MoeTokenUnpermuteGrad on the command line: its flags, inputs, golden and demo cases.

source: moe/moe_token_unpermute_grad/op_host/op_api/aclnn_moe_token_unpermute_grad.h
(the aclnn arguments) @ 25fb6b92890d.
"""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_finalize_routing_v2_grad as l0_tiling_op
from tiling import moe_token_unpermute_grad as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import INDEX_DEMO_SHAPE, OpSpec, index_demo, slots_per_token, zipf_of
from . import allocate_outputs, examples, get_workspace_size, golden, run

NAME = "moe_token_unpermute_grad"


def _descs(a: argparse.Namespace) -> dict:
    k = slots_per_token(a, NAME)
    dt = as_dtype(a.dtype)
    return dict(permuted_tokens=TensorDesc((a.tokens * k, a.hidden), dt),
                unpermuted_tokens_grad=TensorDesc((a.tokens, a.hidden), dt),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32),
                probs=None if a.no_probs else TensorDesc((a.tokens, k), as_dtype(a.probs_dtype or a.dtype)),
                padded_mode=False)


def _tiling(args: dict, soc):
    """The tiling a launch runs: this op's on 910B / 910_93; on 950 the l0 MoeFinalizeRoutingV2Grad's, with the
    arguments the aclnn hands it (dropPadMode 0, activeNum = len(sorted_indices))."""
    if not soc.is_regbase:
        return tiling_op(*args.values(), soc=soc)
    p, g, s, pr = (args[n] for n in ("permuted_tokens", "unpermuted_tokens_grad", "sorted_indices", "probs"))
    out = TensorDesc((s.shape[0], g.shape[-1]), g.dtype)
    return l0_tiling_op(g, s, p, pr, None, None, 0, s.shape[0], 0, 0, grad_expanded_x_out=out, grad_scales_out=pr,
                        soc=soc)


def _inputs(a: argparse.Namespace) -> dict:
    k = slots_per_token(a, NAME)
    return examples.make_inputs(a.tokens, a.hidden, topk=k, dtype=a.dtype, probs_dtype=a.probs_dtype,
                                with_probs=not a.no_probs, seed=a.seed, experts=a.experts, zipf=zipf_of(a))


DEMO = [
    # (label, label on 950, make_inputs keywords)
    ("key 0 no probs (copy)", "no probs (row copies)", dict(with_probs=False)),
    ("key 1 probs (ReduceSumFunc)", "probs (CalcGradScaleVF)", dict()),
    ("key 1 bf16 grads, fp32 probs", "bf16 grads, fp32 probs", dict(probs_dtype="fp32")),
]


def _demo_cases(soc, ub_size=None, aiv_num=None, values: bool = True, zipf: float | None = None) -> list:
    tokens, hidden, experts, top_k = INDEX_DEMO_SHAPE
    return index_demo(NAME, lambda case: examples.make_inputs(tokens, hidden, topk=top_k, dtype="bf16", seed=4,
                                                              values=values, experts=experts, zipf=zipf, **case),
                      DEMO, soc)


SPEC = OpSpec(
    name=NAME,
    order=80,
    descs=_descs,
    make_inputs=_inputs,
    tiling=_tiling,
    # mypy cannot tell that the unpacked arguments stop before the keyword-only soc
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), None, *outs,  # type: ignore[misc]
                                                                  soc=soc),
    run=run,
    outputs=lambda args, soc: allocate_outputs(args["permuted_tokens"], args["unpermuted_tokens_grad"],
                                               args["sorted_indices"], args["probs"]),
    golden=lambda args, tiling: golden.golden(*list(args.values())[:4],
                                              hidden_piece=tiling.fields.get("hidden_size_align"),
                                              arch35=tiling.soc.is_regbase),
    flags=frozenset({"no_probs", "probs_dtype"}),
    demo_title=lambda soc: f"MoeTokenUnpermuteGrad on {soc.name}: bf16, tokens x hidden, topK 8",
    demo_cases=_demo_cases,
)
