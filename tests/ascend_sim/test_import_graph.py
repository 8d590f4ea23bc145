"""ascend_sim's modules import one another without a cycle, and layout.py (the constants and the state layout)
imports none of them.

An import inside a function counts: that is where the old circle hid (core.start_pipe imported check, check
imported core and faults at the top and _check_entries inside attach, _check_entries imported check), and a
deferred import still makes the two modules unable to exist without each other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ascend_sim

PACKAGE = Path(ascend_sim.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def imports_of(source: str, modules) -> set[str]:
    """The package modules a module's source imports, at any depth: `from .x import ...`, `from . import x`,
    `from ascend_sim.x import ...`, `import ascend_sim.x`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            elif node.level == 0 and node.module and node.module.split(".")[0] == "ascend_sim":
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("ascend_sim.")]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    colour: dict[str, int] = {}      # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node):
        colour[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in colour:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if node not in colour:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def package_graph() -> dict[str, set[str]]:
    return {m: imports_of((PACKAGE / f"{m}.py").read_text(encoding="utf-8"), MODULES) - {m} for m in MODULES}


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}}, ["b", "c", "d", "b"]),
], ids=["chain", "two-cycle", "cycle-below-the-root"])
def test_the_cycle_finder_finds_cycles(graph, cycle):
    assert find_cycle(graph) == cycle


@pytest.mark.parametrize("source, imported", [
    ("from .core import Core", {"core"}),
    ("from . import check as chk, timeline", {"check", "timeline"}),
    ("def f():\n    from .check import barrier_all\n", {"check"}),
    ("from ascend_sim.faults import fault\nimport ascend_sim.pipe\n", {"faults", "pipe"}),
    ("from numba import njit\nfrom ..ops import x\n", set()),
], ids=["from-module", "from-package", "inside-a-function", "absolute", "not-ours"])
def test_imports_of_reads_every_form(source, imported):
    assert imports_of(source, {"core", "check", "timeline", "faults", "pipe"}) == imported


def test_ascend_sim_has_no_import_cycle():
    graph = package_graph()
    assert len(graph) >= 20, sorted(graph)          # the walk did find the package's modules
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_layout_imports_nothing_of_ours():
    assert package_graph()["layout"] == set()


def test_the_core_packages_never_import_torch():
    """torch is the [torch] extra's: only ops.torch imports it."""
    import subprocess
    import sys
    code = "import sys, ops, tiling, ascend_sim; sys.exit(int('torch' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
