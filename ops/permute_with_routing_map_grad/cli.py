"""MoeTokenPermuteWithRoutingMapGrad on the command line: its flags, inputs, golden and demo cases."""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_token_permute_with_routing_map_grad as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import (
    ROUTING_FLAGS,
    OpSpec,
    map_desc,
    pad_close_or_exact,
    routing_demo,
    routing_inputs,
    routing_layout,
    routing_rows,
    routing_title,
)
from . import allocate_outputs, examples, get_workspace_size, golden, run

NAME = "moe_token_permute_with_routing_map_grad"


def _descs(a: argparse.Namespace) -> dict:
    m = routing_rows(a, NAME)
    probs = not a.no_probs
    return dict(permuted_token_output_grad=TensorDesc((m, a.hidden), as_dtype(a.dtype)),
                permuted_probs_output_grad=TensorDesc((m,), as_dtype(a.probs_dtype or a.dtype)) if probs else None,
                sorted_indices=TensorDesc((m,), np.int32), routing_map=map_desc(a) if probs else None,
                num_experts=a.experts, tokens_num=a.tokens, drop_and_pad=a.drop_and_pad)


DEMO = [
    # (label, make_inputs keywords)
    ("key 0 + MaskedScatter of probs grads", dict(topk=8)),
    ("key 1000 dropAndPad (+ Sort, index add)", dict(capacity=128, drop_and_pad=True)),
]

SPEC = OpSpec(
    name=NAME,
    order=50,
    descs=_descs,
    make_inputs=lambda a: routing_inputs(examples, a, NAME, full_topk=not a.non_topk),
    tiling=lambda args, soc: tiling_op(*args.values(), soc=soc),
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), *outs, soc=soc),
    run=run,
    outputs=lambda args, soc: allocate_outputs(args["permuted_token_output_grad"],
                                               args["permuted_probs_output_grad"], args["num_experts"],
                                               args["tokens_num"]),
    golden=lambda args, tiling: golden.golden(*args.values()),
    flags=ROUTING_FLAGS | {"non_topk"},
    check=pad_close_or_exact,
    demo_title=lambda soc: routing_title(NAME, soc),
    check_flags=lambda a, soc: routing_layout(a, NAME),
    demo_cases=lambda soc, ub_size=None, aiv_num=None, values=True, zipf=None: routing_demo(NAME, examples, DEMO, soc,
                                                                                           values, zipf),
)
