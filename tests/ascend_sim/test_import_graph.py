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


def module_name(path: Path) -> str:
    """A source file's module name inside the package: "core", "regbase" (a subpackage's __init__),
    "regbase.arith"."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "__init__.py"}
MODULES = sorted(SOURCES)


def imports_of(source: str, modules, package: str = "") -> set[str]:
    """The package modules a module's source imports, at any depth: `from .x import ...`, `from . import x`,
    `from ascend_sim.x import ...`, `import ascend_sim.x`, and from a subpackage (`package`, e.g. "regbase")
    `from .y import ...` / `from ..x import ...`. A name resolves to the longest module it starts with."""
    here = package.split(".") if package else []
    targets = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):
                    continue                                # above ascend_sim: not ours
                base = here[: len(here) - (node.level - 1)]
            elif node.module and node.module.split(".")[0] == "ascend_sim":
                base = []
                node = ast.ImportFrom(module=".".join(node.module.split(".")[1:]) or None, names=node.names,
                                      level=1)
            else:
                continue
            stem = base + (node.module.split(".") if node.module else [])
            targets += [stem + [a.name] for a in node.names]        # `from . import x` names the module x
            if node.module:
                targets.append(stem)
        elif isinstance(node, ast.Import):
            targets += [a.name.split(".")[1:] for a in node.names if a.name.startswith("ascend_sim.")]
    found = set()
    for parts in targets:
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in modules:
                found.add(name)
                break
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
    graph = {}
    for name, path in SOURCES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imports_of(path.read_text(encoding="utf-8"), MODULES, package) - {name}
    return graph


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


SUBPACKAGE = {"core", "check", "regbase", "regbase.arith", "regbase.registers"}


@pytest.mark.parametrize("source, package, imported", [
    ("from .registers import _instr", "regbase", {"regbase.registers"}),
    ("from ..core import Core\nfrom .. import check as chk", "regbase", {"core", "check"}),
    ("from .regbase import vadd", "", {"regbase"}),
    ("from .regbase.arith import vadd\nfrom .regbase import registers", "",
     {"regbase", "regbase.arith", "regbase.registers"}),
    ("from ascend_sim.regbase.arith import vadd\nimport ascend_sim.regbase.registers", "",
     {"regbase.arith", "regbase.registers"}),
    ("from ...ops import x", "regbase", set()),
], ids=["sibling", "parent-package", "the-subpackage", "its-modules", "absolute", "above-the-package"])
def test_imports_of_resolves_subpackage_imports(source, package, imported):
    assert imports_of(source, SUBPACKAGE, package) == imported


def test_the_graph_reaches_into_subpackages():
    graph = package_graph()
    assert "regbase.registers" in graph["regbase.arith"] and "faults" in graph["regbase.arith"]
    assert "regbase" in graph["kernel_api"]


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
