"""The plot of a sweep's table: one column against one axis, a line per value of another (matplotlib)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from .sweep_table import LIMITS_COLUMNS, RESULT_COLUMNS, SweepError, cell


def plot(rows: Sequence[Mapping[str, object]], path: str, x: str, line: str | None = None,
         y: str = "estimate_us", title: str = "") -> None:
    """A PNG of `y` against axis `x`, one line per value of axis `line` (and of every other axis that varies);
    needs matplotlib. Rows without a `y` value (refused points) are left out."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SweepError("--plot needs matplotlib: pip install 'ascend-sim[plot]'") from None
    if not rows:
        raise SweepError("nothing to plot: the table is empty")
    names = [c for c in rows[0] if c not in ("op", *RESULT_COLUMNS, *LIMITS_COLUMNS)]
    for axis in (x, line):
        if axis is not None and axis not in names:
            raise SweepError(f"cannot plot against {axis!r}: the table's axes are {', '.join(names)}")
    if y not in rows[0]:
        raise SweepError(f"cannot plot {y!r}: no such column")
    varying = [n for n in names if n != x and len({cell(r.get(n)) for r in rows}) > 1]
    grouping = ([line] if line in varying else []) + [n for n in varying if n != line]
    lines: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        value = r.get(y)
        if value in (None, ""):
            continue
        try:
            xv, yv = float(cast(Any, r[x])), float(cast(Any, value))      # CSV cells (str) or numbers
        except (TypeError, ValueError):
            raise SweepError(f"cannot plot: {x}={r[x]!r} or {y}={value!r} is not a number") from None
        lines.setdefault(tuple(cell(r[n]) for n in grouping), []).append((xv, yv))
    if not lines:
        raise SweepError(f"nothing to plot: no row has a {y} value")
    fig, ax = plt.subplots(figsize=(8, 5))
    # one colour per value of the line axis, one line style per combination of the other varying axes
    by_line = line in varying
    colours = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(k[0] for k in sorted(lines)))} if by_line else {}
    rests = {r: i for i, r in enumerate(dict.fromkeys(k[1 if by_line else 0:] for k in sorted(lines)))}
    styles = ("-", "--", ":", "-.")
    markers = ("o", "s", "^", "D", "v", "x")
    for label, pts in sorted(lines.items()):
        pts.sort()
        rest = rests[label[1 if by_line else 0:]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colours.get(label[0]) if by_line else f"C{rest % 10}",
                linestyle=styles[rest % len(styles)] if by_line else "-", marker=markers[rest % len(markers)],
                label=", ".join(f"{n}={v}" for n, v in zip(grouping, label, strict=True)) or y)
    ax.set_xlabel(x)
    ax.set_ylabel({"estimate_us": "estimate (us)", "ub_plan_bytes": "UB plan (bytes)"}.get(y, y))
    if len({p[0] for pts in lines.values() for p in pts}) > 2 and \
            max(p[0] for pts in lines.values() for p in pts) > 8 * max(1.0, min(p[0] for pts in lines.values()
                                                                                 for p in pts)):
        ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=8)
    ax.set_title(title or f"{rows[0].get('op', '')}: {y} against {x}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
