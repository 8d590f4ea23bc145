"""The checker's entry points as C functions (numba cfunc), compiled once and called by kernels by address.

check.ub / vector_access / gm_read / gm_write, which kernels inline, only test the mode and call these through the
addresses that check.attach stores in the core state; the checks themselves (shadow.check_*) are compiled here,
once per process or loaded from the disk cache, instead of inside every kernel stage. Importing this module
compiles them: check.attach does so on the first checked launch, under Python's import lock, so concurrent
first launches compile once.

Each entry gets the core state as (address, length) and rebuilds the one field the checks use.
"""
from __future__ import annotations

from collections import namedtuple

from numba import carray, cfunc
from numba import types as nt

from . import shadow
from ._jit import function_copy, source_stamp
from ._memory import i64_pointer

StateOnly = namedtuple("StateOnly", ["state"])     # the part of a Core the checks read and write


def _ub(state_address, state_len, call, pipe, off, nbytes, write):
    shadow.check_ub(StateOnly(carray(i64_pointer(state_address), state_len)), call, pipe, off, nbytes, write != 0)


def _vector_access(state_address, state_len, call, d, d_bytes, s0, s0_bytes, s1, s1_bytes):
    shadow.check_vector_access(StateOnly(carray(i64_pointer(state_address), state_len)), call, d, d_bytes, s0,
                               s0_bytes, s1, s1_bytes)


def _gm_read(state_address, state_len, call, pipe, address, rows, row_bytes, gap):
    state = carray(i64_pointer(state_address), state_len)
    shadow.check_gm_read(StateOnly(state), shadow.workspace_map(state), call, pipe, address, rows, row_bytes, gap)


def _gm_write(state_address, state_len, call, pipe, address, rows, row_bytes, gap):
    state = carray(i64_pointer(state_address), state_len)
    shadow.check_gm_write(StateOnly(state), shadow.workspace_map(state), call, pipe, address, rows, row_bytes, gap)


def _compile(fn, n_args: int):
    """fn as a cached C function `void fn(int64 * n_args)`, named with the source stamp of this module and all it
    imports (numba stamps a cache entry with fn's own file only; see _jit.aicore)."""
    impl = function_copy(fn, f"{fn.__qualname__}__{source_stamp(__name__)}")
    return cfunc(nt.void(*([nt.int64] * n_args)), cache=True, error_model="numpy")(impl)


_COMPILED = (_compile(_ub, 7), _compile(_vector_access, 9), _compile(_gm_read, 8), _compile(_gm_write, 8))
# in the order of layout.CHK_FN_UB, CHK_FN_VECTOR, CHK_FN_GM_READ, CHK_FN_GM_WRITE
ENTRIES = tuple(f.address for f in _COMPILED)
