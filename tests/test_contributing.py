"""CONTRIBUTING.md names real things: every repository path, every `package.module.name` and every layout constant
it quotes in backticks exists, and every `file.py::test_name` is a test of that file. A rename that leaves the
guide (and so its recipes for a call, a fault and an operator) pointing at nothing fails here.

What is checked, per backticked span outside code blocks:
* a span without spaces that contains "/" and starts with a top-level entry of the repository (`ascend_sim/`,
  `docs/...`, `ops/*/cli.py`) is a path (glob patterns allowed): it must match something; `path::name` must also
  define `def name` in that file;
* a bare file name (`kernel.py`, `mkdocs.yml`) must be the name of some file of the repository;
* every dotted name starting with ascend_sim / ops / tiling / tests (or `asc.`, the kernels' alias of
  ascend_sim.kernel_api) must import: the longest importable module prefix, then attributes;
* a bare `CALL_*`, `F_*` or `P_*` constant must be defined in ascend_sim.layout.
Spans naming the recipes' placeholder (foo, `<id>`) and paths outside this repository (the upstream sources'
`op_host/...`) are not checked.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from ascend_sim import layout

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "CONTRIBUTING.md"
ALIASES = {"asc": "ascend_sim.kernel_api"}
PACKAGES = ("ascend_sim", "ops", "tiling", "tests")
DOTTED = re.compile(r"(?<![\w./-])((?:ascend_sim|ops|tiling|tests|asc)(?:\.[A-Za-z_]\w*)+)")
CONSTANT = re.compile(r"(?:CALL|F|P)_[A-Z0-9_]+")
RECIPES = ("## Recipe: add an AscendC call", "## Recipe: add a fault", "## Recipe: add an operator")


def spans(text: str) -> list[str]:
    """The backticked spans of a markdown text outside fenced code blocks, line breaks folded to spaces."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]


def _is_placeholder(span: str) -> bool:
    return "foo" in span.lower() or "<" in span


def references(text: str) -> list[tuple[str, str]]:
    """(kind, reference) for everything the guide's spans claim exists: "path", "file", "name" or "constant"."""
    top = {p.name for p in ROOT.iterdir()}
    found: list[tuple[str, str]] = []
    for span in spans(text):
        if _is_placeholder(span):
            continue
        if " " not in span and "/" in span:
            if span.split("/")[0] in top:
                found.append(("path", span))
            continue
        if " " not in span and re.fullmatch(r"[\w.-]+\.(py|md|toml|yml|yaml|json)", span) \
                and span.split(".")[0] not in PACKAGES + tuple(ALIASES):
            found.append(("file", span))
            continue
        found.extend(("name", m) for m in DOTTED.findall(span))
        if CONSTANT.fullmatch(span):
            found.append(("constant", span))
    return list(dict.fromkeys(found))


def problem(kind: str, ref: str) -> str | None:
    """Why `ref` does not exist (None: it does)."""
    if kind == "path":
        path, _, test = ref.partition("::")
        matches = sorted(ROOT.glob(path.rstrip("/")))
        if not matches:
            return f"no file or directory {path}"
        if test and not any(re.search(rf"^def {re.escape(test)}\(", m.read_text(), re.M) for m in matches):
            return f"{path} defines no {test}"
        return None
    if kind == "file":
        return None if any(ROOT.rglob(ref)) else f"no file named {ref} in the repository"
    if kind == "constant":
        return None if isinstance(getattr(layout, ref, None), int) else f"ascend_sim.layout has no {ref}"
    head, *rest = ref.split(".")
    parts = ALIASES.get(head, head).split(".") + rest
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for i, attr in enumerate(parts[cut:], cut):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:i])} has no attribute {attr}"
            obj = getattr(obj, attr)
        return None
    return f"no module {parts[0]}"


GUIDE_TEXT = GUIDE.read_text(encoding="utf-8")
REFERENCES = references(GUIDE_TEXT)


def test_the_guide_has_the_three_recipes():
    for heading in RECIPES:
        assert heading in GUIDE_TEXT.splitlines(), heading


def test_the_guide_quotes_enough_to_be_worth_checking():
    kinds = {kind for kind, _ in REFERENCES}
    assert kinds == {"path", "file", "name", "constant"} and len(REFERENCES) > 100, (kinds, len(REFERENCES))


@pytest.mark.parametrize("kind, ref", REFERENCES, ids=[ref for _, ref in REFERENCES])
def test_what_the_guide_names_exists(kind, ref):
    assert problem(kind, ref) is None, f"CONTRIBUTING.md: `{ref}`: {problem(kind, ref)}"


@pytest.mark.parametrize("text, expected", [
    pytest.param("`ascend_sim/vectors.py`", "no file or directory ascend_sim/vectors.py", id="renamed-file"),
    pytest.param("`tests/test_smoke.py::test_gone`", "tests/test_smoke.py defines no test_gone", id="renamed-test"),
    pytest.param("`ops/*/clix.py`", "no file or directory ops/*/clix.py", id="glob-matching-nothing"),
    pytest.param("`kernal.py`", "no file named kernal.py in the repository", id="bare-file-name"),
    pytest.param("`ascend_sim.faults.to_errors`", "ascend_sim.faults has no attribute to_errors", id="renamed-name"),
    pytest.param("see `with ascend_sim.check.unchecked():`", "ascend_sim.check has no attribute unchecked",
                 id="name-inside-code"),
    pytest.param("`asc.data_copy_padd`", "ascend_sim.kernel_api has no attribute data_copy_padd", id="asc-alias"),
    pytest.param("`tiling.commons.align_up`", "tiling has no attribute commons", id="renamed-module"),
    pytest.param("`F_GM_OOBS`", "ascend_sim.layout has no F_GM_OOBS", id="layout-constant"),
])
def test_a_stale_reference_is_reported(text, expected):
    [(kind, ref)] = references(text)
    assert problem(kind, ref) == expected


@pytest.mark.parametrize("text", [
    "`ops/moe_foo/kernel.py`", "`CALL_FOO = _call(<id>, \"Foo\")`", "`op_host/*_tiling.cpp`", "```\nops/x.py\n```",
    "`ruff check .`",
], ids=["placeholder-path", "placeholder-call", "upstream-path", "code-block", "command"])
def test_placeholders_upstream_paths_and_commands_are_not_checked(text):
    assert references(text) == []


def test_the_ids_and_codes_the_guide_calls_free_are_free():
    """The call ids and fault codes the recipes offer are unused (and the next MicroAPI id is the next one). A new
    call or fault takes one of them: then update the numbers in CONTRIBUTING.md's recipe."""
    stale = "CONTRIBUTING.md: update the free ids / codes of the recipe"
    text = " ".join(GUIDE_TEXT.split())
    low = re.search(r"(\d+), (\d+) and (\d+) are free today \((\d+) and (\d+) are the SIMT cost slots", text)
    assert low, "the add-a-call recipe no longer says which ids below N_CALL_IDS are free"
    free, slots = [int(g) for g in low.groups()[:3]], [int(g) for g in low.groups()[3:]]
    assert all(i < layout.N_CALL_IDS and i not in layout.CALLS for i in free), stale
    assert slots == [layout.SLOT_SIMT_GM_LATENCY, layout.SLOT_SIMT_LAUNCH]
    unused_below = {i for i in range(1, layout.N_CALL_IDS) if i not in layout.CALLS} - set(slots)
    assert unused_below == set(free), f"{stale}: ids below {layout.N_CALL_IDS} not in CALLS: {sorted(unused_below)}"
    nxt = re.search(r"from 64 on \(the next is (\d+)\)", text)
    assert nxt and int(nxt.group(1)) == max(layout.CALLS) + 1, stale
    codes = re.search(r"free today: (\d+) to (\d+), (\d+) to (\d+), (\d+) on; not (\d+),", text)
    assert codes, "the add-a-fault recipe no longer says which codes are free"
    a, b, c, d, e, undeclared = map(int, codes.groups())
    offered = set(range(a, b + 1)) | set(range(c, d + 1))
    assert not offered & set(layout.FAULTS) and e == max(layout.FAULTS) + 1, stale
    assert set(range(1, e)) - set(layout.FAULTS) == offered | {undeclared}, stale
