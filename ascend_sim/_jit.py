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

import inspect
import threading
import time
from typing import Callable, Iterable

from numba import njit
from numba.extending import register_jitable

from ._memory import borrow

DEVICE_JIT_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")
# device functions are only ever called from numba code: no Python or C-callable wrappers to build
_DEVICE_ONLY = dict(DEVICE_JIT_OPTIONS, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def aicore(fn):
    return register_jitable(**_DEVICE_ONLY)(fn)


def global_aicore(fn):
    """A stage entry: the launcher's call lands here, every array argument is borrowed (see
    _memory.borrow: no reference counting inside the kernel) and the body runs as a device function.

    The entry takes the stage's own parameters (not *args), so its numba signature is the plain
    argument types and the launcher can compile it ahead of the first call (ensure_compiled).
    """
    body = aicore(fn)
    params = list(inspect.signature(fn).parameters)
    arglist = ", ".join(params)
    namespace = {"body": body, "borrow": borrow}
    # compiled under the stage's own file and line: numba's disk cache locates and stamps it there
    source = "\n" * (fn.__code__.co_firstlineno - 1) + f"def entry({arglist}):\n    return body(*borrow(({arglist},)))\n"
    exec(compile(source, fn.__code__.co_filename, "exec"), namespace)  # noqa: S102
    entry = namespace["entry"]
    entry.__name__ = fn.__name__
    # numba names the cache index after the qualname: keep entries of equally named stages apart
    entry.__qualname__ = f"{fn.__module__.replace('.', '_')}__{fn.__qualname__}"
    entry.__doc__ = fn.__doc__
    entry.__module__ = fn.__module__
    return njit(**DEVICE_JIT_OPTIONS)(entry)


def stage_signature(stage, args: tuple) -> tuple:
    """The numba argument types a call `stage(*args)` dispatches on."""
    return tuple(stage.typeof_pyval(a) for a in args)


def cache_state(stage, signature: tuple) -> str:
    """"memory" (compiled in this process), "disk" (numba's cache has it) or "cold" (must be compiled).

    Reads numba's cache index through its internal API; if that ever changes, a stage counts as cold
    (the worst that happens is a "compiling" message for a stage that loads quickly).
    """
    if signature in stage.overloads:
        return "memory"
    try:
        cache = stage._cache
        key = cache._index_key(signature, stage.targetctx.codegen())
        return "disk" if key in cache._cache_file._load_index() else "cold"
    except Exception:  # noqa: BLE001 - a private API; absence only costs the message's accuracy
        return "cold"


_COMPILE_LOCK = threading.Lock()   # one stage compiles at a time (numba holds a global lock anyway)


def ensure_compiled(calls: Iterable[tuple], on_compile: Callable | None = None) -> float:
    """Compile (or load from the disk cache) every `(stage, args)` before a launch times its cores.

    Returns the seconds spent; `on_compile("start" | "done", stage_name, seconds)` is told of each
    stage that was not yet in memory and had no disk-cache entry, so a front end can say that a
    first run is compiling. Stages already in memory cost one type lookup.
    """
    spent = 0.0
    seen = set()
    for stage, args in calls:
        sig = stage_signature(stage, args)
        if (stage, sig) in seen or sig in stage.overloads:
            continue
        seen.add((stage, sig))
        start = time.perf_counter()
        with _COMPILE_LOCK:
            cold = cache_state(stage, sig) == "cold"
            if cold and on_compile is not None:
                on_compile("start", stage.__name__, 0.0)
            stage.compile(sig)
        took = time.perf_counter() - start
        spent += took
        if cold and on_compile is not None:
            on_compile("done", stage.__name__, took)
    return spent
