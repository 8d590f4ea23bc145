"""One compilation per function and signature across processes sharing numba's disk cache.

Two processes (pytest-xdist workers, the demo's compile worker, two users of one installation) that need the same
cached function at the same time both found no cache entry, both compiled it and both saved it. Worse, numba saves
an entry by reading the function's index, adding the key and writing the index back: two processes saving
different signatures of one function at once could drop one entry, or both pick the same data-file name, so an
index could for a moment name a data file holding the other signature's code.

`install()` (called once when ascend_sim._jit is imported) wraps three numba methods:
* `Dispatcher.compile` of a function cached on disk (our stages and device functions, the ops' host helpers) and
  `CFunc.compile` (the outlined variants) take an exclusive file lock per (cache index, signature) before they look
  into the disk cache: the second process waits while the first compiles and saves, then loads the entry instead
  of compiling it again;
* `IndexDataCacheFile.save` takes a lock per index file, so concurrent saves of one function's signatures keep
  every entry and never share a data file.

The locks are `flock` locks on empty files next to the index (`<index>.<sig hash>.lock`, `<index>.lock`). They are
taken only while holding numba's global compiler lock, so within a process one thread at a time holds any of them
(a thread never waits for a file lock that another thread of its own process holds, which could deadlock against
the compiler lock), and a thread that needs a lock it already holds passes. A lock is released when its holder
finishes or dies. A compilation waits for another process at most LOCK_WAIT_S, then compiles anyway: a hung
process costs time, never correctness. Where flock is unavailable (Windows) nothing is locked.
"""
from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager

try:
    import fcntl
except ImportError:     # pragma: no cover - Windows: no cross-process locking, numba's behaviour as before
    fcntl = None

from numba.core import dispatcher as _dispatcher
from numba.core import sigutils
from numba.core.caching import IndexDataCacheFile
from numba.core.ccallback import CFunc
from numba.core.compiler_lock import global_compiler_lock

LOCK_WAIT_S = 900.0
_POLL_S = 0.02

_HELD: dict[str, int] = {}      # lock path -> depth, for the thread holding the compiler lock
_FILES: dict[str, int] = {}     # lock path -> open descriptor
STATS = {"waited": 0, "wait_s": 0.0}


@contextmanager
def file_lock(path: str):
    """An exclusive flock on `path` (created if missing). Call only while holding numba's global compiler lock."""
    if fcntl is None or path in _HELD:
        _HELD[path] = _HELD.get(path, 0) + 1
        try:
            yield
        finally:
            _release(path, None)
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:         # a read-only cache directory: numba will not save there either
        fd = None
    if fd is not None:
        _acquire(fd)
    _HELD[path] = 1
    try:
        yield
    finally:
        _release(path, fd)


def _acquire(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except OSError:
        pass
    start = time.monotonic()
    STATS["waited"] += 1
    while time.monotonic() - start < LOCK_WAIT_S:
        time.sleep(_POLL_S)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            continue
    STATS["wait_s"] += time.monotonic() - start


def _release(path: str, fd) -> None:
    depth = _HELD[path] - 1
    if depth:
        _HELD[path] = depth
        return
    del _HELD[path]
    if fd is not None:
        os.close(fd)        # closing the descriptor drops its flock


def _index_path(cache) -> str | None:
    cache_file = getattr(cache, "_cache_file", None)
    return getattr(cache_file, "_index_path", None)


def _signature_lock(index_path: str, args) -> str:
    digest = hashlib.blake2b(repr(tuple(args)).encode(), digest_size=6).hexdigest()
    return f"{index_path}.{digest}.lock"


_ORIGINAL = {}


def _dispatcher_compile(self, sig):
    original = _ORIGINAL["dispatcher"]
    index = _index_path(self._cache)
    if index is None:
        return original(self, sig)
    with global_compiler_lock:
        args, _ = sigutils.normalize_signature(sig)
        if tuple(args) in self.overloads:
            return original(self, sig)
        with file_lock(_signature_lock(index, args)):
            return original(self, sig)


def _cfunc_compile(self):
    original = _ORIGINAL["cfunc"]
    index = _index_path(self._cache)
    if index is None:
        return original(self)
    with global_compiler_lock, file_lock(_signature_lock(index, self._sig.args)):
        return original(self)


def _save(self, key, data):
    with global_compiler_lock, file_lock(self._index_path + ".lock"):
        return _ORIGINAL["save"](self, key, data)


def install() -> None:
    """Wrap numba's compile and cache-save methods (once per process)."""
    if _ORIGINAL:
        return
    _ORIGINAL["dispatcher"] = _dispatcher.Dispatcher.compile
    _ORIGINAL["cfunc"] = CFunc.compile
    _ORIGINAL["save"] = IndexDataCacheFile.save
    _dispatcher.Dispatcher.compile = _dispatcher_compile
    CFunc.compile = _cfunc_compile
    IndexDataCacheFile.save = _save
