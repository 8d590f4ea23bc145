"""Griffe extension for the API reference: docstrings as the source means them.

* A module attribute made by a factory call whose last argument is a string literal takes that string as its
  docstring. Some kernel_api calls are built by a factory that sets `__doc__` at run time
  (`vcast_f32_to_f16 = _f32_to_b16_cast(..., "vcast_f32_to_f16", \"\"\"MicroAPI::Cast ...\"\"\")`); static analysis
  would see an attribute without one.
* `<` outside code spans is escaped: the docstrings are prose full of C++ template arguments
  (`LocalTensor<float>`, `SetFlag<MTE2_V>`), which Markdown would take for HTML tags and drop.

mkdocstrings (mkdocs.yml) and the docstring check (docstrings.py) load this extension, so both see what `help()`
shows.
"""
from __future__ import annotations

import ast
import re

import griffe

_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)


def escape_angle_brackets(text: str) -> str:
    """`text` with every `<` outside backtick code spans and fenced blocks written as `&lt;`."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or line.lstrip().startswith("```") or line.startswith("    "):
            out.append(line)        # code: Markdown shows it verbatim
            continue
        pieces, last = [], 0
        for m in _CODE_SPAN.finditer(line):
            pieces.append(line[last:m.start()].replace("<", "&lt;"))
            pieces.append(m.group(0))
            last = m.end()
        pieces.append(line[last:].replace("<", "&lt;"))
        out.append("".join(pieces))
    return "\n".join(out)


class SourceDocstrings(griffe.Extension):
    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        if attr.docstring is not None or not isinstance(node, ast.Assign):
            return
        call = node.value
        if isinstance(call, ast.Call) and call.args and isinstance(call.args[-1], ast.Constant) \
                and isinstance(call.args[-1].value, str):
            attr.docstring = griffe.Docstring(call.args[-1].value, lineno=call.args[-1].lineno, parent=attr)

    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = escape_angle_brackets(obj.docstring.value)
