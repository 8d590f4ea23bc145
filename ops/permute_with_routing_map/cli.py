"""MoeTokenPermuteWithRoutingMap on the command line: its flags, inputs, golden and demo cases."""
from __future__ import annotations

import argparse

from tiling import moe_token_permute_with_routing_map as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import (
    ROUTING_FLAGS,
    OpSpec,
    map_desc,
    probs_desc,
    routing_demo,
    routing_inputs,
    routing_layout,
    routing_rows,
    routing_title,
)
from . import allocate_outputs, examples, get_workspace_size, golden, run

NAME = "moe_token_permute_with_routing_map"


def _descs(a: argparse.Namespace) -> dict:
    m = routing_rows(a, NAME)
    return dict(tokens=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)), routing_map=map_desc(a),
                probs=None if a.no_probs else probs_desc(a),
                num_out_tokens=m if a.num_out_tokens is None else a.num_out_tokens, drop_and_pad=a.drop_and_pad)


def _inputs(a: argparse.Namespace) -> dict:
    args = routing_inputs(examples, a, NAME, full_topk=not a.non_topk)
    if a.num_out_tokens is not None:
        args["num_out_tokens"] = a.num_out_tokens
    return args


DEMO = [
    # (label, make_inputs keywords)
    ("non-pad, probs (masked select, sort, copy)", dict(topk=8)),
    ("non-topK rows (-1 slots: rank, scatter)", dict(topk=8, full_topk=False)),
    (("key 9 dropAndPad (last-dim sort + GatherV2)", "key 9 dropAndPad (last-dim sort, in-kernel gathers)"),
     dict(capacity=128, drop_and_pad=True)),
]

SPEC = OpSpec(
    name=NAME,
    order=30,
    descs=_descs,
    make_inputs=_inputs,
    tiling=lambda args, soc: tiling_op(*args.values(), soc=soc),
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), *outs, soc=soc),
    run=run,
    outputs=lambda args, soc: allocate_outputs(*args.values()),
    golden=lambda args, tiling: golden.permute_with_routing_map_golden(*args.values())[:3],
    flags=ROUTING_FLAGS | {"num_out_tokens", "non_topk"},
    demo_title=lambda soc: routing_title(NAME, soc),
    check_flags=lambda a, soc: routing_layout(a, NAME),
    demo_cases=lambda soc, ub_size=None, aiv_num=None, values=True, zipf=None: routing_demo(NAME, examples, DEMO, soc,
                                                                                           values, zipf),
)
