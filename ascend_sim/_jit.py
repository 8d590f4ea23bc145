"""numba decorators for kernel code, named after AscendC's function qualifiers.

* `aicore`: a device function (`__aicore__ inline`), callable from numba code. It is registered
  as an overload rather than an @njit dispatcher: a dispatcher compiles a fresh copy for every
  distinct literal argument (each `set_flag(c, V_MTE2, 4)` call site would be its own function),
  an overload types arguments as plain ints first, so each device function compiles once per
  real signature. The kernels that call them are cached on disk as a whole.
* `global_aicore`: a kernel stage entry (`__global__ __aicore__`): an @njit dispatcher the
  launcher calls from its threads; cached on disk, GIL released.

Kernel code never raises: faults are recorded in the core's state (see faults.py). With
error_model="numpy" integer division has no hidden raise path either. Code without raise
paths lets numba drop the reference-count updates around every inlined call, which is what
makes an AscendC call cost a few nanoseconds.
"""
from __future__ import annotations

from numba import njit
from numba.extending import register_jitable

from ._memory import borrow

DEVICE_JIT_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")


def aicore(fn):
    return register_jitable(**DEVICE_JIT_OPTIONS)(fn)


def global_aicore(fn):
    """A stage entry: the launcher's call lands here, every array argument is borrowed (see
    _memory.borrow: no reference counting inside the kernel) and the body runs as a device function."""
    body = aicore(fn)

    def entry(*args):
        return body(*borrow(args))

    entry.__name__ = fn.__name__
    # numba names the cache index after the qualname: keep entries of equally named stages apart
    entry.__qualname__ = f"{fn.__module__.replace('.', '_')}__{fn.__qualname__}"
    entry.__doc__ = fn.__doc__
    return njit(**DEVICE_JIT_OPTIONS)(entry)
