"""The interpreted tier: a kernel's stages run as plain Python, from the same source the compiled tier compiles.

Why: a stage compiles in seconds to tens of seconds the first time it meets a chip's tiling and dtypes (numba's
typing and LLVM; the disk cache makes it once per machine). A small call does not need compiled speed: in the
interpreter the same stages finish in a fraction of that, so a fresh user's first call, the quick tour, or a
launch whose kernels are still compiling elsewhere runs at once. Peers that only interpret (Triton's interpreter,
NKI's simulator) start instantly and stay slow; the tiers give both.

How: kernel code is numba code, so as Python it calls three things Python cannot run, and each gets a twin here:
* numba `@intrinsic`s (memcpy on array data, bit casts, atomics, a by-address call): a Python function doing the
  same to the same bytes (`_INTRINSIC_TWINS`);
* `@overload`s that choose an implementation by the argument types (data_copy_pad, cast, get_value, ...): the
  twin types the arguments (numba.typeof), asks the overload's generator for the implementation, as numba's
  typing would, and runs that (memoised per type tuple);
* njit dispatchers a stage calls (host helpers): their Python function.
Everything else a stage reaches is Python already (`@aicore` and `@outline` return the function itself). The twin
of a function is a copy of it over a namespace in which every global and closure value is replaced by its twin:
the original modules stay untouched, and one shared namespace per module keeps the lookups plain dict lookups.

Same results: the interpreter runs the same code over the same memory; the differences between numba's and NumPy's
scalar arithmetic (numba widens float32 with a Python float to float64, NumPy 2 keeps float32; numba wraps integer
overflow) are the known hazard, so every demo case is compared bit for bit, counters and estimate included, against
the compiled tier (tests/ascend_sim/test_interpret.py). Integer overflow and float exceptions are silenced as in
numba's error_model="numpy".
"""
from __future__ import annotations

import ast
import ctypes
import dis
import inspect
import textwrap
import threading
import time
import types

import numpy as np
from numba import typeof
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic
from numba.core.typing.templates import builtin_registry

from ._jit import KERNEL_MODULES
from .core import Core
from .simt import SimtCall, SimtThread

OUR_PACKAGES = ("ascend_sim", "ops", "tiling")

_LOCK = threading.RLock()
_TWINS: dict[int, object] = {}          # id(original) -> its twin
_KEEP: list = []                        # the originals whose ids key _TWINS (an id is only unique while alive)
_MODULES: dict[str, types.ModuleType] = {}     # module name -> its twin module (the shared namespace)


# --- intrinsic twins ------------------------------------------------------------------------------------------
def _bytes_of(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint8) if arr.dtype != np.uint8 else arr


def _memcpy_bytes(dst, dst_off_bytes, src, src_off_bytes, n_bytes):
    if n_bytes > 0:
        d, s = int(dst_off_bytes), int(src_off_bytes)
        _bytes_of(dst)[d:d + int(n_bytes)] = _bytes_of(src)[s:s + int(n_bytes)]


def _data_address(arr):
    return np.int64(arr.__array_interface__["data"][0])


def _store_i64(address, index, value):
    ctypes.c_int64.from_address(int(address) + 8 * int(index)).value = int(value)


def _load_i64(address, index):
    return np.int64(ctypes.c_int64.from_address(int(address) + 8 * int(index)).value)


def _borrow(args):
    return args


_C_CALLS: dict[tuple[int, int], object] = {}


def _call_by_address(fn_address, args):
    """The C function `void f(int64, ...)` at fn_address (a compiled checker entry) called through ctypes."""
    key = (int(fn_address), len(args))
    fn = _C_CALLS.get(key)
    if fn is None:
        fn = _C_CALLS[key] = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * len(args)))(key[0])
    fn(*(int(a) for a in args))


def _i64_pointer(address):
    return ctypes.cast(int(address), ctypes.POINTER(ctypes.c_int64))


def _ub_view(base, like, byte_offset, n_elems):
    dtype = like.dtype if isinstance(like, np.ndarray) else np.dtype(like)
    start = int(byte_offset)
    return _bytes_of(base)[start:start + int(n_elems) * dtype.itemsize].view(dtype)


def _f32_from_bits(bits):
    return np.uint32(bits).view(np.float32)


def _view_f32_as_u32(x):
    return np.float32(x).view(np.uint32)


def _bit_width(x) -> int:
    return x.dtype.itemsize * 8 if isinstance(x, np.generic) else 64


def _leading_zeros(x):
    width = _bit_width(x)
    return np.int64(width - (int(x) & ((1 << width) - 1)).bit_length())


def _trailing_zeros(x):
    width = _bit_width(x)
    v = int(x) & ((1 << width) - 1)
    return np.int64(width if v == 0 else (v & -v).bit_length() - 1)


_STRIPE_LOCKS: dict[int, threading.Lock] = {}


def _spin_lock(lock_addr):
    """The GM stripe's lock: a Python lock per lock word orders interpreted launches on several threads (a launch's
    own cores run one at a time); the word itself is then taken as compiled code takes it, once a compiled holder on
    another thread has let go."""
    address = int(lock_addr)
    guard = _STRIPE_LOCKS.get(address)
    if guard is None:
        guard = _STRIPE_LOCKS.setdefault(address, threading.Lock())
    guard.acquire()
    word = ctypes.c_int32.from_address(address)
    while word.value != 0:
        time.sleep(0)
    word.value = 1


def _unlock(lock_addr):
    address = int(lock_addr)
    ctypes.c_int32.from_address(address).value = 0
    _STRIPE_LOCKS[address].release()


def _f16_bits_to_f32(h):
    return np.uint16(h).view(np.float16).astype(np.float32)


def _f32_to_f16_bits(x):
    return np.float32(x).astype(np.float16).view(np.uint16)


_INTRINSIC_TWINS = {
    "ascend_sim._memory.memcpy_bytes": _memcpy_bytes,
    "ascend_sim._memory.stream_bytes": _memcpy_bytes,
    "ascend_sim._memory.data_address": _data_address,
    "ascend_sim._memory.store_i64": _store_i64,
    "ascend_sim._memory.load_i64": _load_i64,
    "ascend_sim._memory.borrow": _borrow,
    "ascend_sim._memory.call_by_address": _call_by_address,
    "ascend_sim._memory.i64_pointer": _i64_pointer,
    "ascend_sim._memory.ub_view": _ub_view,
    "ascend_sim.dtypes.f32_from_bits": _f32_from_bits,
    "ascend_sim.dtypes.view_f32_as_u32": _view_f32_as_u32,
    "ascend_sim.dtypes.leading_zeros64": _leading_zeros,
    "ascend_sim.atomic.spin_lock": _spin_lock,
    "ascend_sim.atomic.unlock": _unlock,
    "ops._host._f16_bits_to_f32_hw": _f16_bits_to_f32,
    "ops._host._f32_to_f16_bits_hw": _f32_to_f16_bits,
    "numba.cpython.unsafe.numbers.leading_zeros": _leading_zeros,
    "numba.cpython.unsafe.numbers.trailing_zeros": _trailing_zeros,
}


# Scalar device functions called once per element, with the same function in Python ints: in NumPy scalars each step
# costs a microsecond, and a cast of a few thousand elements calls them thousands of times. Checked against the
# compiled originals over every input (bf16) and millions of float32 patterns (tests/ascend_sim/test_interpret.py).
def _bf16_bits_to_f32_bits(h):
    return np.uint32(((int(h) & 0xFFFFFFFF) << 16) & 0xFFFFFFFF)


def _f32_bits_to_bf16_bits_rint(x):
    x = int(x) & 0xFFFFFFFF
    hi = x >> 16
    if (x & 0x7FFFFFFF) > 0x7F800000:       # NaN: quiet, sign and top payload kept
        return np.uint16((hi | 0x0040) & 0xFFFF)
    return np.uint16(((((x + 0x7FFF) & 0xFFFFFFFF) + (hi & 1)) & 0xFFFFFFFF) >> 16)


_FUNCTION_TWINS = {
    "ascend_sim.dtypes.bf16_bits_to_f32_bits": _bf16_bits_to_f32_bits,
    "ascend_sim.dtypes.f32_bits_to_bf16_bits_rint": _f32_bits_to_bf16_bits_rint,
}


def _intrinsic_twin(obj: _Intrinsic):
    defn = obj._defn
    name = f"{defn.__module__}.{defn.__name__}"
    twin = _INTRINSIC_TWINS.get(name)
    if twin is not None:
        return twin

    def missing(*args):
        raise NotImplementedError(f"the interpreted tier has no twin of the numba intrinsic {name}")
    return missing


# --- overload twins -------------------------------------------------------------------------------------------
_GENERATORS: dict[int, object] = {}
_generators_seen = 0


def _overload_generator(fn):
    """The @overload generator registered for fn (not one of aicore's: those return fn's own code), or None."""
    global _generators_seen
    entries = builtin_registry.globals
    if _generators_seen != len(entries):        # registrations only ever append
        for val, ty in entries[_generators_seen:]:
            template = getattr(ty, "templates", (None,))[0]
            generator = getattr(template, "_overload_func", None)
            if generator is not None and generator.__module__ != "ascend_sim._jit" and \
                    _ours(getattr(val, "__module__", None)):      # _jit's generators (aicore) return fn's own code
                _GENERATORS[id(val)] = generator
        _generators_seen = len(entries)
    return _GENERATORS.get(id(fn))


# named tuples whose fields always have the same types (the core, a SIMT launch and thread): their class is their kind
_FIXED_KINDS = frozenset((Core, SimtCall, SimtThread))
_TUPLE_KINDS: dict[int, tuple] = {}     # id(tuple) -> (the tuple, its kind): stages pass the same tuples often


def _kind(a):
    """A cheap stand-in for numba.typeof(a) as a dictionary key: what an overload's choice can depend on (the
    element type, rank and layout of arrays, the types inside tuples; the type of scalars)."""
    if isinstance(a, np.ndarray):       # no generator here looks at writability: leave it out (it costs)
        return a.dtype, a.ndim, a.flags.c_contiguous
    if isinstance(a, tuple):
        if type(a) in _FIXED_KINDS:
            return type(a)
        hit = _TUPLE_KINDS.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        kind = type(a), tuple(map(_kind, a))
        if len(_TUPLE_KINDS) >= 4096:
            _TUPLE_KINDS.clear()
        _TUPLE_KINDS[id(a)] = (a, kind)
        return kind
    return type(a)


def _inspected(generator) -> tuple[int, ...]:
    """Positions of the generator's parameters its own code reads: only their types can steer its choice (the
    others are passed through to the implementation untouched), so only they key the memo of choices."""
    code = generator.__code__
    params = code.co_varnames[:code.co_argcount]
    read = {ins.argval for ins in dis.get_instructions(code)
            if ins.opname in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST_CHECK")}
    return tuple(i for i, name in enumerate(params) if name in read)


def _overload_twin(generator, name: str):
    """A function that calls the implementation the @overload `generator` picks for its arguments' numba types, as
    typing would; the choice is memoised on the kinds of the arguments the generator inspects (one, mostly: the
    hottest calls of an interpreted kernel go through here, so that case has its own short path)."""
    impls: dict = {}
    inspected = _inspected(generator)

    def choose(args, kinds):
        chosen = generator(*(typeof(a) for a in args))
        if chosen is None:
            raise TypeError(f"{name}: no implementation for argument types {tuple(typeof(a) for a in args)}")
        impl = impls[kinds] = twin(chosen)
        return impl

    if len(inspected) == 1:
        (at,) = inspected

        def call_one(*args):
            kinds = _kind(args[at]) if at < len(args) else None     # None: a parameter left at its default
            impl = impls.get(kinds)
            if impl is None:
                impl = choose(args, kinds)
            return impl(*args)
        return call_one

    def call(*args):
        kinds = tuple([_kind(args[i]) for i in inspected if i < len(args)])
        impl = impls.get(kinds)
        if impl is None:
            impl = choose(args, kinds)
        return impl(*args)
    return call


# --- function and module twins --------------------------------------------------------------------------------
def _ours(module_name) -> bool:
    """Whether a module holds kernel code: ours, or any module that defines @aicore functions or stages."""
    return isinstance(module_name, str) and (module_name.split(".")[0] in OUR_PACKAGES or module_name in KERNEL_MODULES)


def twin(obj):
    """What runs in place of `obj` in the interpreter (obj itself where Python already runs it)."""
    key = id(obj)
    found = _TWINS.get(key)
    if found is not None:
        return found
    with _LOCK:
        found = _TWINS.get(key)
        if found is None:
            found = _make_twin(obj)
            _TWINS[key] = found
            _KEEP.append(obj)
    return found


def _make_twin(obj):
    if isinstance(obj, Dispatcher):
        return twin(obj.py_func)
    if isinstance(obj, _Intrinsic):
        return _intrinsic_twin(obj)
    if isinstance(obj, types.ModuleType):
        return _module_twin(obj) if _ours(obj.__name__) else obj
    if isinstance(obj, types.FunctionType):
        fast = _FUNCTION_TWINS.get(f"{obj.__module__}.{obj.__qualname__}")
        if fast is not None:
            return fast
        generator = _overload_generator(obj)
        if generator is not None:
            return _overload_twin(generator, obj.__qualname__)
        if _ours(obj.__module__) or obj.__closure__:
            return _function_twin(obj)
    return obj


def _module_twin(module: types.ModuleType) -> types.ModuleType:
    copy = _MODULES.get(module.__name__)
    if copy is None:
        copy = _MODULES[module.__name__] = types.ModuleType(module.__name__)
        namespace = copy.__dict__
        for name, value in list(vars(module).items()):
            namespace[name] = value if name.startswith("__") else _lazy(value, namespace, name)
        for name, value in _NUMBA_BUILTINS.items():
            namespace.setdefault(name, value)
    return copy


def _numba_typed(value):
    """A module-level constant as numba sees it in compiled code: an int is an int64, a float a float64, a tuple of
    ints a tuple of int64. NumPy 2 treats a Python int or float as "weak" (np.int32(5) + 1 stays int32, np.float32(x)
    * 0.5 stays float32), while numba types it int64 / float64 (int64 / float64 results): as NumPy scalars they
    promote the way numba's types do."""
    kind = type(value)
    if kind is int:
        return np.int64(value) if -(1 << 63) <= value < (1 << 63) else np.uint64(value)
    if kind is float:
        return np.float64(value)
    if kind is tuple and value and all(type(v) is int for v in value):
        return tuple(_numba_typed(v) for v in value)
    return value


def _range(*bounds):
    """range() whose numbers are int64, as numba's loop variables are."""
    return map(np.int64, range(*(int(b) for b in bounds)))


def _len(x):
    return np.int64(len(x))


def _int(x=0):
    return np.int64(int(x))


def _float(x=0.0):
    return np.float64(float(x))


# builtins whose results numba types int64 / float64; a twin namespace holds these in their place
_NUMBA_BUILTINS = {"range": _range, "len": _len, "int": _int, "float": _float}


def _lazy(value, home, key):
    """Functions, dispatchers and intrinsics are replaced by their twins on first call, not now (the stand-in sits
    at home[key] in a namespace, or in the closure cell `home`): a module's twin would otherwise build the twin of
    everything it reaches, most of which a stage never calls."""
    if isinstance(value, (types.FunctionType, Dispatcher, _Intrinsic)):
        return _Deferred(value, home, key)
    if isinstance(value, types.ModuleType) and _ours(value.__name__):
        return _module_twin(value)
    return _numba_typed(value)


class _Deferred:
    """Stands for a function in a twin namespace (or closure cell) until its first call, then puts the twin in its
    place, so later calls look up the twin directly."""

    __slots__ = ("original", "home", "key", "resolved")

    def __init__(self, original, home, key):
        self.original, self.home, self.key, self.resolved = original, home, key, None

    def __call__(self, *args, **kwargs):
        target = self.resolved
        if target is None:
            target = self.resolved = twin(self.original)
            if isinstance(self.home, dict):
                self.home[self.key] = target
            else:
                self.home.cell_contents = target
        return target(*args, **kwargs)

    def __getattr__(self, name):        # e.g. `fn.py_func`
        return getattr(self.original, name)


_LITERAL_NAMES: dict[int, dict] = {}    # id(twin namespace) -> {(type, repr): the name its literal is bound to}


class _TypedLiterals(ast.NodeTransformer):
    """Replaces every int and float literal by a name bound to the same value as a NumPy int64 / float64 (numba types
    literals so; see _numba_typed)."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def visit_Constant(self, node):
        value = _numba_typed(node.value)
        if value is node.value:
            return node
        names = _LITERAL_NAMES.setdefault(id(self.namespace), {})
        key = (type(node.value), repr(node.value))        # repr: 0.0 and -0.0 are different literals
        name = names.get(key)
        if name is None:
            name = names[key] = f"__asim_{type(node.value).__name__}_{len(names)}"
            self.namespace[name] = value
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)


def _numba_code(fn, namespace: dict):
    """fn's code compiled again with its literals numba-typed (_TypedLiterals), or fn's own code where its source is
    not at hand (then only the namespace's constants are typed)."""
    code = fn.__code__
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return code
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef) or definition.name != code.co_name:
        return code
    definition.decorator_list = []
    _TypedLiterals(namespace).visit(definition)
    # compiled inside a function taking fn's free variables, so the code object has the same closure layout
    outer = ast.FunctionDef(name="__asim_outer", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=v) for v in code.co_freevars], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[definition, ast.Return(value=ast.Name(id=definition.name, ctx=ast.Load()))], decorator_list=[])
    module = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, code.co_firstlineno - definition.lineno)
    compiled = compile(module, code.co_filename, "exec")
    outer_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next((c for c in outer_code.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name),
                 None)
    return inner if inner is not None and inner.co_freevars == code.co_freevars else code


def _function_twin(fn: types.FunctionType) -> types.FunctionType:
    module = fn.__module__
    if _ours(module) and fn.__globals__ is vars(__import__(module, fromlist=["_"])):
        namespace = _module_twin(__import__(module, fromlist=["_"])).__dict__
    else:                   # exec'd code (a stage entry, an outlined typer): its own globals, twinned
        namespace = {}
        for name, value in fn.__globals__.items():
            namespace[name] = value if name.startswith("__") else _lazy(value, namespace, name)
        namespace.setdefault("__builtins__", __builtins__)
        for name, value in _NUMBA_BUILTINS.items():
            namespace.setdefault(name, value)
    closure = None
    if fn.__closure__:
        cells = []
        for cell in fn.__closure__:
            new = types.CellType()
            try:
                new.cell_contents = _lazy(cell.cell_contents, new, None)
            except ValueError:      # an empty cell (a name bound later)
                pass
            cells.append(new)
        closure = tuple(cells)
    defaults = tuple(_numba_typed(d) for d in fn.__defaults__) if fn.__defaults__ else fn.__defaults__
    copy = types.FunctionType(_numba_code(fn, namespace), namespace, fn.__name__, defaults, closure)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    return copy


def _numba_arg(a):
    """A stage argument with its Python ints and floats (the core's index, tiling fields) as numba types them."""
    kind = type(a)
    if kind is int or kind is float:
        return _numba_typed(a)
    if isinstance(a, tuple) and kind is not tuple and any(type(x) in (int, float) or isinstance(x, tuple) for x in a):
        return kind(*[_numba_arg(x) for x in a])       # a named tuple (the core, a tiling struct)
    if kind is tuple:
        return tuple([_numba_arg(x) for x in a])
    return a


def call_interpreted(fn, args: tuple):
    """fn(*args) through fn's twin, with float and integer exceptions silenced as numba's error_model="numpy" does."""
    with np.errstate(all="ignore"):
        return twin(fn)(*[_numba_arg(a) for a in args])


_STAGE_TWINS: dict[int, object] = {}


def stage_twin(stage: Dispatcher):
    """The Python function the interpreted tier runs for a stage dispatcher (made by _jit.global_aicore)."""
    found = _STAGE_TWINS.get(id(stage))
    if found is not None:
        return found
    body = getattr(stage, "stage_body", None)
    if body is None:
        raise TypeError(f"{stage!r} is not a stage entry (no stage_body)")
    inner = twin(body)

    def run(*args):
        with np.errstate(all="ignore"):     # numba's error_model="numpy": no exception, no warning
            return inner(*[_numba_arg(a) for a in args])
    run.__qualname__ = f"interpreted {body.__qualname__}"
    _STAGE_TWINS[id(stage)] = run
    _KEEP.append(stage)
    return run
