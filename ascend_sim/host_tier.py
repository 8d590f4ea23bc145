"""The execution tier of host helpers (`_jit.host_jit`): what a call does while its dispatcher has nothing compiled.

Kept apart from _jit so that the module every kernel imports does not import the interpreter and the background
compiler (which import _jit themselves); the package installs `run` into _jit when it is imported.
"""
from __future__ import annotations

from numba.core.registry import CPUDispatcher

from . import _jit
from . import tier as tiers


def run(dispatcher, args: tuple):
    """dispatcher(*args): interpreted when the tier says so (always in "interpreted"; in "auto" while the function is
    cold on disk and its arrays total at most tier.HOST_INTERPRET_MAX_BYTES, handing it to the background compiler),
    else compiled by numba as usual."""
    tier = tiers.resolve()
    if tier != "compiled":
        sig = _jit.stage_signature(dispatcher, args)
        cold = tier == "auto" and _jit.cache_state(dispatcher, sig) == "cold" and \
            tiers.gm_bytes(args) <= tiers.HOST_INTERPRET_MAX_BYTES
        if cold or tier == "interpreted":
            from . import interpret
            if cold:
                from . import background
                background.submit([(dispatcher, sig)])
            return interpret.call_interpreted(dispatcher.py_func, args)
    return CPUDispatcher.__call__(dispatcher, *args)


_jit.HOST_TIER = run
