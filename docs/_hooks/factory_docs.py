"""Griffe extension: a module attribute made by a factory call whose last argument is a string literal takes that
string as its docstring.

Some kernel_api calls are built by a factory that sets `__doc__` at run time
(`vcast_f32_to_f16 = _f32_to_b16_cast(..., "vcast_f32_to_f16", \"\"\"MicroAPI::Cast ...\"\"\")`); static analysis
would see an attribute without a docstring. mkdocstrings (mkdocs.yml) and the docstring check (docstrings.py) load
this extension, so both see what `help()` shows.
"""
from __future__ import annotations

import ast

import griffe


class FactoryDocstrings(griffe.Extension):
    def on_attribute_instance(self, *, node, attr, agent, **kwargs) -> None:
        if attr.docstring is not None or not isinstance(node, ast.Assign):
            return
        call = node.value
        if isinstance(call, ast.Call) and call.args and isinstance(call.args[-1], ast.Constant) \
                and isinstance(call.args[-1].value, str):
            attr.docstring = griffe.Docstring(call.args[-1].value, lineno=call.args[-1].lineno, parent=attr)
