"""MkDocs hook: every public name an API page documents must have a docstring.

mkdocstrings renders a name without a docstring as nothing (`show_if_no_docstring: false`), which would hide the
gap; this hook reads each `::: dotted.path` directive of a page (and its `options:` block), loads the object the
way mkdocstrings does (griffe's static analysis, with the griffe_docstrings.py extension), and logs a warning for the
object itself and each member the page renders (the `members` list, else the module's `__all__`, else the names it
defines) that has none, or that a submodule of the same name hides. `mkdocs build --strict` turns the warning
into a failed build; tests/test_docs.py runs the same check without mkdocs.
"""
from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

import yaml

log = logging.getLogger("mkdocs.plugins.docstrings")

ROOT = Path(__file__).resolve().parents[2]
_DIRECTIVE = re.compile(r"^::: *([\w.]+) *\n((?:[ \t]+.*\n|\n)*)", re.MULTILINE)


def directives(markdown: str) -> list[tuple[str, dict]]:
    """The `::: path` directives of a page with their options (dict, empty when the block has none)."""
    found = []
    for m in _DIRECTIVE.finditer(markdown if markdown.endswith("\n") else markdown + "\n"):
        block = m.group(2)
        config = yaml.safe_load(_dedent(block)) if block.strip() else None
        found.append((m.group(1), (config or {}).get("options") or {}))
    return found


def _dedent(block: str) -> str:
    lines = [line for line in block.split("\n") if line.strip()]
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    return "\n".join(line[indent:] for line in lines)


def _passes(name: str, filters: list[str]) -> bool:
    # mkdocstrings' rule: a name is kept unless a filter without "!" misses it or a filter with "!" matches it
    keep = True
    for f in filters:
        if f.startswith("!"):
            if re.search(f[1:], name):
                keep = False
        elif not re.search(f, name):
            keep = False
    return keep


def _documented(obj) -> bool:
    try:
        doc = obj.docstring
    except Exception:       # an alias griffe cannot resolve renders as nothing either
        return False
    return bool(doc and doc.value.strip())


# `members: all-public` on a page: every public name the module holds, imported ones included (kernel_api is a
# namespace of names imported from the modules that define them, with no __all__); expand_members() writes the list
# into the page before mkdocstrings reads it, so a new name is rendered, and checked, without editing the page
ALL_PUBLIC = "all-public"


def public_names(path: str, search_paths=(str(ROOT),)) -> list[str]:
    """The names of module `path` that do not start with an underscore, in source order."""
    obj = _loader(path.partition(".")[0], tuple(search_paths)).modules_collection[path]
    return [n for n, m in obj.members.items() if not n.startswith("_") and not _is_module(m)]


def _is_module(member) -> bool:
    try:
        return member.is_module
    except Exception:       # an alias griffe cannot follow (a tuple-unpacked constant): a name, not a module
        return False


def expand_members(markdown: str) -> str:
    """`members: all-public` under a `::: path` directive replaced by the explicit list of public_names(path)."""
    def expand(m):
        block = m.group(2)
        if f"members: {ALL_PUBLIC}" not in block:
            return m.group(0)
        line = next(x for x in block.split("\n") if f"members: {ALL_PUBLIC}" in x)
        indent = line[:len(line) - len(line.lstrip())]
        listing = "\n".join([f"{indent}members:"] + [f"{indent}  - {n}" for n in public_names(m.group(1))])
        return m.group(0).replace(line, listing)
    return _DIRECTIVE.sub(expand, markdown if markdown.endswith("\n") else markdown + "\n")


@functools.cache
def _loader(top: str, search_paths: tuple):
    # one static load per package and build, as mkdocstrings does, with the same extension (griffe_docstrings.py)
    import griffe

    extensions = griffe.load_extensions(str(Path(__file__).with_name("griffe_docstrings.py")))
    loader = griffe.GriffeLoader(search_paths=list(search_paths), extensions=extensions)
    loader.load(top)
    loader.resolve_aliases(implicit=True, external=False)
    return loader


def missing_docstrings(path: str, options: dict, search_paths=(str(ROOT),)) -> list[str]:
    """Names under `path` that the page would render without a docstring (empty list: all documented)."""
    filters = options.get("filters", ["!^_"])
    top = path.partition(".")[0]
    loader = _loader(top, tuple(search_paths))
    try:
        obj = loader.modules_collection[path]
    except KeyError:
        return [f"{path} (not found)"]
    missing = [] if _documented(obj) else [path]
    members = options.get("members")
    if members is False or not obj.is_module:
        return missing
    if members == ALL_PUBLIC:
        names = public_names(path, search_paths)
    elif isinstance(members, list):
        names = members
    elif obj.exports is not None:
        names = [str(n) for n in obj.exports]
    else:
        names = [n for n, m in obj.members.items() if not m.is_alias]
    for name in names:
        if not _passes(name, filters):
            continue
        member = obj.members.get(name)
        if member is None or not _documented(member):
            missing.append(f"{path}.{name}")
        elif _is_module(member):
            # a function imported over the submodule of its own name (tiling.moe_token_permute): griffe keeps the
            # submodule, which mkdocstrings does not render; the page must name the function's own path instead
            missing.append(f"{path}.{name} (a submodule shadows it: document {path}.{name}.{name})")
    return missing


def on_pre_build(config):
    _loader.cache_clear()       # `mkdocs serve` rebuilds after an edit: load the packages afresh


def on_page_markdown(markdown, page, config, files):
    markdown = expand_members(markdown)
    for path, options in directives(markdown):
        for name in missing_docstrings(path, options):
            log.warning("%s: %s would be rendered without a docstring, or not at all", page.file.src_path, name)
    return markdown
