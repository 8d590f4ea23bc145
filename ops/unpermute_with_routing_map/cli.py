"""MoeTokenUnpermuteWithRoutingMap on the command line: its flags, inputs, golden and demo cases.

source: moe/moe_token_unpermute_with_routing_map/op_host/op_api/aclnn_moe_token_unpermute_with_routing_map.h (the aclnn
arguments) @ 25fb6b92890d.
"""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_token_unpermute_with_routing_map as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import (
    ROUTING_FLAGS,
    OpSpec,
    map_desc,
    pad_close_or_exact,
    probs_desc,
    routing_demo,
    routing_inputs,
    routing_layout,
    routing_rows,
    routing_title,
)
from . import allocate_outputs, examples, get_workspace_size, golden, run

NAME = "moe_token_unpermute_with_routing_map"


def _descs(a: argparse.Namespace) -> dict:
    m = routing_rows(a, NAME)
    probs = not a.no_probs
    return dict(permuted_tokens=TensorDesc((m, a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((m,), np.int32),
                routing_map=map_desc(a) if probs else None, probs=probs_desc(a) if probs else None,
                padded_mode=a.drop_and_pad, restore_shape=(a.tokens, a.hidden))


DEMO = [
    # (label, make_inputs keywords)
    ("key 0 no probs (kernel G)", dict(topk=8, with_probs=False)),
    ("key 1 probs (masked select + kernel G)", dict(topk=8)),
    ("key 1 bf16 tokens, fp32 probs", dict(topk=8, probs_dtype="fp32")),
    ("key 1000 dropAndPad (+ Sort, index add)", dict(capacity=128, drop_and_pad=True)),
]

SPEC = OpSpec(
    name=NAME,
    order=40,
    descs=_descs,
    make_inputs=lambda a: routing_inputs(examples, a, NAME),
    tiling=lambda args, soc: tiling_op(*args.values(), soc=soc),
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), *outs, soc=soc),
    run=run,
    outputs=lambda args, soc: allocate_outputs(*args.values()),
    golden=lambda args, tiling: golden.golden(*args.values()),
    flags=ROUTING_FLAGS,
    check=pad_close_or_exact,
    demo_title=lambda soc: routing_title(NAME, soc),
    check_flags=lambda a, soc: routing_layout(a, NAME),
    demo_cases=lambda soc, ub_size=None, aiv_num=None, values=True, zipf=None: routing_demo(NAME, examples, DEMO, soc,
                                                                                           values, zipf),
)
