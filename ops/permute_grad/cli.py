"""MoeTokenPermuteGrad on the command line: its flags, inputs, golden and demo cases."""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_init_routing_v2_grad as l0_tiling_op
from tiling import moe_token_permute_grad as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import INDEX_DEMO_SHAPE, OpSpec, index_demo, index_topk, kept_rows, zipf_of
from . import allocate_outputs, arch35_k_chunk, examples, get_workspace_size, golden, run

NAME = "moe_token_permute_grad"


def _descs(a: argparse.Namespace) -> dict:
    k = index_topk(a, NAME)
    return dict(permuted_output_grad=TensorDesc((kept_rows(a, a.tokens * k), a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32), num_topk=k, padded_mode=False)


def _tiling(args: dict, soc):
    """The tiling a launch runs: T-G on 910B / 910_93; on 950 the l0 MoeInitRoutingV2Grad's, with the arguments
    the aclnn hands it (topK = num_topk, dropPadMode 0, activeNum = rows of the gradient)."""
    if not soc.is_regbase:
        return tiling_op(*args.values(), soc=soc)
    g, s, k = args["permuted_output_grad"], args["sorted_indices"], int(args["num_topk"])
    out = TensorDesc((s.shape[0] // k if k > 0 else 0, g.shape[-1]), g.dtype)
    return l0_tiling_op(g, s, k, 0, g.shape[0], grad_x_out=out, soc=soc)


def _inputs(a: argparse.Namespace) -> dict:
    k = index_topk(a, NAME)
    return examples.make_inputs(a.tokens, a.hidden, k, experts=a.experts, dtype=a.dtype,
                                num_out_tokens=kept_rows(a, a.tokens * k), seed=a.seed, zipf=zipf_of(a))


def _golden(args: dict, tiling) -> tuple:
    g, s, k = args["permuted_output_grad"], args["sorted_indices"], args["num_topk"]
    soc = tiling.soc
    if soc.is_regbase:
        chunk = arch35_k_chunk(g.shape[1], k, s.size // k, g.dtype, soc)
        return (golden.golden_950(g, s, k, chunk),)
    return (golden.golden(g, s, k),)


DEMO = [
    # (label, label on 950, make_inputs keywords)
    ("key 0 (kernel G, no probs)", "MoeInitRoutingV2Grad", dict()),
    ("key 0, rows dropped by numOutTokens", "rows dropped by numOutTokens", dict(num_out_tokens=3000)),
]


def _demo_cases(soc, ub_size=None, aiv_num=None, values: bool = True, zipf: float | None = None) -> list:
    tokens, hidden, experts, top_k = INDEX_DEMO_SHAPE
    return index_demo(NAME, lambda case: examples.make_inputs(tokens, hidden, top_k, experts=experts, dtype="bf16",
                                                              seed=4, zipf=zipf, **case), DEMO, soc)


SPEC = OpSpec(
    name=NAME,
    order=70,
    descs=_descs,
    make_inputs=_inputs,
    tiling=_tiling,
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), *outs, soc=soc),
    run=run,
    outputs=lambda args, soc: (allocate_outputs(args["permuted_output_grad"], args["sorted_indices"],
                                                args["num_topk"]),),
    golden=_golden,
    flags=frozenset({"num_out_tokens"}),
    demo_title=lambda soc: f"MoeTokenPermuteGrad on {soc.name}: bf16, tokens x hidden, topK 8 of 64 experts",
    demo_cases=_demo_cases,
)
