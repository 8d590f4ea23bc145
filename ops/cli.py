"""ascend-sim command line: `demo`, `tiling OP ...`, `run OP ...`.

    ascend-sim demo [--soc ascend910b] [--ub-size B] [--cores N]
    ascend-sim run moe_token_permute --tokens 4096 --hidden 7168 --experts 256 --topk 8 --soc ascend950 --quant-mode 3
    ascend-sim tiling moe_token_unpermute_with_routing_map_grad --tokens 4096 --hidden 7168 --experts 256 --topk 8
    ascend-sim run moe_token_unpermute_with_routing_map_grad --tokens 512 --hidden 4096 --experts 64 --capacity 64 \
        --drop-and-pad --probs-dtype fp32 --per-core --json

Every error is one line on stderr and a non-zero exit (2: a bad flag; 1: the operator or the
simulator refused the case, or the result did not match the golden), never a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ascend_sim import ConfigError, SimulatorError, UBOverflowError, cache_state, stage_signature
from ascend_sim._jit import ensure_compiled
from tiling import get_soc
from tiling import moe_token_permute as tiling_permute
from tiling.moe_token_permute import effective_num_out_tokens
from tiling import moe_token_permute_grad as tiling_permute_grad
from tiling import moe_token_unpermute as tiling_unpermute
from tiling import moe_token_unpermute_grad as tiling_unpermute_grad
from tiling import moe_token_permute_with_routing_map as tiling_pwrm
from tiling import moe_token_permute_with_routing_map_grad as tiling_pwrm_grad
from tiling import moe_token_unpermute_with_routing_map as tiling_uwrm
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad
from tiling.common import TensorDesc, as_dtype
from tiling.status import AclnnError

from . import permute as permute_op
from ._framework import listening_to_compiles
from .permute import examples as permute_examples
from .permute import golden as permute_golden
from . import permute_grad as permute_grad_op
from . import permute_with_routing_map as pwrm_op
from . import unpermute as unpermute_op
from . import unpermute_grad as unpermute_grad_op
from .permute_grad import examples as permute_grad_examples
from .permute_grad import golden as permute_grad_golden
from .unpermute import examples as unpermute_examples
from .unpermute import golden as unpermute_golden
from .unpermute_grad import examples as unpermute_grad_examples
from .unpermute_grad import golden as unpermute_grad_golden
from . import permute_with_routing_map_grad as pwrm_grad_op
from . import unpermute_with_routing_map as uwrm_op
from .permute_with_routing_map import examples as pwrm_examples
from .permute_with_routing_map import golden as pwrm_golden
from .permute_with_routing_map_grad import examples as pwrm_grad_examples
from .permute_with_routing_map_grad import golden as pwrm_grad_golden
from .unpermute_with_routing_map import examples as uwrm_examples
from .unpermute_with_routing_map import golden as uwrm_golden
from .unpermute_with_routing_map_grad import examples as uwrm_grad_examples
from .unpermute_with_routing_map_grad import golden as uwrm_grad_golden
from .unpermute_with_routing_map_grad import get_workspace_size as uwrm_grad_workspace
from .unpermute_with_routing_map_grad import run as uwrm_grad_run


class CliError(Exception):
    """A bad flag or value: printed as one line, exit status 2."""


# --- operators ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpAdapter:
    """How the CLI builds inputs, tiles, runs and checks one operator.

    `flags` are the operator-specific flags (argparse dests) it reads; any other operator-specific flag
    given on the command line is reported as not applying to it.
    """
    descs: Callable[[argparse.Namespace], dict]
    make_inputs: Callable[[argparse.Namespace], dict]
    tiling: Callable[..., object]
    get_workspace_size: Callable[..., tuple]
    run: Callable[..., None]
    outputs: Callable[[dict, object], tuple]
    golden: Callable[[dict, object], tuple]
    flags: frozenset
    check: Callable[[tuple, tuple, dict], bool] | None = None
    """Compares outputs with the golden (default: every output the golden defines, bit for bit)."""


def _uwrm_grad_rows(a: argparse.Namespace) -> int:
    if a.drop_and_pad and a.capacity is None:
        raise CliError("--drop-and-pad needs --capacity (slots per expert)")
    if not a.drop_and_pad and a.capacity is not None:
        raise CliError("--capacity applies with --drop-and-pad only; without it give --topk")
    if not a.drop_and_pad and a.topk is None:
        raise CliError("without --drop-and-pad, --topk is required")
    return a.experts * a.capacity if a.drop_and_pad else a.tokens * a.topk


def _uwrm_grad_descs(a: argparse.Namespace) -> dict:
    """Tensor descriptions in aclnn order, straight from the flags (any shape, no data)."""
    m = _uwrm_grad_rows(a)
    probs = not a.no_probs
    dtype = as_dtype(a.dtype)
    return dict(unpermuted_tokens_grad=TensorDesc((a.tokens, a.hidden), dtype),
                out_index=TensorDesc((m,), np.int32), permute_token_id=TensorDesc((m,), np.int32),
                routing_map=TensorDesc((a.tokens, a.experts), as_dtype(a.routing_map_dtype or "bool"))
                if probs else None,
                permuted_tokens=TensorDesc((m, a.hidden), dtype) if probs else None,
                probs=TensorDesc((a.tokens, a.experts), as_dtype(a.probs_dtype or a.dtype)) if probs else None,
                drop_and_pad=a.drop_and_pad)


def _uwrm_grad_inputs(a: argparse.Namespace) -> dict:
    pad = a.drop_and_pad
    _uwrm_grad_rows(a)
    if a.topk is not None and not 1 <= a.topk <= a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to build a routing map, got {a.topk}")
    if pad and not 1 <= a.capacity <= a.tokens:
        raise CliError(f"--capacity must be in [1, --tokens={a.tokens}] to build a routing, got {a.capacity}")
    return uwrm_grad_examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, capacity=a.capacity,
                                          dtype=a.dtype, probs_dtype=a.probs_dtype, drop_and_pad=pad,
                                          with_probs=not a.no_probs, routing_map_dtype=a.routing_map_dtype or "bool",
                                          seed=a.seed)


def _uwrm_grad_outputs(args: dict, soc) -> tuple:
    g = args["unpermuted_tokens_grad"]
    out = np.zeros((args["out_index"].size, g.shape[1]), dtype=g.dtype)
    probs = args["probs"]
    return out, (None if probs is None else np.zeros(probs.shape, dtype=probs.dtype))


def _permute_check(a: argparse.Namespace) -> None:
    if a.topk is None:
        raise CliError("moe_token_permute needs --topk")


def _permute_descs(a: argparse.Namespace) -> dict:
    _permute_check(a)
    return dict(tokens=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)),
                indices=TensorDesc((a.tokens, a.topk), as_dtype(a.indices_dtype or "int32")),
                num_out_tokens=a.num_out_tokens or 0, padded_mode=False, quant_mode=_quant_mode(a))


def _quant_mode(a: argparse.Namespace) -> int:
    return -1 if a.quant_mode is None else a.quant_mode


def _permute_inputs(a: argparse.Namespace) -> dict:
    _permute_check(a)
    tokens, indices = permute_examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, dtype=a.dtype,
                                                   indices_dtype=a.indices_dtype or "int32", seed=a.seed)
    return dict(tokens=tokens, indices=indices, num_out_tokens=a.num_out_tokens or 0, padded_mode=False,
                quant_mode=_quant_mode(a), mx_scale_rule=a.mx_scale_rule or "floor")


def _permute_tiling(args: dict, soc):
    return tiling_permute(args["tokens"], args["indices"], args["num_out_tokens"], args["padded_mode"],
                          args["quant_mode"], soc=soc)


def _permute_workspace(args: dict, outs: tuple, soc):
    return permute_op.get_workspace_size_v2(args["tokens"], args["indices"], args["num_out_tokens"],
                                            args["padded_mode"], args["quant_mode"], *outs, soc=soc,
                                            mx_scale_rule=args.get("mx_scale_rule", "floor"))


def _permute_golden(args: dict, tiling):
    quant = args["quant_mode"] if tiling.soc.is_regbase else -1
    return permute_golden.golden_v2(args["tokens"], args["indices"], args["num_out_tokens"], quant,
                                    args.get("mx_scale_rule", "floor"))


def _permute_outputs(args: dict, soc) -> tuple:
    return permute_op.allocate_outputs(args["tokens"], args["indices"], args["num_out_tokens"], args["quant_mode"],
                                       soc=soc)


def _routing_rows(a: argparse.Namespace, op: str) -> int:
    """Permuted rows M: tokens * topK, or experts * capacity with --drop-and-pad."""
    if a.drop_and_pad and a.capacity is None:
        raise CliError("--drop-and-pad needs --capacity (slots per expert)")
    if not a.drop_and_pad and a.capacity is not None:
        raise CliError("--capacity applies with --drop-and-pad only; without it give --topk")
    if not a.drop_and_pad and a.topk is None:
        raise CliError(f"{op} without --drop-and-pad needs --topk")
    return a.experts * a.capacity if a.drop_and_pad else a.tokens * a.topk


def _routing_inputs(examples, a: argparse.Namespace, op: str, **extra) -> dict:
    """Inputs from the op's examples.make_inputs: a softmax router's top-k map, or each expert's best tokens."""
    _routing_rows(a, op)
    if a.topk is not None and not 1 <= a.topk <= a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to build a routing map, got {a.topk}")
    if a.drop_and_pad and not 1 <= a.capacity <= a.tokens:
        raise CliError(f"--capacity must be in [1, --tokens={a.tokens}] to build a routing, got {a.capacity}")
    return examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, capacity=a.capacity, dtype=a.dtype,
                                probs_dtype=a.probs_dtype, drop_and_pad=a.drop_and_pad, with_probs=not a.no_probs,
                                routing_map_dtype=a.routing_map_dtype or "bool", seed=a.seed, **extra)


def _map_desc(a) -> TensorDesc:
    return TensorDesc((a.tokens, a.experts), as_dtype(a.routing_map_dtype or "bool"))


def _probs_desc(a) -> TensorDesc:
    return TensorDesc((a.tokens, a.experts), as_dtype(a.probs_dtype or a.dtype))


def _uwrm_descs(a: argparse.Namespace) -> dict:
    m = _routing_rows(a, "moe_token_unpermute_with_routing_map")
    probs = not a.no_probs
    return dict(permuted_tokens=TensorDesc((m, a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((m,), np.int32),
                routing_map=_map_desc(a) if probs else None, probs=_probs_desc(a) if probs else None,
                padded_mode=a.drop_and_pad, restore_shape=(a.tokens, a.hidden))


def _pwrm_descs(a: argparse.Namespace) -> dict:
    m = _routing_rows(a, "moe_token_permute_with_routing_map")
    return dict(tokens=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)), routing_map=_map_desc(a),
                probs=None if a.no_probs else _probs_desc(a),
                num_out_tokens=m if a.num_out_tokens is None else a.num_out_tokens, drop_and_pad=a.drop_and_pad)


def _pwrm_inputs(a: argparse.Namespace) -> dict:
    args = _routing_inputs(pwrm_examples, a, "moe_token_permute_with_routing_map", full_topk=not a.non_topk)
    if a.num_out_tokens is not None:
        args["num_out_tokens"] = a.num_out_tokens
    return args


def _pwrm_grad_descs(a: argparse.Namespace) -> dict:
    m = _routing_rows(a, "moe_token_permute_with_routing_map_grad")
    probs = not a.no_probs
    return dict(permuted_token_output_grad=TensorDesc((m, a.hidden), as_dtype(a.dtype)),
                permuted_probs_output_grad=TensorDesc((m,), as_dtype(a.probs_dtype or a.dtype)) if probs else None,
                sorted_indices=TensorDesc((m,), np.int32), routing_map=_map_desc(a) if probs else None,
                num_experts=a.experts, tokens_num=a.tokens, drop_and_pad=a.drop_and_pad)


def _close_to_golden(outs, want, args) -> bool:
    """Index-add paths (drop-and-pad token gradients and unpermute): the real op adds rows in an order it does
    not fix, so compare within a bound derived from the terms: each output element is a sum of at most
    `terms` values, so it may differ from the golden by terms * eps * the sum of their magnitudes."""
    for o, w in zip(outs, want):
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


def _pad_close_or_exact(outs, want, args) -> bool:
    pad = args.get("padded_mode", args.get("drop_and_pad", False))
    if pad:
        return _close_to_golden(outs, want, args)
    return all(_same_bits(o, w) for o, w in zip(outs, want) if w is not None or o is None)


ROUTING_FLAGS = frozenset({"capacity", "drop_and_pad", "no_probs", "probs_dtype", "routing_map_dtype"})


# --- the index family: top-k indices, permuted rows numbered as MoeTokenPermute (V1) leaves them --------------
def _index_topk(a: argparse.Namespace, op: str) -> int:
    if a.topk is None:
        raise CliError(f"{op} needs --topk")
    if a.topk > a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to route tokens, got {a.topk}")
    return a.topk


def _kept_rows(a: argparse.Namespace, slots: int) -> int:
    """Rows the forward kept: MoeTokenPermute's numOutTokens rule (0 = all, negative = drop from the end)."""
    return effective_num_out_tokens(a.num_out_tokens or 0, slots)


def _slots_per_token(a: argparse.Namespace, op: str) -> int:
    """K of an index-family op with optional probs: 1 without probs (the op's rule), else --topk."""
    return 1 if a.no_probs else _index_topk(a, op)


def _unpermute_descs(a: argparse.Namespace) -> dict:
    k = _slots_per_token(a, "moe_token_unpermute")
    return dict(permuted_tokens=TensorDesc((_kept_rows(a, a.tokens * k), a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32),
                probs=None if a.no_probs else TensorDesc((a.tokens, k), as_dtype(a.probs_dtype or a.dtype)),
                padded_mode=False, restore_shape=None)


def _unpermute_inputs(a: argparse.Namespace) -> dict:
    k = _slots_per_token(a, "moe_token_unpermute")
    return unpermute_examples.make_inputs(a.tokens, a.hidden, a.experts, k, dtype=a.dtype, probs_dtype=a.probs_dtype,
                                          with_probs=not a.no_probs, num_out_tokens=_kept_rows(a, a.tokens * k),
                                          seed=a.seed)


def _permute_grad_descs(a: argparse.Namespace) -> dict:
    k = _index_topk(a, "moe_token_permute_grad")
    return dict(permuted_output_grad=TensorDesc((_kept_rows(a, a.tokens * k), a.hidden), as_dtype(a.dtype)),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32), num_topk=k, padded_mode=False)


def _permute_grad_inputs(a: argparse.Namespace) -> dict:
    k = _index_topk(a, "moe_token_permute_grad")
    return permute_grad_examples.make_inputs(a.tokens, a.hidden, k, experts=a.experts, dtype=a.dtype,
                                             num_out_tokens=_kept_rows(a, a.tokens * k), seed=a.seed)


def _permute_grad_golden(args: dict, tiling) -> tuple:
    g, s, k = args["permuted_output_grad"], args["sorted_indices"], args["num_topk"]
    soc = tiling.soc
    if soc.is_regbase:
        chunk = permute_grad_op.arch35_k_chunk(g.shape[1], k, s.size // k, g.dtype, soc)
        return (permute_grad_golden.golden_950(g, s, k, chunk),)
    return (permute_grad_golden.golden(g, s, k),)


def _unpermute_grad_descs(a: argparse.Namespace) -> dict:
    k = _slots_per_token(a, "moe_token_unpermute_grad")
    dt = as_dtype(a.dtype)
    return dict(permuted_tokens=TensorDesc((a.tokens * k, a.hidden), dt),
                unpermuted_tokens_grad=TensorDesc((a.tokens, a.hidden), dt),
                sorted_indices=TensorDesc((a.tokens * k,), np.int32),
                probs=None if a.no_probs else TensorDesc((a.tokens, k), as_dtype(a.probs_dtype or a.dtype)),
                padded_mode=False)


def _unpermute_grad_inputs(a: argparse.Namespace) -> dict:
    k = _slots_per_token(a, "moe_token_unpermute_grad")
    return unpermute_grad_examples.make_inputs(a.tokens, a.hidden, topk=k, dtype=a.dtype, probs_dtype=a.probs_dtype,
                                               with_probs=not a.no_probs, seed=a.seed)


INDEX_FLAGS = frozenset({"num_out_tokens", "no_probs", "probs_dtype"})

OPS = {
    "moe_token_permute": OpAdapter(
        descs=_permute_descs,
        make_inputs=_permute_inputs,
        tiling=_permute_tiling,
        get_workspace_size=_permute_workspace,
        run=permute_op.run_v2,
        outputs=_permute_outputs,
        golden=_permute_golden,
        flags=frozenset({"indices_dtype", "num_out_tokens", "quant_mode", "mx_scale_rule"}),
    ),
    "moe_token_unpermute_with_routing_map_grad": OpAdapter(
        descs=_uwrm_grad_descs,
        make_inputs=_uwrm_grad_inputs,
        tiling=lambda args, soc: tiling_uwrm_grad(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: uwrm_grad_workspace(*args.values(), None, *outs, soc=soc),
        run=uwrm_grad_run,
        outputs=_uwrm_grad_outputs,
        golden=lambda args, tiling: uwrm_grad_golden.golden(*args.values(),
                                                            hidden_piece=tiling.fields["hidden_size_align"]),
        flags=ROUTING_FLAGS,
    ),
    "moe_token_permute_with_routing_map": OpAdapter(
        descs=_pwrm_descs,
        make_inputs=_pwrm_inputs,
        tiling=lambda args, soc: tiling_pwrm(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: pwrm_op.get_workspace_size(*args.values(), *outs, soc=soc),
        run=pwrm_op.run,
        outputs=lambda args, soc: pwrm_op.allocate_outputs(*args.values()),
        golden=lambda args, tiling: pwrm_golden.permute_with_routing_map_golden(*args.values())[:3],
        flags=ROUTING_FLAGS | {"num_out_tokens", "non_topk"},
    ),
    "moe_token_permute_with_routing_map_grad": OpAdapter(
        descs=_pwrm_grad_descs,
        make_inputs=lambda a: _routing_inputs(pwrm_grad_examples, a, "moe_token_permute_with_routing_map_grad",
                                              full_topk=not a.non_topk),
        tiling=lambda args, soc: tiling_pwrm_grad(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: pwrm_grad_op.get_workspace_size(*args.values(), *outs, soc=soc),
        run=pwrm_grad_op.run,
        outputs=lambda args, soc: pwrm_grad_op.allocate_outputs(
            args["permuted_token_output_grad"], args["permuted_probs_output_grad"], args["num_experts"],
            args["tokens_num"]),
        golden=lambda args, tiling: pwrm_grad_golden.golden(*args.values()),
        flags=ROUTING_FLAGS | {"non_topk"},
        check=_pad_close_or_exact,
    ),
    "moe_token_unpermute_with_routing_map": OpAdapter(
        descs=_uwrm_descs,
        make_inputs=lambda a: _routing_inputs(uwrm_examples, a, "moe_token_unpermute_with_routing_map"),
        tiling=lambda args, soc: tiling_uwrm(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: uwrm_op.get_workspace_size(*args.values(), *outs, soc=soc),
        run=uwrm_op.run,
        outputs=lambda args, soc: uwrm_op.allocate_outputs(*args.values()),
        golden=lambda args, tiling: uwrm_golden.golden(*args.values()),
        flags=ROUTING_FLAGS,
        check=_pad_close_or_exact,
    ),
}
OPS.update({
    "moe_token_unpermute": OpAdapter(
        descs=_unpermute_descs,
        make_inputs=_unpermute_inputs,
        tiling=lambda args, soc: tiling_unpermute(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: unpermute_op.get_workspace_size(*args.values(), *outs, soc=soc),
        run=unpermute_op.run,
        outputs=lambda args, soc: (unpermute_op.allocate_outputs(args["permuted_tokens"], args["sorted_indices"],
                                                                 args["probs"]),),
        golden=lambda args, tiling: (unpermute_golden.golden(args["permuted_tokens"], args["sorted_indices"],
                                                             args["probs"], arch35=tiling.soc.is_regbase),),
        flags=INDEX_FLAGS,
    ),
    "moe_token_permute_grad": OpAdapter(
        descs=_permute_grad_descs,
        make_inputs=_permute_grad_inputs,
        tiling=lambda args, soc: tiling_permute_grad(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: permute_grad_op.get_workspace_size(*args.values(), *outs,
                                                                                      soc=soc),
        run=permute_grad_op.run,
        outputs=lambda args, soc: (permute_grad_op.allocate_outputs(args["permuted_output_grad"],
                                                                    args["sorted_indices"], args["num_topk"]),),
        golden=_permute_grad_golden,
        flags=frozenset({"num_out_tokens"}),
    ),
    "moe_token_unpermute_grad": OpAdapter(
        descs=_unpermute_grad_descs,
        make_inputs=_unpermute_grad_inputs,
        tiling=lambda args, soc: tiling_unpermute_grad(*args.values(), soc=soc),
        get_workspace_size=lambda args, outs, soc: unpermute_grad_op.get_workspace_size(*args.values(), None, *outs,
                                                                                        soc=soc),
        run=unpermute_grad_op.run,
        outputs=lambda args, soc: unpermute_grad_op.allocate_outputs(args["permuted_tokens"],
                                                                     args["unpermuted_tokens_grad"],
                                                                     args["sorted_indices"], args["probs"]),
        golden=lambda args, tiling: unpermute_grad_golden.golden(
            *list(args.values())[:4], hidden_piece=tiling.fields["hidden_size_align"], arch35=tiling.soc.is_regbase),
        flags=frozenset({"no_probs", "probs_dtype"}),
    ),
})
OP_SPECIFIC_FLAGS = frozenset().union(*(o.flags for o in OPS.values()))


def _op(name: str) -> OpAdapter:
    key = name.strip().lower()
    if key not in OPS:
        raise CliError(f"unknown operator {name!r}; available: {', '.join(OPS)}")
    return OPS[key]


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_flags_apply(a: argparse.Namespace, adapter: OpAdapter, soc) -> None:
    """Flags given for another operator, or that the chosen chip would ignore, are errors, not no-ops."""
    stray = sorted(d for d in OP_SPECIFIC_FLAGS - adapter.flags if getattr(a, d, None) not in (None, False))
    if stray:
        own = ", ".join(sorted(_flag(d) for d in adapter.flags))
        raise CliError(f"{', '.join(_flag(d) for d in stray)} does not apply to {a.op} (its own flags: {own})")
    if getattr(a, "no_probs", False) and getattr(a, "probs_dtype", None):
        raise CliError("--probs-dtype and --no-probs exclude each other")
    if getattr(a, "quant_mode", None) not in (None, -1) and not soc.is_regbase:
        raise CliError(f"--quant-mode {a.quant_mode} quantises on ascend950 only; {soc.name} runs V1 and the real op "
                       "ignores quant_mode there: drop the flag or pass --soc ascend950")
    if getattr(a, "mx_scale_rule", None) is not None and _quant_mode(a) not in (2, 3):
        raise CliError("--mx-scale-rule applies to MXFP8 quantisation only (--quant-mode 2 or 3 on ascend950)")


def _soc(a):
    try:
        return get_soc(a.soc, ub_size=a.ub_size, aiv_num=a.cores)
    except ConfigError as e:
        raise CliError(str(e)) from None


# --- running and printing ---------------------------------------------------------------------------
def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"


def _same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def prepare_op(adapter: OpAdapter, args: dict, soc):
    """Tiling, outputs and the aclnn executor of one case (phase one; nothing runs)."""
    tiling_result = adapter.tiling(args, soc)
    outs = adapter.outputs(args, soc)
    size, executor = adapter.get_workspace_size(args, outs, soc)
    return tiling_result, outs, size, executor


def run_op(adapter: OpAdapter, args: dict, soc, *, check: bool = True) -> dict:
    """Tile, run both aclnn phases, compare with the golden; returns the facts the CLI prints."""
    tiling_result, outs, size, executor = prepare_op(adapter, args, soc)
    adapter.run(np.empty(size, dtype=np.uint8), size, executor)
    facts = dict(tiling=tiling_result, report=executor.report, outputs=outs)
    if check:
        want = adapter.golden(args, tiling_result)
        if adapter.check is not None:
            facts["exact"] = adapter.check(outs, want, args)
            facts["within_bound"] = bool(args.get("padded_mode", args.get("drop_and_pad", False)))
        else:      # a None in the golden is an output the op leaves unwritten
            facts["exact"] = all(_same_bits(o, w) for o, w in zip(outs, want) if w is not None or o is None)
    return facts


def _gm_rate(rep) -> str:
    if rep is None or not rep.wall_time_s:
        return "no kernel ran (empty tensors)"
    total = rep.total
    gbs = (total.mte2_bytes + total.mte3_bytes) / rep.wall_time_s / 1e9
    return f"kernel {rep.wall_time_s * 1e3:.1f} ms on {rep.threads} threads = {gbs:.2f} GB/s of GM traffic"


def _print_run(facts, label: str = "") -> None:
    rep, t = facts["report"], facts["tiling"]
    check = {True: "bit-exact vs golden", False: "MISMATCH vs golden", None: "not checked"}[facts.get("exact")]
    if facts.get("exact") and facts.get("within_bound"):
        check = "matches golden within the index-add bound (the real op fixes no add order)"
    print(f"{label}tilingKey {t.tiling_key}, block_dim {t.block_dim}, UB plan {t.ub_plan_bytes} of "
          f"{t.soc.ub_size} B in {len(t.ub_plan)} buffers")
    pipes: dict[str, list[str]] = {}
    for r in t.ub_plan:
        pipes.setdefault(r[6] if len(r) > 6 else "pipe", []).append(f"{r[0]} {r[2]}x{r[1]}")
    for pipe, rows in pipes.items():
        print("    " + (f"[{pipe}] " if len(pipes) > 1 else "") + ", ".join(rows))
    if rep is not None:
        total = rep.total
        print(f"    MTE2 {_fmt_bytes(total.mte2_bytes)}  MTE3 {_fmt_bytes(total.mte3_bytes)}  "
              f"V {total.vec_elem_ops:,} elem-ops  S {total.scalar_gm_reads:,} GM reads  "
              f"events {total.events:,}  SyncAll {total.sync_all // max(rep.block_dim, 1)}")
    for k, step in enumerate(getattr(rep, "steps", ()), 1):
        where = "simulated kernel" if step.kind == "kernel" else "host NumPy"
        key = f", tilingKey {step.run.tiling_key}" if step.run is not None else ""
        print(f"    step {k}: {step.name} [{where}{key}] {step.wall_time_s * 1e3:.2f} ms")
    compiled = f" (+{rep.compile_time_s:.1f} s compile/load, not counted)" if rep and rep.compile_time_s >= 0.5 else ""
    print(f"    {_gm_rate(rep)}{compiled}; {check}")


def _print_per_core(rep) -> None:
    if rep is None:
        return
    print(f"  per core ({rep.block_dim} blocks):")
    print(f"  {'core':>5} {'MTE2 bytes':>14} {'MTE2 instr':>10} {'MTE3 bytes':>14} {'MTE3 instr':>10} "
          f"{'V elem-ops':>13} {'V instr':>9} {'S GM rd':>8} {'events':>8} {'UB hwm':>8}")
    for c in rep.cores:
        print(f"  {c.block_idx:>5} {c.mte2_bytes:>14,} {c.mte2_instr:>10,} {c.mte3_bytes:>14,} {c.mte3_instr:>10,} "
              f"{c.vec_elem_ops:>13,} {c.vec_instr:>9,} {c.scalar_gm_reads:>8,} {c.events:>8,} {c.ub_hwm_bytes:>8,}")


def _soc_json(soc) -> dict:
    return dict(name=soc.name, aiv_num=soc.aiv_num, ub_size=soc.ub_size, ub_size_for_tiling=soc.ub_size_for_tiling,
                npu_arch=soc.npu_arch)


def _tiling_json(op: str, t) -> dict:
    return dict(op=op, soc=_soc_json(t.soc), tiling_key=t.tiling_key, block_dim=t.block_dim,
                workspace_size=t.workspace_size, schedule_mode=t.schedule_mode, fields=dict(t.fields),
                ub_plan=[dict(zip(("name", "bytes", "count", "kind", "position", "depth", "pipe"), row))
                         for row in t.ub_plan],
                ub_plan_bytes=t.ub_plan_bytes, ub_fits=t.ub_fits)


def _core_json(c) -> dict:
    return dataclasses.asdict(c)


def _report_json(rep, per_core: bool) -> dict | None:
    if rep is None:
        return None
    out = dict(kernel=rep.kernel, wall_time_s=rep.wall_time_s, compile_time_s=rep.compile_time_s,
               threads=rep.threads, ub_plan_bytes=rep.ub_plan_bytes, total=_core_json(rep.total))
    out["total"].pop("block_idx")
    if per_core:
        out["cores"] = [_core_json(c) for c in rep.cores]
    return out


class CompileProgress:
    """Prints, on stderr, that a first run is compiling kernel stages and how long each took."""

    def __init__(self):
        self.count = 0
        self.seconds = 0.0

    def __call__(self, event: str, stage: str, seconds: float) -> None:
        if event == "start":
            self.count += 1
            print(f"  compiling kernel stage {stage} ...", end="", file=sys.stderr, flush=True)
        else:
            self.seconds += seconds
            print(f" {seconds:.1f} s", file=sys.stderr, flush=True)


# Cold-compile costs on the 2-core CI machine at -O2, for the first-run estimate only: the first stage of a
# kernel module also compiles the device functions it inlines (about 12 s more), every stage about 4 s (the
# demo's 15 stages from 3 modules: 92 s in one process); two processes finish about 1.5 times sooner.
SECONDS_PER_COLD_MODULE = 12.0
SECONDS_PER_COLD_STAGE = 4.0
TWO_PROCESS_SPEEDUP = 1.5
COMPILE_WORKER_TIMEOUT_S = 900


def cold_stages(executors) -> list:
    """The distinct (stage, signature) pairs of these executors that neither memory nor the disk cache holds."""
    cold, seen = [], set()
    for ex in executors:
        for stage, args in ex.stage_calls():
            sig = stage_signature(stage, args)
            if (stage, sig) not in seen:
                seen.add((stage, sig))
                if cache_state(stage, sig) == "cold":
                    cold.append((stage, args))
    return cold


def _announce_compile(cold: list, processes: int = 1) -> None:
    if cold:
        modules = {stage.py_func.__module__ for stage, _ in cold}
        estimate = (len(modules) * SECONDS_PER_COLD_MODULE + len(cold) * SECONDS_PER_COLD_STAGE) / \
            (TWO_PROCESS_SPEEDUP if processes > 1 else 1.0)
        where = "in two processes" if processes > 1 else "in one process"
        print(f"First run: compiling {len(cold)} kernel stages with numba {where} (about {estimate:.0f} s on a 2-core "
              "machine; cached on disk, so later runs start in seconds). Compile time is not counted as kernel "
              "time.", file=sys.stderr, flush=True)


# --- demo ---------------------------------------------------------------------------------------------
UWRM_GRAD_DEMO = [
    # (label, flags)
    ("key 0   no probs", dict(topk=8)),
    ("key 10  no probs, dropAndPad", dict(capacity=128, drop_and_pad=True)),
    ("key 1   probs", dict(topk=8, with_probs=True)),
    ("key 11  probs, dropAndPad", dict(capacity=128, drop_and_pad=True, with_probs=True)),
    ("key 101 bf16 grads, fp32 probs", dict(topk=8, with_probs=True, probs_dtype="fp32")),
    ("key 111 bf16 grads, fp32 probs, dropAndPad", dict(capacity=128, drop_and_pad=True, with_probs=True,
                                                        probs_dtype="fp32")),
]

PERMUTE_DEMO = [
    # (label, soc (None: the demo's profile), tokens, hidden, topK, numOutTokens, quant_mode)
    ("one-core sort", None, 512, 4096, 8, 0, -1),
    ("multi-core sort (VBS, VMS, SortOut)", None, 2048, 1024, 8, 0, -1),
    ("numOutTokens drops rows", None, 512, 4096, 8, 3000, -1),
    ("split-D rows", None, 16, 65536, 2, 0, -1),
    ("MXFP8 E5M2 (quant_mode 2)", "ascend950", 512, 4096, 8, 0, 2),
    ("MXFP8 E4M3FN (quant_mode 3)", "ascend950", 512, 4096, 8, 0, 3),
    ("MXFP4 E2M1 (quant_mode 9)", "ascend950", 512, 4096, 8, 0, 9),
]


ROUTING_DEMO = [
    # (operator, label, make_inputs keywords); tokens 512, hidden 4096, experts 64, bf16
    ("moe_token_permute_with_routing_map", "non-pad, probs (masked select, sort, copy)", dict(topk=8)),
    ("moe_token_permute_with_routing_map", "non-topK rows (-1 slots: rank, scatter)", dict(topk=8, full_topk=False)),
    ("moe_token_permute_with_routing_map", "key 9 dropAndPad (last-dim sort + GatherV2)",
     dict(capacity=128, drop_and_pad=True)),
    ("moe_token_unpermute_with_routing_map", "key 0 no probs (kernel G)", dict(topk=8, with_probs=False)),
    ("moe_token_unpermute_with_routing_map", "key 1 probs (masked select + kernel G)", dict(topk=8)),
    ("moe_token_unpermute_with_routing_map", "key 1 bf16 tokens, fp32 probs", dict(topk=8, probs_dtype="fp32")),
    ("moe_token_unpermute_with_routing_map", "key 1000 dropAndPad (+ Sort, index add)",
     dict(capacity=128, drop_and_pad=True)),
    ("moe_token_permute_with_routing_map_grad", "key 0 + MaskedScatter of probs grads", dict(topk=8)),
    ("moe_token_permute_with_routing_map_grad", "key 1000 dropAndPad (+ Sort, index add)",
     dict(capacity=128, drop_and_pad=True)),
]
INDEX_DEMO = [
    # (operator, label, make_inputs keywords); tokens 512, hidden 4096, 64 experts, topK 8, bf16
    ("moe_token_unpermute", "key 1 probs (kernel G)", dict()),
    ("moe_token_unpermute", "key 25 bf16 tokens, fp32 probs", dict(probs_dtype="fp32")),
    ("moe_token_unpermute", "key 0 no probs", dict(with_probs=False)),
    ("moe_token_unpermute", "key 1, rows dropped by numOutTokens", dict(num_out_tokens=3000)),
    ("moe_token_permute_grad", "key 0 (kernel G, no probs)", dict()),
    ("moe_token_permute_grad", "key 0, rows dropped by numOutTokens", dict(num_out_tokens=3000)),
    ("moe_token_unpermute_grad", "key 0 no probs (copy)", dict(with_probs=False)),
    ("moe_token_unpermute_grad", "key 1 probs (ReduceSumFunc)", dict()),
    ("moe_token_unpermute_grad", "key 1 bf16 grads, fp32 probs", dict(probs_dtype="fp32")),
]


def _index_demo_args(op: str, tokens: int, hidden: int, experts: int, top_k: int, case: dict, values: bool) -> dict:
    if op == "moe_token_unpermute":
        return unpermute_examples.make_inputs(tokens, hidden, experts, top_k, dtype="bf16", seed=4, values=values,
                                              **case)
    if op == "moe_token_permute_grad":
        return permute_grad_examples.make_inputs(tokens, hidden, top_k, experts=experts, dtype="bf16", seed=4,
                                                 **case)
    return unpermute_grad_examples.make_inputs(tokens, hidden, topk=top_k, dtype="bf16", seed=4, values=values,
                                               **case)


ROUTING_EXAMPLES = {"moe_token_permute_with_routing_map": pwrm_examples,
                    "moe_token_unpermute_with_routing_map": uwrm_examples,
                    "moe_token_permute_with_routing_map_grad": pwrm_grad_examples}


@dataclass(frozen=True)
class DemoCase:
    op: str
    label: str
    soc: object
    args: dict
    shape: str


def demo_cases(soc, ub_size: int | None = None, aiv_num: int | None = None, values: bool = True) -> list[DemoCase]:
    """Every demo case with its inputs (built-in shapes; the chip profile from the flags unless marked, and
    the custom UB size / core count applied to the marked profiles too). values=False: the large float
    tensors stay zero (enough to tile and compile the cases, at no cost)."""
    cases = []
    tokens, hidden, experts = 512, 4096, 64
    for label, case in UWRM_GRAD_DEMO:
        args = uwrm_grad_examples.make_inputs(tokens, hidden, experts, topk=case.get("topk"),
                                              capacity=case.get("capacity"), dtype="bf16",
                                              probs_dtype=case.get("probs_dtype"),
                                              drop_and_pad=case.get("drop_and_pad", False),
                                              with_probs=case.get("with_probs", False), seed=1, values=values)
        cases.append(DemoCase("moe_token_unpermute_with_routing_map_grad", label, soc, args,
                              f"{tokens}x{hidden} E{experts}"))
    for label, where, n, h, top_k, num_out, quant in PERMUTE_DEMO:
        case_soc = soc if where is None else get_soc(where, ub_size=ub_size, aiv_num=aiv_num)
        x, idx = permute_examples.make_inputs(n, h, 64, topk=top_k, seed=2)
        args = dict(tokens=x, indices=idx, num_out_tokens=num_out, padded_mode=False, quant_mode=quant)
        shape = f"{n}x{h} topK {top_k}" + (f" keep {num_out}" if num_out else "") + \
            (f" [{case_soc.name}]" if where else "")
        cases.append(DemoCase("moe_token_permute", label, case_soc, args, shape))
    for op, label, case in ROUTING_DEMO:
        args = ROUTING_EXAMPLES[op].make_inputs(tokens, hidden, experts, dtype="bf16", seed=3, values=values, **case)
        shape = f"{tokens}x{hidden} E{experts} " + (f"cap {case['capacity']}" if "capacity" in case
                                                      else f"topK {case['topk']}")
        cases.append(DemoCase(op, label, soc, args, shape))
    for op, label, case in INDEX_DEMO:
        args = _index_demo_args(op, tokens, hidden, experts, 8, case, values)
        shape = f"{tokens}x{hidden} topK 8" + (f" keep {case['num_out_tokens']}" if "num_out_tokens" in case else "")
        cases.append(DemoCase(op, label, soc, args, shape))
    return cases


def _case_error(e: Exception) -> str:
    if isinstance(e, UBOverflowError):
        return f"UB: plan needs {e.needed_bytes} B of {e.capacity_bytes} B"
    if isinstance(e, AclnnError):
        return f"{type(e).__name__} [{e.status}]: {e.message.splitlines()[0]}"
    if isinstance(e, SimulatorError):
        return f"{type(e).__name__}: {e.summary}"
    return f"{type(e).__name__}: {e}"


def _prepare_case(case: DemoCase):
    return prepare_op(OPS[case.op], case.args, case.soc)


def _prepared_executors(cases: list[DemoCase]) -> dict:
    """{case index: aclnn executor} of the cases whose first phase succeeds (the others fail when run)."""
    executors = {}
    for k, case in enumerate(cases):
        try:
            executors[k] = _prepare_case(case)[3]
        except (AclnnError, SimulatorError):
            continue        # reported when the case runs
    return executors


def _compile_tickets(executors) -> list[list]:
    """The demo's stages as tickets for two compiling processes: one ticket per stage function (all its
    signatures: two processes saving entries of one function into numba's cache index could drop one), the
    operator with the most tickets first, the other operators after it in reverse. One process takes tickets
    from the front, the other from the back, so each starts on its own operator, shares that operator's
    device functions, and only the last tickets are taken from the other end."""
    per_op: dict = {}
    for ex in executors:
        tickets = per_op.setdefault(ex.op, {})
        for stage, args in ex.stage_calls():
            tickets.setdefault(stage, {}).setdefault(stage_signature(stage, args), (stage, args))
    ops_by_size = sorted(per_op, key=lambda op: (-len(per_op[op]), op))
    merged: dict = {}       # a stage shared by several operators (kernel G, the sorts) is one ticket
    for op in ops_by_size:
        for stage, signatures in per_op[op].items():
            merged.setdefault(stage, {}).update(signatures)
    owner = {}
    for op in ops_by_size:
        for stage in per_op[op]:
            owner.setdefault(stage, op)
    ordered = [list(merged[st].values()) for st in merged if owner[st] == ops_by_size[0]]
    rest = [list(merged[st].values()) for st in merged if owner[st] != ops_by_size[0]]
    return ordered + rest[::-1]


def _take_tickets(tickets, bounds, from_front: bool, on_compile=None) -> None:
    """Compile tickets until none is left; `bounds` is a shared [front, back] array with a lock."""
    while True:
        with bounds.get_lock():
            if bounds[0] > bounds[1]:
                return
            k = bounds[0] if from_front else bounds[1]
            bounds[0 if from_front else 1] += 1 if from_front else -1
        ensure_compiled(tickets[k], on_compile)


def _compile_worker(tickets, bounds) -> None:
    try:
        _take_tickets(tickets, bounds, from_front=False)
    except BaseException:       # noqa: BLE001 - the parent compiles whatever is left; never a traceback here
        os._exit(1)


def cmd_demo(a) -> int:
    soc = _soc(a)
    start = time.perf_counter()
    # shapes first: what to compile is known before the large inputs are drawn, so a cold run's second
    # compiling process starts at once
    shapes = list(_prepared_executors(demo_cases(soc, a.ub_size, a.cores, values=False)).values())
    cold = cold_stages(shapes)
    worker = _start_compile_worker(shapes) if len(cold) > 2 and _usable_cpus() > 1 else None
    _announce_compile(cold, 2 if worker else 1)
    cases = demo_cases(soc, a.ub_size, a.cores)
    executors = _prepared_executors(cases)
    progress = CompileProgress()
    if worker is not None:
        tickets, bounds, process = worker
        with listening_to_compiles(progress):
            _take_tickets(tickets, bounds, True, progress)
    results: dict = {}
    deferred = []
    with listening_to_compiles(progress):
        for k, case in enumerate(cases):
            if worker is not None and worker[2].is_alive() and not _compiled_here(executors.get(k)):
                deferred.append(k)      # its stages are still being compiled by the other process
                continue
            results[k] = _run_demo_case(case, soc, results)
        if worker is not None:
            worker[2].join(timeout=COMPILE_WORKER_TIMEOUT_S)
            if worker[2].is_alive():    # never seen; its stages then compile here, on first use
                worker[2].terminate()
        for k in deferred:
            results[k] = _run_demo_case(cases[k], soc, results)
    results = [results[k] for k in range(len(cases))]
    _print_demo_table(results)
    ok = all(r[1] for r in results)
    passed = sum(1 for r in results if r[1])
    print(f"{'all cases match their goldens' if ok else f'{passed} of {len(results)} cases passed'} in "
          f"{time.perf_counter() - start:.1f} s" + (f" ({progress.seconds:.1f} s of it compiling)"
                                                     if progress.count else ""))
    return 0 if ok else 1


def _run_demo_case(case: DemoCase, soc, done: dict):
    if not any(r[0].op == case.op for r in done.values()):
        print(f"{chr(10) if done else ''}{_demo_title(case, soc)}")
    try:
        facts = run_op(OPS[case.op], case.args, case.soc)
        _print_run(facts, f"  {case.label:<44} {case.shape:<26} ")
        status = ("within the index-add bound" if facts.get("within_bound") else "bit-exact") if facts["exact"] \
            else "MISMATCH vs golden"
        return case, facts["exact"], status, facts["tiling"].tiling_key
    except (AclnnError, SimulatorError) as e:
        print(f"  {case.label:<44} {case.shape:<26} FAILED: {_case_error(e)}")
        return case, False, _case_error(e), None


def _compiled_here(executor) -> bool:
    """Whether every stage of this executor is compiled in this process already."""
    return executor is not None and all(stage_signature(s, a) in s.overloads for s, a in executor.stage_calls())


def _start_compile_worker(executors):
    """A forked process that compiles tickets from the back while this one compiles from the front (cold cache,
    more than one CPU); numba's disk cache hands its stages to this process. None where fork is unavailable."""
    import multiprocessing
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return None
    tickets = _compile_tickets(executors)
    bounds = ctx.Array("i", [0, len(tickets) - 1])
    process = ctx.Process(target=_compile_worker, args=(tickets, bounds), daemon=True)
    process.start()
    return tickets, bounds, process


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not on every platform
        return os.cpu_count() or 1


def _demo_title(case: DemoCase, soc) -> str:
    if case.op == "moe_token_permute":
        return f"MoeTokenPermute (V2): experts 64, bf16 tokens, int32 ids; on {soc.name} unless marked"
    if case.op in ROUTING_EXAMPLES:
        name = "".join(w.capitalize() for w in case.op.split("_"))
        return f"{name} on {soc.name}: bf16, tokens x hidden, E experts (a composite aclnn: kernels + host l0 steps)"
    return (f"MoeTokenUnpermuteWithRoutingMapGrad on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B): bf16, "
            "tokens x hidden, E experts")


def _print_demo_table(results) -> None:
    print()
    print(f"{'operator':<42} {'case':<44} {'key':>4}  result")
    for case, ok, status, key in results:
        print(f"{case.op:<42} {case.label:<44} {'-' if key is None else key:>4}  {'PASS' if ok else 'FAIL'}  "
              f"{status}")


# --- tiling and run -------------------------------------------------------------------------------------
def cmd_moe_layer(a) -> int:
    """A whole MoE layer, forward and backward, per style; exit 0 only when every style passes its checks."""
    from .moe_layer import STYLES, check_arguments, moe_layer
    soc = _soc(a)
    styles = STYLES if a.style == "all" else (a.style,)
    for style in styles:
        try:
            check_arguments(style, a.dtype, a.tokens, a.hidden, a.experts, a.topk, a.capacity)
        except ValueError as e:
            raise CliError(f"{e} (flags --tokens --hidden --experts --topk --capacity)") from None
    results = []
    for style in styles:
        try:
            with listening_to_compiles(CompileProgress()):    # a first run compiles kernels: say so as it goes
                r = moe_layer(style, tokens=a.tokens, hidden=a.hidden, experts=a.experts, topk=a.topk,
                              capacity=a.capacity, dtype=a.dtype, soc=soc, seed=a.seed,
                              finite_differences=not a.no_fd)
        except (AclnnError, SimulatorError) as e:
            print(f"MoE layer, style {style}: {type(e).__name__}: {str(e).splitlines()[0]}")
            results.append(False)
            continue
        print(r)
        print()
        results.append(r.passed)
    print(f"{sum(results)} of {len(results)} styles passed on {soc.name}")
    return 0 if all(results) else 1


def cmd_tiling(a) -> int:
    adapter = _op(a.op)
    soc = _soc(a)
    _check_flags_apply(a, adapter, soc)
    result = adapter.tiling(adapter.descs(a), soc)
    if a.json:
        print(json.dumps(_tiling_json(a.op, result), indent=2))
    else:
        print(f"{a.op} on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B, tiling sees {soc.ub_size_for_tiling} B)")
        print(result)
    if not result.ub_fits:
        print(f"ascend-sim: the UB plan needs {result.ub_plan_bytes} bytes but {soc.name} has {soc.ub_size}: the kernel "
              "would fail in TPipe::InitBuffer (UBOverflowError)", file=sys.stderr)
        return 1
    return 0


def cmd_run(a) -> int:
    adapter = _op(a.op)
    soc = _soc(a)
    _check_flags_apply(a, adapter, soc)
    args = adapter.make_inputs(a)
    _, _, _, executor = prepare_op(adapter, args, soc)
    cold = cold_stages([executor])
    if not a.json:
        _announce_compile(cold)
    with listening_to_compiles(CompileProgress() if not a.json else None):
        facts = run_op(adapter, args, soc, check=not a.no_check)
    if a.json:
        print(json.dumps(dict(tiling=_tiling_json(a.op, facts["tiling"]),
                              report=_report_json(facts["report"], a.per_core), exact=facts.get("exact")), indent=2))
    else:
        print(f"{a.op} on {soc.name}")
        _print_run(facts, "  ")
        if a.per_core:
            _print_per_core(facts["report"])
    return 0 if facts.get("exact", True) else 1


# --- parser -----------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliError(f"{message} (see `{self.prog} --help`)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


SOC_HELP = "chip profile: ascend910b (default), ascend910_93, ascend950 (or 910b, 910_93, 950)"


def _add_chip_flags(p) -> None:
    p.add_argument("--soc", default="ascend910b", help=SOC_HELP)
    p.add_argument("--ub-size", type=_positive, metavar="BYTES",
                   help="custom profile: UB bytes per vector core (288 .. 16777216; stock 196608 / 253952)")
    p.add_argument("--cores", type=_positive, metavar="N",
                   help="custom profile: vector cores, the largest block dim (1 .. 4096; stock 48 / 64)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ascend-sim", description="CPU simulator of CANN's MoE token permute/unpermute kernels. "
                     "Environment: ASCEND_SIM_THREADS = worker threads for the simulated cores (default: CPU count).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="{demo,tiling,run,profile,limits,moe-layer}")
    demo = sub.add_parser("demo", help="run every mode of every operator on built-in MoE shapes and check them")
    _add_chip_flags(demo)
    ops_list = ", ".join(OPS)
    for name, helptext in (("tiling", "print the tiling and UB plan (no run); exit 1 if the plan does not fit"),
                           ("run", "run one case, check it against the golden, report the per-pipe work"),
                           ("profile", "run one case and estimate its chip time per pipe; write a Perfetto trace, "
                                       "msprof's PipeUtilization.csv, a what-if against the stock chip"),
                           ("limits", "find, from tilings only, where each tiling key stops fitting the UB or the tiling "
                                      "fails as one shape dimension grows, per chip profile")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("op", metavar="OP", help=f"operator: {ops_list}")
        shape_needed = name != "limits"
        p.add_argument("--tokens", type=_positive, required=shape_needed, help="tokens N (rows of the token tensor)")
        p.add_argument("--hidden", type=_positive, required=shape_needed, help="hidden size H")
        p.add_argument("--experts", type=_positive, required=shape_needed, help="experts E")
        group = p.add_mutually_exclusive_group()
        group.add_argument("--topk", type=_positive, help="experts per token (every op without --drop-and-pad)")
        group.add_argument("--capacity", type=_positive,
                           help="routing-map ops with --drop-and-pad: slots per expert")
        p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32", "int8"),
                       help="token / gradient dtype: bf16 (default), fp16, fp32; int8 for moe_token_permute only")
        p.add_argument("--probs-dtype", choices=("bf16", "fp16", "fp32"),
                       help="routing-map ops: probs dtype bf16, fp16 or fp32 (default: --dtype; fp32 probs with "
                            "bf16 tokens / gradients is the mixed-precision path)")
        p.add_argument("--routing-map-dtype", choices=("bool", "int8"),
                       help="routing-map ops: routing map dtype bool (default) or int8")
        p.add_argument("--drop-and-pad", action="store_true",
                       help="routing-map ops: drop-and-pad layout (needs --capacity)")
        p.add_argument("--no-probs", action="store_true",
                       help="routing-map ops: without probs")
        p.add_argument("--non-topk", action="store_true",
                       help="routing-map permute and its grad: rows route to 1..topK experts ([M26] -1 slots)")
        p.add_argument("--indices-dtype", choices=("int32", "int64"),
                       help="moe_token_permute: expert-id dtype int32 (default) or int64")
        p.add_argument("--num-out-tokens", type=_integer, metavar="M",
                       help="moe_token_permute: rows kept (0 = all, default; negative counts from the end); "
                            "moe_token_permute_with_routing_map: numOutTokens (default: every routed slot)")
        p.add_argument("--quant-mode", type=_integer, choices=(-1, 2, 3, 9),
                       help="moe_token_permute on ascend950: -1 none (default), 2 MXFP8 E5M2, 3 MXFP8 E4M3FN, "
                            "9 MXFP4 E2M1")
        p.add_argument("--mx-scale-rule", choices=("floor", "round_scale"),
                       help="moe_token_permute with --quant-mode 2/3: MXFP8 scale rule, OCP floor (default) or the "
                            "master-branch kernel's round_scale")
        _add_chip_flags(p)
        p.add_argument("--seed", type=_integer, default=0, help="random seed of the generated inputs (default 0)")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        if name == "run":
            p.add_argument("--no-check", action="store_true", help="skip the golden comparison")
            p.add_argument("--per-core", action="store_true", help="also show every core's counters")
        if name == "profile":
            from .cli_profile import add_profile_flags
            add_profile_flags(p)
        if name == "limits":
            from .cli_limits import add_limits_flags
            add_limits_flags(p)
    layer = sub.add_parser("moe-layer", help="a whole MoE layer forward and backward through the simulated "
                           "operators, checked against NumPy and finite differences")
    layer.add_argument("--style", default="all", choices=("all", "topk", "routing_map", "routing_map_pad"),
                       help="token movement: topk (MoeTokenPermute indices), routing_map, routing_map_pad (drop-and-pad); "
                            "all (default) runs the three")
    layer.add_argument("--tokens", type=_positive, default=64, help="tokens N (default 64)")
    layer.add_argument("--hidden", type=_positive, default=64, help="hidden size H (default 64)")
    layer.add_argument("--experts", type=_positive, default=8, help="experts E (default 8)")
    layer.add_argument("--topk", type=_positive, default=2, help="experts per token K (default 2)")
    layer.add_argument("--capacity", type=_positive,
                       help="routing_map_pad: rows per expert (default ceil(N*K/E), so tokens are dropped and padded)")
    layer.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"),
                       help="dtype of the tensors the operators move: fp32 (default), fp16, bf16 (router and experts stay "
                            "fp32)")
    layer.add_argument("--seed", type=_integer, default=0, help="random seed (default 0)")
    layer.add_argument("--no-fd", action="store_true", help="skip the finite-difference gradient checks")
    _add_chip_flags(layer)
    return parser


def main(argv=None) -> int:
    try:
        a = build_parser().parse_args(argv)
        if a.command == "profile":
            from .cli_profile import cmd_profile
            return cmd_profile(a)
        if a.command == "limits":
            from .cli_limits import cmd_limits
            return cmd_limits(a)
        return {"demo": cmd_demo, "tiling": cmd_tiling, "run": cmd_run, "moe-layer": cmd_moe_layer}[a.command](a)
    except CliError as e:
        print(f"ascend-sim: error: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"ascend-sim: error: {e}", file=sys.stderr)
        return 2
    except AclnnError as e:
        print(f"ascend-sim: {type(e).__name__} {e}".splitlines()[0], file=sys.stderr)
        return 1
    except SimulatorError as e:
        if e.detail:        # the allocation table and what to change: on stdout, so stderr stays one line
            print(e.detail)
        print(f"ascend-sim: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except BrokenPipeError:     # the reader (e.g. `| head`) went away: nothing left to say
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's exit flush quiet
        return 0
    except KeyboardInterrupt:
        print("ascend-sim: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI promises one line, never a traceback
        print(f"ascend-sim: internal error ({type(e).__name__}): {str(e).splitlines()[0] if str(e) else ''} "
              "- please report it with the command line", file=sys.stderr)
        return 3


if __name__ == "__main__":
    # through the package module, so that `python -m ops.cli` and the console script share one CliError
    from ops.cli import main as package_main
    sys.exit(package_main())
