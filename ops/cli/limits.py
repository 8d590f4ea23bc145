"""`ascend-sim limits`: where an operator's tiling keys stop fitting the UB, per chip profile.

    ascend-sim limits moe_token_unpermute_with_routing_map_grad --vary hidden --fix tokens=15000 \\
        --fix topk=2 --fix experts=8 --probs-dtype fp32

The shape flags not varied take their --fix value (or the run command's flag, or the default
4096 tokens, hidden 7168, 256 experts, topK 8); the operator's mode flags are those of `run`.
Without --soc every stock profile is explored; --ub-size / --cores explore a custom chip.
"""
from __future__ import annotations

import argparse

from ascend_sim.errors import ConfigError

from ..limits import DEFAULT_MAX, DEFAULT_SHAPE, VARY, explore, profiles, tiler
from .common import CliError, add_case_parser, check_flags_apply, output_file, positive, print_json
from .operators import op_spec

_FIXABLE = ("tokens", "hidden", "experts", "topk", "capacity", "num_out_tokens")


def add_parser(sub) -> None:
    p = add_case_parser(sub, "limits", "find, from tilings only, where each tiling key stops fitting the UB or the "
                                       "tiling fails as one shape dimension grows, per chip profile",
                        shape_needed=False)
    p.add_argument("--vary", required=True, choices=VARY,
                   help="the dimension to explore: hidden, tokens, topk or experts")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                   help="hold a shape value, e.g. --fix tokens=15000 (names: tokens, hidden, experts, topk, capacity, "
                        "num_out_tokens); same as the shape flag")
    p.add_argument("--from", dest="low", type=positive, default=1, metavar="V",
                   help="smallest value to explore (default 1)")
    p.add_argument("--to", dest="high", type=positive, metavar="V",
                   help="largest value to explore (default: hidden 65536, tokens 1048576, topk 1024, experts 8192)")
    p.add_argument("--plot", metavar="OUT.png", type=output_file,
                   help="draw the segments per profile (needs matplotlib)")
    p.set_defaults(soc=None)


def _base(a) -> argparse.Namespace:
    base = argparse.Namespace(**vars(a))
    for text in a.fix:
        name, sep, raw = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in _FIXABLE:
            raise CliError(f"--fix takes name=value with name one of {', '.join(_FIXABLE)}; got {text!r}")
        try:
            setattr(base, name, int(raw))
        except ValueError:
            raise CliError(f"--fix {name}: expected a whole number, got {raw!r}") from None
    if a.vary in {t.partition("=")[0].strip().replace("-", "_") for t in a.fix}:
        raise CliError(f"--vary {a.vary} and --fix {a.vary}=... exclude each other")
    for name, value in DEFAULT_SHAPE.items():
        if getattr(base, name, None) is None and not (name == "topk" and getattr(base, "capacity", None)):
            setattr(base, name, value)
    return base


def _shape_rules_as_outcomes(tile):
    """The command line's own shape rules (CliError, e.g. topK above the experts) become an outcome of the
    exploration ("not a valid shape") instead of ending it."""
    def checked_tile(value):
        try:
            return tile(value)
        except CliError as e:
            raise ValueError(str(e)) from None
    return checked_tile


def command(a) -> int:
    spec = op_spec(a.op)
    base = _base(a)
    high = a.high or DEFAULT_MAX[a.vary]
    try:
        socs = profiles(a.soc, a.ub_size, a.cores)
    except ConfigError as e:
        raise CliError(str(e)) from None
    results = []
    for soc in socs:
        check_flags_apply(base, spec, soc)
        segments = explore(_shape_rules_as_outcomes(tiler(spec, base, a.vary, soc)), a.low, high)
        results.append((soc, segments))
    held = ", ".join(f"{n} {getattr(base, n)}" for n in ("tokens", "hidden", "experts", "topk", "capacity")
                     if n != a.vary and getattr(base, n, None) is not None)
    if a.json:
        print_json(dict(op=a.op, vary=a.vary, held=held, **{"from": a.low, "to": high}, plot=a.plot, profiles=[
            dict(soc=soc.name, ub_size=soc.ub_size, aiv_num=soc.aiv_num, segments=[
                dict(first=s.first, last=s.last, tiling_key=s.outcome.key, fits=s.outcome.fits,
                     status=s.outcome.status, plan_bytes=s.outcome.plan_bytes, ub_bytes=s.outcome.ub_bytes,
                     error=s.outcome.error, label=s.outcome.label)
                for s in segs]) for soc, segs in results]))
    else:
        print(f"{a.op}: {a.vary} from {a.low:,} to {high:,} ({held})")
        for soc, segments in results:
            print(f"  {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size:,} B)")
            for s in segments:
                span = f"{s.first:,}" if s.first == s.last else f"{s.first:,} .. {s.last:,}"
                o = s.outcome
                extra = (f"  (plan {o.plan_bytes:,} of {o.ub_bytes:,} B at {s.first:,})" if o.status is None
                         else f"  {o.error}")
                print(f"    {a.vary} {span:<22} {o.label}{extra}")
    if a.plot:
        _plot(results, a, high)
        if not a.json:
            print(f"  wrote {a.plot}")
    return 0


def _plot(results, a, high) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'ascend-sim[plot]'") from None
    fig, ax = plt.subplots(figsize=(11, 1 + 0.7 * len(results)))
    for y, (_soc, segments) in enumerate(results):
        for s in segments:
            colour = "tab:green" if s.outcome.fits else ("tab:red" if s.outcome.status is None else "tab:gray")
            ax.broken_barh([(s.first, s.last + 1 - s.first)], (y + 0.1, 0.8), color=colour)
            if s.last - s.first > (high - a.low) / 12:
                ax.text(s.first, y + 0.5, f" {s.outcome.label}", va="center", fontsize=8)
    ax.set_yticks([y + 0.5 for y in range(len(results))], [soc.name for soc, _ in results])
    ax.set_xscale("log")
    ax.set_xlabel(a.vary)
    ax.set_title(f"{a.op}: green fits, red does not fit the UB, grey tiling fails")
    fig.tight_layout()
    fig.savefig(a.plot, dpi=120)
    plt.close(fig)
