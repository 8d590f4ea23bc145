"""MoeTokenUnpermute on the command line: its flags, inputs, golden and demo cases.

source: moe/moe_token_unpermute/op_host/op_api/aclnn_moe_token_unpermute.h (the aclnn arguments) @ 25fb6b92890d.
"""
from __future__ import annotations

import argparse

import numpy as np

from tiling import moe_token_unpermute as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import INDEX_DEMO_SHAPE, INDEX_FLAGS, OpSpec, index_demo, kept_rows, slots_per_token, zipf_of
from . import allocate_outputs, examples, get_workspace_size, golden, run

NAME = "moe_token_unpermute"


def _descs(a: argparse.Namespace) -> dict:
    k = slots_per_token(a, NAME)
    return dict(permuted_tokens=TensorDesc((kept_rows(a, a.tokens * k), a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32),
                probs=None if a.no_probs else TensorDesc((a.tokens, k), as_dtype(a.probs_dtype or a.dtype)),
                padded_mode=False, restore_shape=None)


def _inputs(a: argparse.Namespace) -> dict:
    k = slots_per_token(a, NAME)
    return examples.make_inputs(a.tokens, a.hidden, a.experts, k, dtype=a.dtype, probs_dtype=a.probs_dtype,
                                with_probs=not a.no_probs, num_out_tokens=kept_rows(a, a.tokens * k), seed=a.seed,
                                zipf=zipf_of(a))


DEMO = [
    # (label, label on 950, make_inputs keywords)
    ("key 1 probs (kernel G)", "probs (MoeFinalizeRoutingV2)", dict()),
    ("key 25 bf16 tokens, fp32 probs", "bf16 tokens, fp32 probs", dict(probs_dtype="fp32")),
    ("key 0 no probs", "no probs", dict(with_probs=False)),
    ("key 1, rows dropped by numOutTokens", "probs, rows dropped by numOutTokens", dict(num_out_tokens=3000)),
]


def _demo_cases(soc, ub_size=None, aiv_num=None, values: bool = True, zipf: float | None = None) -> list:
    tokens, hidden, experts, top_k = INDEX_DEMO_SHAPE
    return index_demo(NAME, lambda case: examples.make_inputs(tokens, hidden, experts, top_k, dtype="bf16", seed=4,
                                                              values=values, zipf=zipf, **case), DEMO, soc)


SPEC = OpSpec(
    name=NAME,
    order=60,
    descs=_descs,
    make_inputs=_inputs,
    tiling=lambda args, soc: tiling_op(*args.values(), soc=soc),
    get_workspace_size=lambda args, outs, soc: get_workspace_size(*args.values(), *outs, soc=soc),
    run=run,
    outputs=lambda args, soc: (allocate_outputs(args["permuted_tokens"], args["sorted_indices"], args["probs"]),),
    golden=lambda args, tiling: (golden.golden(args["permuted_tokens"], args["sorted_indices"], args["probs"],
                                               arch35=tiling.soc.is_regbase),),
    flags=INDEX_FLAGS,
    demo_title=lambda soc: f"MoeTokenUnpermute on {soc.name}: bf16, tokens x hidden, topK 8 of 64 experts",
    demo_cases=_demo_cases,
)
