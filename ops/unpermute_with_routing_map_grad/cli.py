"""MoeTokenUnpermuteWithRoutingMapGrad on the command line: its flags, inputs, golden and demo cases."""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_token_unpermute_with_routing_map_grad as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import ROUTING_FLAGS, DemoCase, OpSpec, routing_inputs, routing_layout, routing_rows
from . import examples, get_workspace_size, golden, run

NAME = "moe_token_unpermute_with_routing_map_grad"


def _descs(a: argparse.Namespace) -> dict:
    m = routing_rows(a, NAME)
    probs = not a.no_probs
    dtype = as_dtype(a.dtype)
    return dict(unpermuted_tokens_grad=TensorDesc((a.tokens, a.hidden), dtype),
                out_index=TensorDesc((m,), np.int32), permute_token_id=TensorDesc((m,), np.int32),
                routing_map=TensorDesc((a.tokens, a.experts), as_dtype(a.routing_map_dtype or "bool"))
                if probs else None,
                permuted_tokens=TensorDesc((m, a.hidden), dtype) if probs else None,
                probs=TensorDesc((a.tokens, a.experts), as_dtype(a.probs_dtype or a.dtype)) if probs else None,
                drop_and_pad=a.drop_and_pad)


def _outputs(args: dict, soc) -> tuple:
    g = args["unpermuted_tokens_grad"]
    out = np.zeros((args["out_index"].size, g.shape[1]), dtype=g.dtype)
    probs = args["probs"]
    return out, (None if probs is None else np.zeros(probs.shape, dtype=probs.dtype))


DEMO: list[tuple[str, dict]] = [
    # (label, make_inputs keywords); tokens 512, hidden 4096, experts 64, bf16
    ("key 0   no probs", dict(topk=8)),
    ("key 10  no probs, dropAndPad", dict(capacity=128, drop_and_pad=True)),
    ("key 1   probs", dict(topk=8, with_probs=True)),
    ("key 11  probs, dropAndPad", dict(capacity=128, drop_and_pad=True, with_probs=True)),
    ("key 101 bf16 grads, fp32 probs", dict(topk=8, with_probs=True, probs_dtype="fp32")),
    ("key 111 bf16 grads, fp32 probs, dropAndPad", dict(capacity=128, drop_and_pad=True, with_probs=True,
                                                        probs_dtype="fp32")),
]


def _demo_cases(soc, ub_size=None, aiv_num=None, values: bool = True, zipf: float | None = None) -> list:
    tokens, hidden, experts = 512, 4096, 64
    return [DemoCase(NAME, label, soc,
                     examples.make_inputs(tokens, hidden, experts, dtype="bf16", seed=1, values=values, zipf=zipf,
                                          **{"with_probs": False, **case}),
                     f"{tokens}x{hidden} E{experts}") for label, case in DEMO]


def _demo_title(soc) -> str:
    return (f"MoeTokenUnpermuteWithRoutingMapGrad on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B): bf16, "
            "tokens x hidden, E experts")


SPEC = OpSpec(
    name=NAME,
    order=10,
    descs=_descs,
    make_inputs=lambda a: routing_inputs(examples, a, NAME),
    tiling=lambda args, soc: tiling_op(*args.values(), soc=soc),
    # mypy cannot tell that the unpacked arguments stop before the keyword-only soc
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), None, *outs,  # type: ignore[misc]
                                                                  soc=soc),
    run=run,
    outputs=_outputs,
    golden=lambda args, tiling: golden.golden(*args.values(), hidden_piece=tiling.fields["hidden_size_align"]),
    flags=ROUTING_FLAGS,
    demo_title=_demo_title,
    check_flags=lambda a, soc: routing_layout(a, NAME),
    demo_cases=_demo_cases,
)
