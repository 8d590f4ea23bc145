"""numba decorators for kernel code, named after AscendC's function qualifiers.

* `aicore`: a device function (`__aicore__ inline`), callable from numba code. It is registered
  as an overload rather than an @njit dispatcher: a dispatcher compiles a fresh copy for every
  distinct literal argument (each `set_flag(c, V_MTE2, 4)` call site would be its own function),
  an overload types arguments as plain ints first, so each device function compiles once per
  real signature and process. The kernels that call them are cached on disk as a whole.
* `global_aicore`: a kernel stage entry (`__global__ __aicore__`): an @njit dispatcher the
  launcher calls from its threads; cached on disk, GIL released.

Kernel code never raises: faults are recorded in the core's state (see faults.py). With
error_model="numpy" integer division has no hidden raise path either. Code without raise
paths lets numba drop the reference-count updates around every inlined call, which is what
makes an AscendC call cost a few nanoseconds.

Two properties of the disk cache are ours to keep:
* numba stamps a cached function with its own source file only, but a stage inlines device
  functions from many modules. Each stage entry therefore carries a stamp of every source file
  its module imports from our packages (`source_stamp`), so editing ascend_sim/datacopy.py or
  upgrading the package recompiles the kernels that inline it instead of running stale code.
* Processes sharing the disk cache (pytest-xdist workers, the demo's compile worker) compile each function and
  signature once between them: the second waits for the first and loads its entry (_cache_lock).
* Stages compile at LLVM -O2 (`KERNEL_OPT_LEVEL`): on these kernels it compiles about 28 %
  faster than numba's default -O3 and the kernels run as fast (benchmarks within noise).
"""
from __future__ import annotations

import ast
import atexit
import hashlib
import inspect
import json
import os
import sys
import time
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from numba import njit
from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher
from numba.extending import overload

from . import _cache_lock
from ._memory import borrow

_cache_lock.install()       # one compilation per function and signature across processes sharing the disk cache

STAGE_JIT_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")
# Device functions are only ever called from numba code: no Python or C-callable wrappers to build.
# The @overload implementations of the AscendC calls are not cached on disk (numba would stamp them with
# their own file only); aicore functions are, under a name that carries source_stamp (see aicore).
DEVICE_JIT_OPTIONS = dict(STAGE_JIT_OPTIONS, cache=False, no_cpython_wrapper=True, no_cfunc_wrapper=True)
_CACHED_DEVICE_OPTIONS = dict(DEVICE_JIT_OPTIONS, cache=True)


KERNEL_MODULES: set[str] = set()
"""Modules defining @aicore functions or stages, whatever their package (a user's kernel, the tests' harness): the
interpreted tier (interpret.py) runs their functions as kernel code."""


def aicore(fn=None, *, cached: bool = True):
    """Register `fn` as a device function (what register_jitable does), compiled from a copy whose
    qualified name carries the source stamp of fn's module: numba names the disk-cache entry after it and
    stamps it with fn's file only, so an edit of anything it may inline from another module starts a new
    entry instead of loading stale code. Cached device code lets a second process reuse what the first
    compiled; cached=False for code only ever compiled into something cached itself (an outlined variant's body)."""
    if fn is None:
        return lambda f: aicore(f, cached=cached)
    KERNEL_MODULES.add(fn.__module__)
    impl = function_copy(fn, f"{fn.__qualname__}__{source_stamp(fn.__module__)}")

    @overload(fn, jit_options=_CACHED_DEVICE_OPTIONS if cached else DEVICE_JIT_OPTIONS, strict=False)
    def _typed(*args, **kwargs):
        return impl

    return fn


def function_copy(fn, qualname: str):
    """A new function object with fn's code, globals, defaults and closure under another qualified name: numba
    keys its compilations and disk-cache entries on the function object and its qualname, so a copy compiles
    (and caches) apart from fn."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = qualname
    copy.__module__ = fn.__module__
    return copy


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
    # compiled under the stage's own file and line (numba's disk cache locates it there); `stamp` is a
    # closure variable, and numba keys a cached closure on its cell contents
    source = "\n" * (fn.__code__.co_firstlineno - 2) + (
        f"def make_entry(stamp):\n"
        f"    def entry({arglist}):\n"
        f"        stamp\n"
        f"        return body(*borrow(({arglist},)))\n"
        f"    return entry\n")
    exec(compile(source, fn.__code__.co_filename, "exec"), namespace)  # noqa: S102
    entry = namespace["make_entry"](source_stamp(fn.__module__))
    entry.__name__ = fn.__name__
    # numba names the cache index after the qualname: keep entries of equally named stages apart
    entry.__qualname__ = f"{fn.__module__.replace('.', '_')}__{fn.__qualname__}"
    entry.__doc__ = fn.__doc__
    entry.__module__ = fn.__module__
    stage = njit(**STAGE_JIT_OPTIONS)(entry)
    stage.stage_body = fn           # what the interpreted tier runs (interpret.stage_twin)
    return stage


HOST_TIER: Callable | None = None
"""`run(dispatcher, args)` for a host_jit call while its dispatcher has nothing compiled (host_tier.py installs it)."""


class HostDispatcher(CPUDispatcher):
    """An njit dispatcher for host code (called from Python, or from other numba code) that follows the execution
    tier (tier.py) while it has nothing compiled: a call whose function is still cold on disk runs its Python
    function on small arguments (in tier "auto" it is then compiled in the background; host_tier.py), so a first
    call does not wait for numba. Once anything is compiled for it, numba dispatches as for any njit function."""

    def __call__(self, *args, **kwargs):
        if self.overloads or kwargs or HOST_TIER is None:
            return super().__call__(*args, **kwargs)
        return HOST_TIER(self, args)


def host_jit(fn=None, **options):
    """`@njit(cache=True, nogil=True, **options)` for host helpers, as a HostDispatcher (see there)."""
    if fn is None:
        return lambda f: host_jit(f, **options)
    dispatcher = njit(cache=True, nogil=True, **options)(fn)
    dispatcher.__class__ = HostDispatcher       # same instance layout: only __call__ differs
    return dispatcher


_STAMPS: dict[str, str] = {}


def source_stamp(module_name: str) -> str:
    """A hash of the source files of `stamped_modules(module_name)`."""
    if module_name not in _STAMPS:
        digest = hashlib.sha256()
        for name, path in sorted(stamped_modules(module_name).items()):
            digest.update(name.encode())
            digest.update(Path(path).read_bytes())
        _STAMPS[module_name] = digest.hexdigest()[:16]
    return _STAMPS[module_name]


def stamped_modules(module_name: str) -> dict[str, str]:
    """`module_name` and every module of ascend_sim or of its own top-level package that it reaches through
    its globals or its import statements (and theirs), as {name: source file}: what a stage defined there may
    inline. The import statements matter for constants: `from .core import QUE_BASE` leaves an int in the
    module's globals, which names no module, yet the compiled code holds its value."""
    roots = {__name__.split(".")[0], module_name.split(".")[0]}
    seen: dict[str, str] = {}
    todo = [module_name]
    while todo:
        name = todo.pop()
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if name in seen or module is None or path is None:
            continue
        seen[name] = path
        owners = set(_imported_modules(module, path))
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType) and value.__name__.startswith(name + ".") and \
                    value.__name__ not in owners:
                # a package holds every submodule anyone imported so far as an attribute: only those its own
                # import statements name count, so the stamp does not depend on what was imported before
                continue
            value = getattr(value, "py_func", value)          # numba dispatchers: the Python function
            owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if isinstance(owner, str):
                owners.add(owner)
        todo += [o for o in owners if o.split(".")[0] in roots and o not in seen]
    return seen


def _imported_modules(module, path: str) -> list[str]:
    """Absolute names of the modules `module`'s import statements name (relative ones resolved) that are
    loaded now."""
    return [n for n in _import_statement_names(path, module.__package__ or "") if n in sys.modules]


_IMPORT_NAMES: dict[tuple, tuple[str, ...]] = {}
_IMPORT_NAMES_FILE_VERSION = 1
_import_names_loaded = False
_import_names_added = False


def _import_names_file() -> Path:
    """Where the parsed import statements persist between processes: beside numba's cache (NUMBA_CACHE_DIR, else
    ascend_sim's __pycache__), so a fresh process parses no source file it parsed before."""
    return cache_root() / f"ascend_sim_import_names.v{_IMPORT_NAMES_FILE_VERSION}.json"


def cache_root() -> Path:
    """Where our files beside numba's disk cache live: NUMBA_CACHE_DIR when set, else ascend_sim's __pycache__."""
    return Path(numba_config.CACHE_DIR) if numba_config.CACHE_DIR else Path(__file__).parent / "__pycache__"


def _load_import_names() -> None:
    global _import_names_loaded
    _import_names_loaded = True
    try:
        rows = json.loads(_import_names_file().read_text(encoding="utf-8"))
        for path, package, mtime_ns, size, names in rows:
            _IMPORT_NAMES.setdefault((path, package, mtime_ns, size), tuple(names))
    except (OSError, ValueError, TypeError):
        pass            # no file yet, or one from another layout: parse and write it again


def save_import_names() -> None:
    """Write the memo of _import_statement_names for the next process (at exit, when this process parsed
    something; atomic, so concurrent processes leave one complete file). Only entries that still describe their
    file on disk are written: an edited file's old entry goes, so the memo does not grow with every edit."""
    global _import_names_added
    if not _import_names_added:
        return
    _import_names_added = False
    rows = []
    for (path, package, mtime_ns, size), names in _IMPORT_NAMES.items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_mtime_ns, st.st_size) == (mtime_ns, size):
            rows.append([path, package, mtime_ns, size, list(names)])
    target = _import_names_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        pass            # a read-only install: parse again next time


atexit.register(save_import_names)


def _import_statement_names(path: str, package: str) -> tuple[str, ...]:
    """Every module name the import statements of the source file `path` name, parsed once per version of
    the file: each stamped module reaches most of ascend_sim, so without the memo `import ops` parsed the
    same files about 750 times (7 of its 9 s). The key holds the file's mtime and size, so an edited file
    is parsed again; the memo persists on disk (save_import_names), since parsing the 250 files a first
    kernel reaches costs a fresh process about 0.4 s."""
    global _import_names_added
    if not _import_names_loaded:
        _load_import_names()
    try:
        st = os.stat(path)
    except OSError:
        return ()
    key = (path, package, st.st_mtime_ns, st.st_size)
    if key not in _IMPORT_NAMES:
        _IMPORT_NAMES[key] = _parse_import_names(path, package)
        _import_names_added = True
    return _IMPORT_NAMES[key]


def _parse_import_names(path: str, package: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ()
    names = []
    for node in _outside_functions(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]      # `from . import timeline` names a module
    return tuple(names)


def _outside_functions(tree):
    """Every node of `tree` except those inside a function body: an import in a function runs in Python when the
    function is called (numba code has none), so it brings nothing a stage inlines, and whether its module
    happens to be loaded when a stage is defined must not change the stamp."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [n for n in ast.iter_child_nodes(node)
                 if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


KERNEL_OPT_LEVEL = 2

AFTER_COMPILE: list[Callable] = []
"""Functions of a stage's compiled (or disk-loaded) code library that ensure_compiled calls before the stage
runs (registered by _outline, which this module must not import)."""


@contextmanager
def _kernel_opt_level():
    """numba's LLVM optimisation level set to KERNEL_OPT_LEVEL while our stages compile. Holding numba's
    global compiler lock keeps any other compilation in the process from seeing the change."""
    with global_compiler_lock:
        saved = numba_config.OPT
        numba_config.OPT = type(saved)(KERNEL_OPT_LEVEL)
        try:
            yield
        finally:
            numba_config.OPT = saved


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


def compile_signature(stage, sig: tuple) -> None:
    """Compile `stage` for the numba signature `sig` (or load it from the disk cache), with every outlined variant
    it calls: what a launch needs before its cores start."""
    with _kernel_opt_level():
        stage.compile(sig)
        for hook in AFTER_COMPILE:      # e.g. _outline.resolve_library: the variants a cached stage calls
            hook(stage.overloads[sig].library)


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
        cold = cache_state(stage, sig) == "cold"
        if cold and on_compile is not None:
            on_compile("start", stage.__name__, 0.0)
        compile_signature(stage, sig)
        took = time.perf_counter() - start
        spent += took
        if cold and on_compile is not None:
            on_compile("done", stage.__name__, took)
    return spent
