"""What the commands share: flag types and the shared flags, flag rules, the two aclnn phases of a case,
printing, JSON, and the first-run compile messages."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

import numpy as np

from ascend_sim import ConfigError, cache_state, stage_signature
from tiling import get_soc
from tiling.common import TensorDesc
from tiling.reference import reference

from .._framework import launches_of
from ..common.cli_spec import CliError, OpSpec, same_bits
from ..common.routing import parse_routing
from .operators import OP_SPECIFIC_FLAGS, OPS


# --- flags ------------------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliError(f"{message} (see `{self.prog} --help`)")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def output_file(text: str) -> str:
    """A file the command will write: refused at parse time (before any run) when it cannot be written, so a
    long run does not end in an error."""
    path = os.path.abspath(text) if text else ""
    parent = os.path.dirname(path)
    if not text or os.path.isdir(path):
        reason = "it is a directory" if text else "no file name"
    elif not os.path.isdir(parent):
        reason = f"no directory {parent}"
    elif not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        reason = "permission denied"
    else:
        return text
    raise argparse.ArgumentTypeError(f"cannot write {text} ({reason})")


SOC_HELP = "chip profile: ascend910b (default), ascend910_93, ascend950 (or 910b, 910_93, 950)"


def add_chip_flags(p) -> None:
    p.add_argument("--soc", default="ascend910b", help=SOC_HELP)
    p.add_argument("--ub-size", type=positive, metavar="BYTES",
                   help="custom profile: UB bytes per vector core (288 .. 16777216; stock 196608 / 253952)")
    p.add_argument("--cores", type=positive, metavar="N",
                   help="custom profile: vector cores, the largest block dim (1 .. 4096; stock 48 / 64)")


def routing_arg(text: str) -> float | None:
    """--routing: 'uniform' -> None, 'zipf:S' -> S (ops.common.routing)."""
    try:
        return parse_routing(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_routing_flag(p) -> None:
    p.add_argument("--routing", type=routing_arg, default=None, metavar="uniform|zipf:S",
                   help="how tokens go to experts: uniform (default) or zipf:S, expert popularity following a Zipf "
                        "law of exponent S >= 0 (e.g. zipf:1.2; topK stays distinct, drawn from --seed)")


def add_case_parser(sub, name: str, helptext: str, *, shape_needed: bool = True):
    """The parser of a command that takes one operator case (OP and its shape, dtype and mode flags)."""
    p = sub.add_parser(name, help=helptext)
    p.add_argument("op", metavar="OP", help=f"operator: {', '.join(OPS)}")
    p.add_argument("--tokens", type=positive, required=shape_needed, help="tokens N (rows of the token tensor)")
    p.add_argument("--hidden", type=positive, required=shape_needed, help="hidden size H")
    p.add_argument("--experts", type=positive, required=shape_needed, help="experts E")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--topk", type=positive, help="experts per token (every op without --drop-and-pad)")
    group.add_argument("--capacity", type=positive,
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
                   help="routing-map permute and its grad: rows route to 1..topK experts (-1 slots, as master allows)")
    p.add_argument("--indices-dtype", choices=("int32", "int64"),
                   help="moe_token_permute: expert-id dtype int32 (default) or int64")
    p.add_argument("--num-out-tokens", type=integer, metavar="M",
                   help="moe_token_permute: rows kept (0 = all, default; negative counts from the end); "
                        "moe_token_permute_with_routing_map: numOutTokens (default: every routed slot)")
    p.add_argument("--quant-mode", type=integer, choices=(-1, 2, 3, 9),
                   help="moe_token_permute on ascend950: -1 none (default), 2 MXFP8 E5M2, 3 MXFP8 E4M3FN, "
                        "9 MXFP4 E2M1")
    p.add_argument("--mx-scale-rule", choices=("floor", "round_scale"),
                   help="moe_token_permute with --quant-mode 2/3: MXFP8 scale rule, the MoeInitRoutingV3 kernel's "
                        "round_scale (default, as at master) or the OCP v1.0 floor (not what master does)")
    add_chip_flags(p)
    p.add_argument("--seed", type=integer, default=0, help="random seed of the generated inputs (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_flags_apply(a: argparse.Namespace, spec: OpSpec, soc) -> None:
    """Flags given for another operator, or that the chosen chip would ignore, are errors, not no-ops."""
    stray = sorted(d for d in OP_SPECIFIC_FLAGS - spec.flags if getattr(a, d, None) not in (None, False))
    if stray:
        own = ", ".join(sorted(_flag(d) for d in spec.flags))
        raise CliError(f"{', '.join(_flag(d) for d in stray)} does not apply to {a.op} (its own flags: {own})")
    if getattr(a, "no_probs", False) and getattr(a, "probs_dtype", None):
        raise CliError("--probs-dtype and --no-probs exclude each other")
    if spec.check_flags is not None:
        spec.check_flags(a, soc)


SHAPE_FLAGS = ("tokens", "hidden", "experts", "topk", "capacity", "num_out_tokens")


def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_fits_memory(needed: int, a: argparse.Namespace, flags=SHAPE_FLAGS) -> None:
    """A case that needs more bytes than this machine has is a flag error, before anything is allocated."""
    memory = machine_memory_bytes()
    if memory is not None and needed > memory:
        given = " ".join(f"{_flag(d)} {getattr(a, d)}" for d in flags if getattr(a, d, None) is not None)
        raise CliError(f"{given}: the case's tensors need at least {needed:,} bytes, more than the {memory:,} bytes "
                       "of memory of this machine; make the shape smaller")


def check_inputs_fit_memory(a: argparse.Namespace, spec: OpSpec) -> None:
    """The operator's input tensors (from its descs: shapes and dtypes, nothing allocated) must fit this
    machine's memory; the outputs come on top, so this is the least the case allocates."""
    needed = sum(math.prod(d.shape) * d.dtype.itemsize for d in spec.descs(a).values() if isinstance(d, TensorDesc))
    check_fits_memory(needed, a)


def soc_of(a):
    """The chip profile of --soc / --ub-size / --cores."""
    try:
        return get_soc(a.soc, ub_size=a.ub_size, aiv_num=a.cores)
    except ConfigError as e:
        raise CliError(str(e)) from None


# --- the two aclnn phases of a case ----------------------------------------------------------------------
def prepare_op(spec: OpSpec, args: dict, soc):
    """Tiling, outputs and the aclnn executor of one case (phase one; nothing runs). The aclnn call comes first:
    its argument checks (the operator's status, e.g. 161002 for a dtype it refuses) precede its tiling, as on
    the real op, so a case the operator refuses is reported as the operator refuses it."""
    outs = spec.outputs(args, soc)
    size, executor = spec.get_workspace_size(args, outs, soc)
    tiling_result = spec.tiling(args, soc)
    return tiling_result, outs, size, executor


def run_op(spec: OpSpec, args: dict, soc, *, check: bool = True) -> dict:
    """Tile, run both aclnn phases, compare with the golden; returns the facts the CLI prints."""
    tiling_result, outs, size, executor = prepare_op(spec, args, soc)
    spec.run(np.empty(size, dtype=np.uint8), size, executor)
    facts = dict(tiling=tiling_result, report=executor.report, outputs=outs)
    if check:
        want = spec.golden(args, tiling_result)
        if spec.check is not None:
            facts["exact"] = spec.check(outs, want, args)
            facts["within_bound"] = bool(args.get("padded_mode", args.get("drop_and_pad", False)))
        else:      # a None in the golden is an output the op leaves unwritten
            facts["exact"] = all(same_bits(o, w) for o, w in zip(outs, want, strict=False)
                                 if w is not None or o is None)
    return facts


# --- printing and JSON -----------------------------------------------------------------------------------
def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"


def _gm_rate(rep) -> str:
    if rep is None or not rep.wall_time_s:
        return "no kernel ran (empty tensors)"
    total = rep.total
    if any(r.tier == "interpreted" for r in launches_of(rep)):
        return (f"kernel {rep.wall_time_s * 1e3:.1f} ms in the interpreter (not compiled yet: a background process "
                "compiles it for the next run)")
    gbs = (total.mte2_bytes + total.mte3_bytes) / rep.wall_time_s / 1e9
    return f"kernel {rep.wall_time_s * 1e3:.1f} ms on {rep.threads} threads = {gbs:.2f} GB/s of GM traffic"


def print_run(facts, label: str = "") -> None:
    """The tiling, UB plan, work per pipe, steps and verdict of one run."""
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


def print_per_core(rep) -> None:
    if rep is None:
        return
    print(f"  per core ({rep.block_dim} blocks):")
    print(f"  {'core':>5} {'MTE2 bytes':>14} {'MTE2 instr':>10} {'MTE3 bytes':>14} {'MTE3 instr':>10} "
          f"{'V elem-ops':>13} {'V instr':>9} {'S GM rd':>8} {'events':>8} {'UB hwm':>8}")
    for c in rep.cores:
        print(f"  {c.block_idx:>5} {c.mte2_bytes:>14,} {c.mte2_instr:>10,} {c.mte3_bytes:>14,} {c.mte3_instr:>10,} "
              f"{c.vec_elem_ops:>13,} {c.vec_instr:>9,} {c.scalar_gm_reads:>8,} {c.events:>8,} {c.ub_hwm_bytes:>8,}")


def print_json(obj: dict) -> None:
    """Print one command's JSON object, with the upstream version the simulated operators follow first."""
    print(json.dumps({"reference": reference(), **obj}, indent=2))


def _soc_json(soc) -> dict:
    return dict(name=soc.name, aiv_num=soc.aiv_num, ub_size=soc.ub_size, ub_size_for_tiling=soc.ub_size_for_tiling,
                npu_arch=soc.npu_arch)


def ub_plan_json(plan) -> list[dict]:
    """A UB plan's buffers: name, bytes per buffer, count, TQue / TBuf, position, queue depth, TPipe."""
    return [dict(zip(("name", "bytes", "count", "kind", "position", "depth", "pipe"), row, strict=True))
            for row in plan]


def tiling_json(op: str, t) -> dict:
    return dict(op=op, soc=_soc_json(t.soc), tiling_key=t.tiling_key, block_dim=t.block_dim,
                workspace_size=t.workspace_size, schedule_mode=t.schedule_mode, fields=dict(t.fields),
                ub_plan=ub_plan_json(t.ub_plan),
                ub_plan_bytes=t.ub_plan_bytes, ub_pipe_bytes=t.ub_pipe_bytes(), ub_fits=t.ub_fits)


def report_json(rep, per_core: bool) -> dict | None:
    if rep is None:
        return None
    tier = "interpreted" if any(r.tier == "interpreted" for r in launches_of(rep)) else "compiled"
    out = dict(kernel=rep.kernel, wall_time_s=rep.wall_time_s, compile_time_s=rep.compile_time_s, tier=tier,
               threads=rep.threads, ub_plan_bytes=rep.ub_plan_bytes, total=dataclasses.asdict(rep.total))
    out["total"].pop("block_idx")
    if per_core:
        out["cores"] = [dataclasses.asdict(c) for c in rep.cores]
    return out


# --- first-run compiles ----------------------------------------------------------------------------------
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
SECONDS_PER_COLD_MODULE = 6.0
SECONDS_PER_COLD_STAGE = 3.0
TWO_PROCESS_SPEEDUP = 1.5


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


def announce_interpreting(cold: list) -> None:
    if cold:
        print(f"First run: {len(cold)} kernel stages are not compiled yet, so they run in the Python interpreter (same "
              "results, counters and estimates) while numba compiles them in a background process into its disk cache; "
              "later runs use the compiled kernels. ASCEND_SIM_TIER=compiled compiles first instead.",
              file=sys.stderr, flush=True)


def announce_compile(cold: list, processes: int = 1) -> None:
    if cold:
        modules = {stage.py_func.__module__ for stage, _ in cold}
        estimate = (len(modules) * SECONDS_PER_COLD_MODULE + len(cold) * SECONDS_PER_COLD_STAGE) / \
            (TWO_PROCESS_SPEEDUP if processes > 1 else 1.0)
        where = "in two processes" if processes > 1 else "in one process"
        print(f"First run: compiling {len(cold)} kernel stages with numba {where} (about {estimate:.0f} s on a 2-core "
              "machine; cached on disk, so later runs start in seconds). Compile time is not counted as kernel "
              "time.", file=sys.stderr, flush=True)
