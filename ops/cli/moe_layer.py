"""`ascend-sim moe-layer`: a whole MoE layer forward and backward through the simulated operators, per style."""
from __future__ import annotations

from ascend_sim import SimulatorError
from tiling.status import AclnnError

from .._framework import listening_to_compiles
from ..moe_layer import STYLES, LayerArgumentError, check_arguments, largest_arrays_bytes, moe_layer
from .common import CliError, CompileProgress, add_chip_flags, check_fits_memory, integer, positive, print_json, soc_of
from .jsonout import steps_json


def add_parser(sub) -> None:
    layer = sub.add_parser("moe-layer", help="a whole MoE layer forward and backward through the simulated "
                           "operators, checked against NumPy and finite differences")
    layer.add_argument("--style", default="all", choices=("all", "topk", "routing_map", "routing_map_pad"),
                       help="token movement: topk (MoeTokenPermute indices), routing_map, "
                            "routing_map_pad (drop-and-pad); all (default) runs the three")
    layer.add_argument("--tokens", type=positive, default=64, help="tokens N (default 64)")
    layer.add_argument("--hidden", type=positive, default=64, help="hidden size H (default 64)")
    layer.add_argument("--experts", type=positive, default=8, help="experts E (default 8)")
    layer.add_argument("--topk", type=positive, default=2, help="experts per token K (default 2)")
    layer.add_argument("--capacity", type=positive,
                       help="routing_map_pad: rows per expert (default ceil(N*K/E), so tokens are dropped and padded)")
    layer.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"),
                       help="dtype of the tensors the operators move: fp32 (default), fp16, bf16 "
                            "(router and experts stay fp32)")
    layer.add_argument("--seed", type=integer, default=0, help="random seed (default 0)")
    layer.add_argument("--no-fd", action="store_true", help="skip the finite-difference gradient checks")
    add_chip_flags(layer)
    layer.add_argument("--json", action="store_true",
                       help="print one JSON object (per style: the operator calls with their steps, the errors, the "
                            "finite-difference checks, the verdict) instead of text")


def command(a) -> int:
    """A whole MoE layer, forward and backward, per style; exit 0 only when every style passes its checks."""
    soc = soc_of(a)
    styles = STYLES if a.style == "all" else (a.style,)
    for style in styles:
        try:
            check_arguments(style, a.dtype, a.tokens, a.hidden, a.experts, a.topk, a.capacity, a.seed)
        except LayerArgumentError as e:
            raise CliError(f"--{e.argument} {e.value}: {e}") from None
    check_fits_memory(largest_arrays_bytes(a.tokens, a.hidden, a.experts), a, ("tokens", "hidden", "experts"))
    results, rows = [], []
    for style in styles:
        try:
            with listening_to_compiles(CompileProgress()):    # a first run compiles kernels: say so as it goes
                r = moe_layer(style, tokens=a.tokens, hidden=a.hidden, experts=a.experts, topk=a.topk,
                              capacity=a.capacity, dtype=a.dtype, soc=soc, seed=a.seed,
                              finite_differences=not a.no_fd)
        except (AclnnError, SimulatorError) as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            if not a.json:
                print(f"MoE layer, style {style}: {error}")
            results.append(False)
            rows.append(dict(style=style, passed=False, error=error))
            continue
        if not a.json:
            print(r)
            print()
        results.append(r.passed)
        rows.append(_style_json(r))
    if a.json:
        print_json(dict(soc=soc.name, styles=rows, passed=sum(results), total=len(results), ok=all(results)))
    else:
        print(f"{sum(results)} of {len(results)} styles passed on {soc.name}")
    return 0 if all(results) else 1


def _style_json(r) -> dict:
    """One style's outcome: its shape, every operator call (tiling key, block dim, work per pipe, host wall ms,
    steps), the relative errors against the float64 layer and the finite-difference checks."""
    return dict(style=r.style, passed=bool(r.passed), error=None, dtype=r.dtype, shape=dict(r.shape),
                tolerance=float(r.tolerance), errors={k: float(v) for k, v in r.errors.items()},
                fd_checks=[dict(param=f.param, analytic=float(f.analytic), numeric=float(f.numeric),
                                rel_err=float(f.rel_err), ok=bool(f.ok)) for f in r.fd_checks],
                runs=[dict(op=o.op, tiling_key=o.tiling_key, block_dim=o.block_dim, mte2_bytes=o.mte2_bytes,
                           mte3_bytes=o.mte3_bytes, vec_elem_ops=o.vec_elem_ops, scalar_ops=o.scalar_ops,
                           sync_events=o.sync_events, wall_ms=float(o.wall_ms), kernels=o.kernels,
                           host_steps=o.host_steps, steps=steps_json(o.report)) for o in r.runs])
