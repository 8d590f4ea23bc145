"""The documentation: the README keeps the set-up commands CI runs, every API page's public names have docstrings,
and the docstring check of the docs build (docs/_hooks/docstrings.py) catches a name without one.

The build itself (`mkdocs build --strict`: links, anchors, navigation, the same docstring check) runs in .ci/run;
test_mkdocs_build_strict repeats it here under the `slow` mark.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_PAGES = sorted((DOCS / "api").glob("*.md"))

# the two quick-start commands, exactly; CI (.ci/run) and users run them as written
TOUR = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/ascend-sim demo"
TESTS = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test,torch]' && .venv/bin/python -m pytest"


def _hook():
    pytest.importorskip("griffe")
    pytest.importorskip("yaml")
    spec = importlib.util.spec_from_file_location("docs_docstrings_hook", DOCS / "_hooks" / "docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_keeps_the_quick_start_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the docs/ pages hold the rest"
    assert TOUR in lines and TESTS in lines
    assert "mkdocs build --strict" in readme


def test_ci_installs_what_the_readme_test_command_installs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    extras = re.search(r"pip install -q -e '\.\[([a-z,]+)\]'", ci)
    assert extras and {"test", "torch"} <= set(extras.group(1).split(",")), "CI must install the test command's extras"
    assert ".venv/bin/python -m pytest" in ci
    assert re.search(r"mkdocs build --strict", ci), "CI must build the docs in strict mode"


def test_readme_links_point_at_pages_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert targets
    assert [t for t in targets if not (ROOT / t).is_file()] == []


@pytest.mark.parametrize("page", API_PAGES, ids=[p.stem for p in API_PAGES])
def test_every_documented_public_name_has_a_docstring(page):
    hook = _hook()
    directives = hook.directives(page.read_text(encoding="utf-8"))
    assert directives, f"{page.name} documents nothing"
    missing = [name for path, options in directives for name in hook.missing_docstrings(path, options)]
    assert missing == []


def test_members_all_public_expands_to_every_public_name():
    hook = _hook()
    names = hook.public_names("ascend_sim.kernel_api")
    assert {"data_copy_pad", "alloc_tensor", "vadd", "simt_vf_call"} <= set(names)
    assert not [n for n in names if n.startswith("_")]
    expanded = hook.expand_members("::: ascend_sim.kernel_api\n    options:\n      members: all-public\n")
    [(path, options)] = hook.directives(expanded)
    assert path == "ascend_sim.kernel_api" and options["members"] == names


FAKE_PACKAGE = {
    "__init__.py": '"""A package."""\nfrom .mod import mod\nfrom .impl import documented, undocumented\n'
                   '__all__ = ["documented", "undocumented", "mod"]\n',
    "impl.py": '"""Implementation."""\n\n\ndef documented():\n    """Has one."""\n\n\ndef undocumented():\n'
               '    return 1\n',
    "mod.py": '"""A module whose function has its name."""\n\n\ndef mod():\n    """Documented, but shadowed."""\n',
}


@pytest.mark.parametrize("options, expected", [
    pytest.param({}, ["fakepkg.undocumented", "fakepkg.mod (a submodule shadows it: document fakepkg.mod.mod)"],
                 id="all-exports"),
    pytest.param({"members": ["documented"]}, [], id="members-list"),
    pytest.param({"filters": ["!^_", "!^undocumented$", "!^mod$"]}, [], id="filtered-out"),
    pytest.param({"members": False}, [], id="no-members"),
])
def test_the_check_reports_names_without_docstrings(tmp_path, options, expected):
    hook = _hook()
    package = tmp_path / "fakepkg"
    package.mkdir()
    for name, text in FAKE_PACKAGE.items():
        (package / name).write_text(text)
    assert hook.missing_docstrings("fakepkg", options, search_paths=(str(tmp_path),)) == expected


def test_the_check_reports_an_undocumented_object_itself(tmp_path):
    hook = _hook()
    package = tmp_path / "fakepkg2"
    package.mkdir()
    (package / "__init__.py").write_text("def bare():\n    return 0\n")
    assert hook.missing_docstrings("fakepkg2.bare", {}, search_paths=(str(tmp_path),)) == ["fakepkg2.bare"]
    assert hook.missing_docstrings("fakepkg2.absent", {}, search_paths=(str(tmp_path),)) == [
        "fakepkg2.absent (not found)"]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "ops" / "index.html").is_file()


# --- the OpDef dtype columns on the operator pages, as the code checks them (910B / 910_93) ----------------------
# page: (operator package, its column table, the argument names in column order)
OPDEF_PAGES = {
    "moe-token-permute.md": ("ops.permute", "V1_DTYPE_COLUMNS",
                             ("tokens", "indices", "permute_tokens_out", "sorted_indices_out")),
    "moe-token-permute-grad.md": ("ops.permute_grad", "DTYPE_COLUMNS",
                                  ("permuted_output_grad", "sorted_indices", "out")),
    "moe-token-unpermute.md": ("ops.unpermute", "DTYPE_COLUMNS", "GM_NAMES"),
    "moe-token-unpermute-grad.md": ("ops.unpermute_grad", "DTYPE_COLUMNS", "NAMES"),
    "moe-token-unpermute-with-routing-map-grad.md": ("ops.unpermute_with_routing_map_grad", "DTYPE_COLUMNS",
                                                     "_INPUT_NAMES"),
}
OPDEF_BEGIN, OPDEF_END = "<!-- opdef-dtypes: generated by tests/test_docs.py opdef_table -->", "<!-- /opdef-dtypes -->"


def opdef_table(page: str) -> str:
    """The markdown table of the OpDef dtype columns the operator's aclnn accepts on 910B / 910_93, one row a
    column, read from the operator package (python -c "from tests.test_docs import opdef_table; ..." prints it)."""
    import importlib

    import numpy as np

    module_name, columns_name, names = OPDEF_PAGES[page]
    module = importlib.import_module(module_name)
    names = getattr(module, names) if isinstance(names, str) else names
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    rows = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for column in getattr(module, columns_name):
        assert len(column) == len(names)
        rows.append("| " + " | ".join(short.get(np.dtype(d).name, np.dtype(d).name) for d in column) + " |")
    return "\n".join([OPDEF_BEGIN, "", *rows, "", OPDEF_END])


@pytest.mark.parametrize("page", sorted(OPDEF_PAGES), ids=[p[:-3] for p in sorted(OPDEF_PAGES)])
def test_operator_pages_list_the_dtype_columns_the_code_accepts(page):
    text = (DOCS / "operators" / page).read_text(encoding="utf-8")
    assert opdef_table(page) in text, f"regenerate the table of docs/operators/{page} with opdef_table({page!r})"


def _griffe_extension():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("docs_griffe_docstrings", DOCS / "_hooks" / "griffe_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text, expected", [
    pytest.param("LocalTensor<float>", "LocalTensor&lt;float>", id="template-in-prose"),
    pytest.param("`SetFlag<MTE2_V>` then SetFlag<V_S>", "`SetFlag<MTE2_V>` then SetFlag&lt;V_S>", id="code-span-kept"),
    pytest.param("a\n```\nx<y\n```\nb<c", "a\n```\nx<y\n```\nb&lt;c", id="fenced-block-kept"),
    pytest.param("    indented<code>", "    indented<code>", id="indented-code-kept"),
    pytest.param("no brackets", "no brackets", id="unchanged"),
])
def test_docstring_angle_brackets_are_escaped_outside_code(text, expected):
    assert _griffe_extension().escape_angle_brackets(text) == expected


def test_every_kernel_api_constant_group_is_on_its_page():
    # the page filters out the ALL-CAPS constants and lists them in a table instead: each must be named there
    hook = _hook()
    page = (DOCS / "api" / "kernel_api.md").read_text(encoding="utf-8")
    constants = [n for n in hook.public_names("ascend_sim.kernel_api") if re.fullmatch(r"[A-Z][A-Z0-9_]*", n)]
    assert constants
    assert [n for n in constants if f"`{n}`" not in page] == []


PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS))[:-3] for p in PAGES])
def test_pages_have_no_template_argument_read_as_html(page):
    # `PipeBarrier<PIPE_V>` outside a code span is an unknown HTML tag to Markdown: the browser shows nothing of it
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"(`+).+?\1", "", text, flags=re.DOTALL)
    assert re.findall(r"<(?!!--|/?opdef)[A-Za-z_][^>\n]*>", text) == []
