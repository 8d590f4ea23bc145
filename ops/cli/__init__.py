"""ascend-sim command line: `demo`, `warmup`, `tiling OP ...`, `run OP ...`, `profile OP ...`, `limits OP ...`,
`sweep {profile|tiling|limits} OP ...`, `moe-layer`.

    ascend-sim demo [--all] [--soc ascend910b] [--ub-size B] [--cores N]
    ascend-sim warmup [--op OP ...] [--soc S ...] [--jobs N]
    ascend-sim calibrate op_summary.csv --soc ascend910b --fit hbm_bytes_per_cycle,mte2_latency_cycles --out fit.json
    ascend-sim run moe_token_permute --tokens 4096 --hidden 7168 --experts 256 --topk 8 --soc ascend950 --quant-mode 3
    ascend-sim tiling moe_token_unpermute_with_routing_map_grad --tokens 4096 --hidden 7168 --experts 256 --topk 8
    ascend-sim run moe_token_unpermute_with_routing_map_grad --tokens 512 --hidden 4096 --experts 64 --capacity 64 \\
        --drop-and-pad --probs-dtype fp32 --per-core --json
    ascend-sim sweep tiling moe_token_permute --grid tokens=1024,4096 --grid hidden=4096,7168 --grid topk=8 \\
        --grid experts=256 --soc 910b,950 --jobs 2 --out permute.csv

Every error is one line on stderr and a non-zero exit (2: a bad flag; 1: the operator or the
simulator refused the case, or the result did not match the golden), never a traceback.

One module per command (each with `add_parser(sub)` and `command(args) -> exit status`), `common` for
what they share, `operators` for the list of operator packages; what the command line knows about an
operator is in that operator's package (`ops/<op>/cli.py`, an `ops.common.cli_spec.OpSpec`).
"""
from __future__ import annotations

import argparse
import os
import sys

from ascend_sim import ConfigError, SimulatorError, __version__
from tiling.reference import reference_line
from tiling.status import AclnnError

from . import calibrate, demo, limits, moe_layer, profile, run, sweep, tiling, warmup
from .common import CliError, Parser, prepare_op, run_op
from .demo import demo_cases
from .operators import OPS

__all__ = ["CliError", "OPS", "build_parser", "demo_cases", "main", "prepare_op", "run_op"]

COMMANDS = {"demo": demo, "warmup": warmup, "tiling": tiling, "run": run, "profile": profile, "limits": limits,
            "sweep": sweep, "moe-layer": moe_layer, "calibrate": calibrate}
"""Sub-command name: its module, in the order of the help."""


def version_line() -> str:
    """`ascend-sim --version`: the package's version (ascend_sim.__version__, which the package metadata is built
    from) and the upstream commit its operators follow."""
    return f"ascend-sim {__version__}, simulating {reference_line()}"


class _Version(argparse.Action):
    """`--version` on one line (argparse's own version action wraps it at the terminal's width)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ascend-sim", description="CPU simulator of CANN's MoE token permute/unpermute kernels. "
                    "Environment: ASCEND_SIM_THREADS = worker threads for the simulated cores (default: CPU count).")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version and the upstream commit, then exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                metavar="{" + ",".join(COMMANDS) + "}")
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    try:
        a = build_parser().parse_args(argv)
        return COMMANDS[a.command].command(a)
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
    except MemoryError:     # outputs beyond the inputs the memory check counts; numpy's message is no use here
        print("ascend-sim: error: out of memory while allocating the case's tensors: make the shape smaller",
              file=sys.stderr)
        return 2
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
