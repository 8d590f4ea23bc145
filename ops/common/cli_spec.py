"""What the command line needs to know about an operator, as each operator package states it.

Every operator package has a `cli.py` whose `SPEC` is an `OpSpec`: how to describe a case from the
flags (shapes and dtypes only, for `tiling` and `limits`), how to build its inputs (for `run`,
`profile`), how to tile, run and check it, which operator-specific flags it reads, and its demo
cases. `ops.cli` lists the packages and never names an operator otherwise.

This module sits below both the operator packages and `ops.cli` and imports neither, so an
operator's spec can be imported on its own and the command line can import every spec.
The flag rules shared by an operator family (the routing-map ops' rows, the index family's
top-k) live here too, so each family states them once.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tiling.common import TensorDesc, TilingResult, as_dtype
from tiling.moe_token_permute import effective_num_out_tokens
from tiling.platform import SocProfile


class CliError(Exception):
    """A bad flag or value: printed as one line, exit status 2."""


def zipf_of(a: argparse.Namespace) -> float | None:
    """The routing skew of the flags (--routing): the Zipf exponent, None for uniform routing (also when the
    namespace has no such flag, e.g. one built by hand)."""
    return getattr(a, "routing", None)


@dataclass(frozen=True)
class DemoCase:
    """One case of `ascend-sim demo`: the operator's inputs (an aclnn argument dict) on `soc`; `label` and
    `shape` are the printed names."""
    op: str
    label: str
    soc: SocProfile
    args: dict
    shape: str


@dataclass(frozen=True)
class OpSpec:
    """How the CLI builds inputs, tiles, runs and checks one operator.

    `args` below is the operator's aclnn argument dict (its inputs in aclnn order), `a` the parsed flags.
    `flags` are the operator-specific flags (argparse dests) it reads; any other operator-specific flag
    given on the command line is reported as not applying to it.
    """
    name: str
    order: int
    """The operator's place in the demo and in the help's operator list (ascending)."""
    descs: Callable[[argparse.Namespace], dict]
    """TensorDescs in aclnn order straight from the flags (any shape, no data)."""
    make_inputs: Callable[[argparse.Namespace], dict]
    tiling: Callable[..., TilingResult]
    get_workspace_size: Callable[..., tuple]
    run: Callable[..., None]
    outputs: Callable[[dict, SocProfile], tuple]
    golden: Callable[[dict, TilingResult], tuple]
    flags: frozenset
    demo_title: Callable[[SocProfile], str]
    """The heading of the operator's demo group on a chip profile."""
    demo_cases: Callable[..., list]
    """demo_cases(soc, ub_size, aiv_num, values, zipf) -> [DemoCase]; values=False leaves the large float tensors
    zero (enough to tile and compile); zipf: the routing skew's exponent (None: uniform; ops.common.routing).
    ub_size / aiv_num: the custom profile, for cases pinned to another chip."""
    check: Callable[[tuple, tuple, dict], bool] | None = None
    """Compares outputs with the golden (default: every output the golden defines, bit for bit)."""
    check_flags: Callable[[argparse.Namespace, object], None] | None = None
    """Raises CliError for the operator's own flags that the chip profile or the other flags make
    meaningless (the generic rule, a flag of another operator, is the CLI's)."""


def same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def close_to_golden(outs, want, args) -> bool:
    """Index-add paths (drop-and-pad token gradients and unpermute): the real op adds rows in an order it does
    not fix, so compare within a bound derived from the terms: each output element is a sum of at most
    `terms` values, so it may differ from the golden by terms * eps * the sum of their magnitudes."""
    for o, w in zip(outs, want, strict=False):
        if w is None:
            continue
        if o is None or o.shape != w.shape:
            return False
        if o.dtype.kind != "f" and o.dtype.name != "bfloat16":
            if not np.array_equal(o, w):
                return False
            continue
        eps = float(np.finfo(o.dtype).eps) if o.dtype.name != "bfloat16" else 2.0 ** -7
        got, ref = o.astype(np.float64), w.astype(np.float64)
        if not np.all(np.abs(got - ref) <= 4 * eps * (np.abs(ref) + 1e-30) + 1e-6 * np.abs(ref).max(initial=0)):
            return False
    return True


def pad_close_or_exact(outs, want, args) -> bool:
    """Within the index-add bound in drop-and-pad mode (an index add there), bit-exact otherwise."""
    pad = args.get("padded_mode", args.get("drop_and_pad", False))
    if pad:
        return close_to_golden(outs, want, args)
    return all(same_bits(o, w) for o, w in zip(outs, want, strict=False) if w is not None or o is None)


# --- the routing-map family: a (tokens, experts) map, rows tokens * topK or experts * capacity ---------------
ROUTING_FLAGS = frozenset({"capacity", "drop_and_pad", "no_probs", "probs_dtype", "routing_map_dtype"})


def routing_layout(a: argparse.Namespace, op: str) -> None:
    """The layout flags must agree (whatever the shape): --drop-and-pad with --capacity, else --topk. An
    OpSpec.check_flags, so that `limits` refuses them as flags instead of exploring a shape that never tiles."""
    if a.drop_and_pad and a.capacity is None:
        raise CliError("--drop-and-pad needs --capacity (slots per expert)")
    if not a.drop_and_pad and a.capacity is not None:
        raise CliError("--capacity applies with --drop-and-pad only; without it give --topk")
    if not a.drop_and_pad and a.topk is None:
        raise CliError(f"{op} without --drop-and-pad needs --topk")


def routing_rows(a: argparse.Namespace, op: str) -> int:
    """Permuted rows M: tokens * topK, or experts * capacity with --drop-and-pad."""
    routing_layout(a, op)
    return a.experts * a.capacity if a.drop_and_pad else a.tokens * a.topk


def routing_inputs(examples, a: argparse.Namespace, op: str, **extra) -> dict:
    """Inputs from the op's examples.make_inputs: a softmax router's top-k map, or each expert's best tokens."""
    routing_rows(a, op)
    if a.topk is not None and not 1 <= a.topk <= a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to build a routing map, got {a.topk}")
    if a.drop_and_pad and not 1 <= a.capacity <= a.tokens:
        raise CliError(f"--capacity must be in [1, --tokens={a.tokens}] to build a routing, got {a.capacity}")
    return examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, capacity=a.capacity, dtype=a.dtype,
                                probs_dtype=a.probs_dtype, drop_and_pad=a.drop_and_pad, with_probs=not a.no_probs,
                                routing_map_dtype=a.routing_map_dtype or "bool", seed=a.seed, zipf=zipf_of(a),
                                **extra)


def map_desc(a: argparse.Namespace) -> TensorDesc:
    return TensorDesc((a.tokens, a.experts), as_dtype(a.routing_map_dtype or "bool"))


def probs_desc(a: argparse.Namespace) -> TensorDesc:
    return TensorDesc((a.tokens, a.experts), as_dtype(a.probs_dtype or a.dtype))


def routing_title(op: str, soc) -> str:
    name = "".join(w.capitalize() for w in op.split("_"))
    return f"{name} on {soc.name}: bf16, tokens x hidden, E experts (a composite aclnn: kernels + host l0 steps)"


def routing_demo(op: str, examples, table, soc, values: bool, zipf: float | None = None) -> list:
    """Demo cases of a routing-map op: (label, make_inputs keywords) rows at tokens 512, hidden 4096, experts 64,
    bf16 (seed 3); a label may be a (910B / 910_93 label, 950 label) pair where the kernels differ."""
    tokens, hidden, experts = 512, 4096, 64
    cases = []
    for label, case in table:
        if isinstance(label, tuple):
            label = label[1] if soc.is_regbase else label[0]
        args = examples.make_inputs(tokens, hidden, experts, dtype="bf16", seed=3, values=values, zipf=zipf, **case)
        shape = f"{tokens}x{hidden} E{experts} " + (f"cap {case['capacity']}" if "capacity" in case
                                                      else f"topK {case['topk']}")
        cases.append(DemoCase(op, label, soc, args, shape))
    return cases


# --- the index family: top-k indices, permuted rows numbered as MoeTokenPermute (V1) leaves them --------------
INDEX_FLAGS = frozenset({"num_out_tokens", "no_probs", "probs_dtype"})
INDEX_DEMO_SHAPE = (512, 4096, 64, 8)
"""tokens, hidden, experts, topK of the index family's demo cases (bf16, seed 4)."""


def index_topk(a: argparse.Namespace, op: str) -> int:
    if a.topk is None:
        raise CliError(f"{op} needs --topk")
    if a.topk > a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to route tokens, got {a.topk}")
    return a.topk


def kept_rows(a: argparse.Namespace, slots: int) -> int:
    """Rows the forward kept: MoeTokenPermute's numOutTokens rule (0 = all, negative = drop from the end)."""
    return effective_num_out_tokens(a.num_out_tokens or 0, slots)


def slots_per_token(a: argparse.Namespace, op: str) -> int:
    """K of an index-family op with optional probs: 1 without probs (the op's rule), else --topk."""
    return 1 if a.no_probs else index_topk(a, op)


def index_demo(op: str, make_args, table, soc) -> list:
    """Demo cases of an index-family op from (label, label on 950, make_inputs keywords) rows; make_args(keywords)
    builds one. The 950 label names what runs there (another family's l0 operator, not this op's kernel keys)."""
    tokens, hidden, _, top_k = INDEX_DEMO_SHAPE
    cases = []
    for label_membase, label_regbase, case in table:
        label = label_regbase if soc.is_regbase else label_membase
        shape = f"{tokens}x{hidden} topK {top_k}" + (f" keep {case['num_out_tokens']}" if "num_out_tokens" in case
                                                     else "")
        cases.append(DemoCase(op, label, soc, make_args(case), shape))
    return cases
