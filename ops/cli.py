"""ascend-sim command line: `demo`, `tiling OP ...`, `run OP ...`.

    ascend-sim demo [--soc ascend910b]
    ascend-sim run moe_token_permute --tokens 4096 --hidden 7168 --experts 256 --topk 8 --soc ascend950 --quant-mode 3
    ascend-sim tiling moe_token_unpermute_with_routing_map_grad --tokens 4096 --hidden 7168 --experts 256 --topk 8
    ascend-sim run moe_token_unpermute_with_routing_map_grad --tokens 512 --hidden 4096 --experts 64 --capacity 64 \
        --drop-and-pad --probs-dtype fp32

Errors print one line (the aclnn status for operator errors) and exit non-zero, without a traceback.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

import ops
from ascend_sim import SimulatorError
from tiling import get_soc
from tiling import moe_token_permute as tiling_permute
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad
from tiling.common import TensorDesc, as_dtype

from . import permute as permute_op
from .permute import examples as permute_examples
from .permute import golden as permute_golden
from .unpermute_with_routing_map_grad import examples as uwrm_grad_examples
from .unpermute_with_routing_map_grad import golden as uwrm_grad_golden
from .unpermute_with_routing_map_grad import get_workspace_size as uwrm_grad_workspace
from .unpermute_with_routing_map_grad import run as uwrm_grad_run


class CliError(Exception):
    """A bad flag or value: printed as one line, exit status 2."""


@dataclass(frozen=True)
class OpAdapter:
    """How the CLI builds inputs, tiles, runs and checks one operator."""
    descs: Callable[[argparse.Namespace], dict]
    make_inputs: Callable[[argparse.Namespace], dict]
    tiling: Callable[..., object]
    get_workspace_size: Callable[..., tuple]
    run: Callable[..., None]
    outputs: Callable[[dict], tuple]
    golden: Callable[[dict, object], tuple]


def _uwrm_grad_rows(a: argparse.Namespace) -> int:
    if a.drop_and_pad and a.capacity is None:
        raise CliError("--drop-and-pad needs --capacity")
    if not a.drop_and_pad and a.topk is None:
        raise CliError("without --drop-and-pad, --topk is required")
    return a.experts * a.capacity if a.drop_and_pad else a.tokens * a.topk


def _uwrm_grad_descs(a: argparse.Namespace) -> dict:
    """Tensor descriptions in aclnn order, straight from the flags (any shape, no data)."""
    m = _uwrm_grad_rows(a)
    probs = not a.no_probs
    d = dict(unpermuted_tokens_grad=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)),
             out_index=TensorDesc((m,), np.int32), permute_token_id=TensorDesc((m,), np.int32),
             routing_map=TensorDesc((a.tokens, a.experts), as_dtype(a.routing_map_dtype)) if probs else None,
             permuted_tokens=TensorDesc((m, a.hidden), as_dtype(a.dtype)) if probs else None,
             probs=TensorDesc((a.tokens, a.experts), as_dtype(a.probs_dtype or a.dtype)) if probs else None,
             drop_and_pad=a.drop_and_pad)
    return d


def _uwrm_grad_inputs(a: argparse.Namespace) -> dict:
    pad = a.drop_and_pad
    _uwrm_grad_rows(a)
    if a.topk is not None and not 1 <= a.topk <= a.experts:
        raise CliError(f"--topk must be in [1, --experts={a.experts}] to build a routing map, got {a.topk}")
    if pad and not 1 <= a.capacity <= a.tokens:
        raise CliError(f"--capacity must be in [1, --tokens={a.tokens}] to build a routing, got {a.capacity}")
    return uwrm_grad_examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, capacity=a.capacity,
                                          dtype=a.dtype, probs_dtype=a.probs_dtype, drop_and_pad=pad,
                                          with_probs=not a.no_probs, routing_map_dtype=a.routing_map_dtype,
                                          seed=a.seed)


def _uwrm_grad_outputs(args: dict, soc) -> tuple:
    g = args["unpermuted_tokens_grad"]
    out = np.zeros((args["out_index"].size, g.shape[1]), dtype=g.dtype)
    probs = args["probs"]
    return out, (None if probs is None else np.zeros(probs.shape, dtype=probs.dtype))


def _permute_check(a: argparse.Namespace) -> None:
    if a.drop_and_pad or a.capacity is not None:
        raise CliError("moe_token_permute has no drop-and-pad mode (--drop-and-pad / --capacity)")
    if a.topk is None:
        raise CliError("moe_token_permute needs --topk")


def _permute_descs(a: argparse.Namespace) -> dict:
    _permute_check(a)
    return dict(tokens=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)),
                indices=TensorDesc((a.tokens, a.topk), as_dtype(a.indices_dtype)),
                num_out_tokens=a.num_out_tokens, padded_mode=False, quant_mode=a.quant_mode)


def _permute_inputs(a: argparse.Namespace) -> dict:
    _permute_check(a)
    tokens, indices = permute_examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, dtype=a.dtype,
                                                   indices_dtype=a.indices_dtype, seed=a.seed)
    return dict(tokens=tokens, indices=indices, num_out_tokens=a.num_out_tokens, padded_mode=False,
                quant_mode=a.quant_mode, mx_scale_rule=a.mx_scale_rule)


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


OPS = {
    "moe_token_permute": OpAdapter(
        descs=_permute_descs,
        make_inputs=_permute_inputs,
        tiling=_permute_tiling,
        get_workspace_size=_permute_workspace,
        run=permute_op.run,
        outputs=_permute_outputs,
        golden=_permute_golden,
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
    ),
}


def _op(name: str) -> OpAdapter:
    key = name.strip().lower()
    if key not in OPS:
        raise CliError(f"unknown operator {name!r}; available: {', '.join(OPS)}")
    return OPS[key]


def _soc(a):
    try:
        return get_soc(a.soc, ub_size=a.ub_size, aiv_num=a.cores)
    except ValueError as e:
        raise CliError(str(e)) from None


def _check_dtypes(a):
    for flag in ("dtype", "probs_dtype", "routing_map_dtype", "indices_dtype"):
        value = getattr(a, flag)
        if value is None:
            continue
        try:
            as_dtype(value)
        except TypeError:
            raise CliError(f"--{flag.replace('_', '-')}: unknown dtype {value!r} (try bf16, fp16, fp32, bool, int8)") \
                from None


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def _same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def run_op(adapter: OpAdapter, args: dict, soc, *, check: bool = True) -> dict:
    """Tile, run both aclnn phases, compare with the golden; returns the facts the CLI prints."""
    tiling_result = adapter.tiling(args, soc)
    outs = adapter.outputs(args, soc)
    size, executor = adapter.get_workspace_size(args, outs, soc)
    start = time.perf_counter()
    adapter.run(np.empty(size, dtype=np.uint8), size, executor)
    wall = time.perf_counter() - start
    facts = dict(tiling=tiling_result, report=executor.report, wall=wall, outputs=outs)
    if check:
        want = adapter.golden(args, tiling_result)
        facts["exact"] = all(_same_bits(o, w) for o, w in zip(outs, want))
    return facts


def _print_run(facts, label: str = "") -> None:
    rep, t = facts["report"], facts["tiling"]
    total = rep.total
    gbs = (total.mte2_bytes + total.mte3_bytes) / rep.wall_time_s / 1e9 if rep.wall_time_s else 0.0
    check = {True: "bit-exact vs golden", False: "MISMATCH vs golden", None: "not checked"}[facts.get("exact")]
    print(f"{label}tilingKey {t.tiling_key}, block_dim {t.block_dim}, UB plan {t.ub_plan_bytes} of "
          f"{t.soc.ub_size} B in {len(t.ub_plan)} buffers")
    pipes: dict[str, list[str]] = {}
    for r in t.ub_plan:
        pipes.setdefault(r[6] if len(r) > 6 else "pipe", []).append(f"{r[0]} {r[2]}x{r[1]}")
    for pipe, rows in pipes.items():
        print("    " + (f"[{pipe}] " if len(pipes) > 1 else "") + ", ".join(rows))
    print(f"    MTE2 {_fmt_bytes(total.mte2_bytes)}  MTE3 {_fmt_bytes(total.mte3_bytes)}  "
          f"V {total.vec_elem_ops:,} elem-ops  S {total.scalar_gm_reads:,} GM reads  "
          f"events {total.events:,}")
    print(f"    kernel {rep.wall_time_s * 1e3:.1f} ms on {rep.threads} threads = {gbs:.2f} GB/s of GM traffic; {check}")


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


def _demo_uwrm_grad(soc) -> bool:
    tokens, hidden, experts = 512, 4096, 64
    print(f"MoeTokenUnpermuteWithRoutingMapGrad on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B): "
          f"tokens {tokens}, hidden {hidden}, experts {experts}, bf16")
    adapter = OPS["moe_token_unpermute_with_routing_map_grad"]
    ok = True
    for label, case in UWRM_GRAD_DEMO:
        args = uwrm_grad_examples.make_inputs(tokens, hidden, experts, topk=case.get("topk"),
                                              capacity=case.get("capacity"), dtype="bf16",
                                              probs_dtype=case.get("probs_dtype"),
                                              drop_and_pad=case.get("drop_and_pad", False),
                                              with_probs=case.get("with_probs", False), seed=1)
        facts = run_op(adapter, args, soc)
        ok &= facts["exact"]
        _print_run(facts, f"  {label:<44} ")
    return ok


def _demo_permute(soc) -> bool:
    print(f"MoeTokenPermute (V2): experts 64, bf16 tokens, int32 ids; on {soc.name} unless marked")
    adapter = OPS["moe_token_permute"]
    ok = True
    for label, where, tokens, hidden, top_k, num_out, quant in PERMUTE_DEMO:
        case_soc = get_soc(where) if where else soc
        x, idx = permute_examples.make_inputs(tokens, hidden, 64, topk=top_k, seed=2)
        args = dict(tokens=x, indices=idx, num_out_tokens=num_out, padded_mode=False, quant_mode=quant)
        facts = run_op(adapter, args, case_soc)
        ok &= facts["exact"]
        shape = f"{tokens}x{hidden} topK {top_k}" + (f" keep {num_out}" if num_out else "") + \
            (f" [{case_soc.name}]" if where else "")
        _print_run(facts, f"  {label:<37} {shape:<33} ")
    return ok


def cmd_demo(a) -> int:
    soc = _soc(a)
    start = time.perf_counter()
    ok = _demo_uwrm_grad(soc)
    print()
    ok &= _demo_permute(soc)
    print(f"{'all cases bit-exact' if ok else 'MISMATCH'} in {time.perf_counter() - start:.1f} s")
    return 0 if ok else 1


def cmd_tiling(a) -> int:
    adapter = _op(a.op)
    soc = _soc(a)
    _check_dtypes(a)
    result = adapter.tiling(adapter.descs(a), soc)
    print(f"{a.op} on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B, tiling sees {soc.ub_size_for_tiling} B)")
    print(result)
    return 0


def cmd_run(a) -> int:
    adapter = _op(a.op)
    soc = _soc(a)
    _check_dtypes(a)
    args = adapter.make_inputs(a)
    facts = run_op(adapter, args, soc, check=not a.no_check)
    print(f"{a.op} on {soc.name}")
    _print_run(facts, "  ")
    print(facts["report"])
    return 0 if facts.get("exact", True) else 1


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliError(f"{message} (see `{self.prog} --help`)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ascend-sim", description="CPU simulator of CANN's MoE token permute/unpermute kernels")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = sub.add_parser("demo", help="run every mode of the op on built-in MoE shapes and check them")
    demo.add_argument("--soc", default="ascend910b")
    demo.add_argument("--ub-size", type=_positive)
    demo.add_argument("--cores", type=_positive)
    for name, helptext in (("tiling", "print the tiling (no run)"), ("run", "run, check against the golden, report")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("op", help=f"operator: {', '.join(OPS)}")
        p.add_argument("--tokens", type=_positive, required=True)
        p.add_argument("--hidden", type=_positive, required=True)
        p.add_argument("--experts", type=_positive, required=True)
        group = p.add_mutually_exclusive_group()
        group.add_argument("--topk", type=_positive)
        group.add_argument("--capacity", type=_positive)
        p.add_argument("--dtype", default="bf16")
        p.add_argument("--probs-dtype")
        p.add_argument("--routing-map-dtype", default="bool")
        p.add_argument("--drop-and-pad", action="store_true")
        p.add_argument("--no-probs", action="store_true")
        p.add_argument("--soc", default="ascend910b")
        p.add_argument("--ub-size", type=_positive, help="override the profile's UB bytes per core")
        p.add_argument("--cores", type=_positive, help="override the profile's vector-core count")
        p.add_argument("--indices-dtype", default="int32", help="moe_token_permute: int32 or int64 expert ids")
        p.add_argument("--num-out-tokens", type=int, default=0,
                       help="moe_token_permute: rows kept (0 all, negative counts from the end)")
        p.add_argument("--quant-mode", type=int, default=-1,
                       help="moe_token_permute on ascend950: 2 MXFP8 E5M2, 3 MXFP8 E4M3FN, 9 MXFP4 E2M1")
        p.add_argument("--mx-scale-rule", choices=("floor", "round_scale"), default="floor",
                       help="MXFP8 scale rule: OCP floor (default) or the master-branch kernel's round scale")
        p.add_argument("--seed", type=int, default=0)
        if name == "run":
            p.add_argument("--no-check", action="store_true", help="skip the golden comparison")
    return parser


def main(argv=None) -> int:
    try:
        a = build_parser().parse_args(argv)
        return {"demo": cmd_demo, "tiling": cmd_tiling, "run": cmd_run}[a.command](a)
    except CliError as e:
        print(f"ascend-sim: error: {e}", file=sys.stderr)
        return 2
    except ops.AclnnError as e:
        print(f"ascend-sim: {type(e).__name__} {e}", file=sys.stderr)
        return 1
    except SimulatorError as e:
        print(f"ascend-sim: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
        detail = getattr(e, "detail", "")
        if detail:
            print(detail, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
