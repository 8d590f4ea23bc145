"""The execution tier of host helpers (`_jit.host_jit`): what a call does while its dispatcher has nothing compiled.

Kept apart from _jit so that the module every kernel imports does not import the interpreter and the background
compiler (which import _jit themselves); the package installs `run` into _jit when it is imported.
"""
from __future__ import annotations

from numba.core.registry import CPUDispatcher

from . import _jit
from . import tier as tiers


def run(dispatcher, args: tuple):
    """dispatcher(*args): interpreted when the tier says so (tier.runs_interpreted, with the host helpers' bound
    tier.HOST_INTERPRET_MAX_BYTES), else compiled by numba as usual."""
    if tiers.runs_interpreted([(dispatcher, args)], tiers.gm_bytes(args), tiers.HOST_INTERPRET_MAX_BYTES):
        from . import interpret
        return interpret.call_interpreted(dispatcher.py_func, args)
    return CPUDispatcher.__call__(dispatcher, *args)


_jit.HOST_TIER = run
