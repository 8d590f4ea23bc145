"""Machine-model calls compiled once and called by address (`@outline`).

Why: numba links every device function a stage calls into the stage's own LLVM module, then optimises and
generates machine code for all of it again, for every stage. A stage of twenty lines carried the whole of
DataCopyPad, the queues, the vector instructions and the timeline, and compiling it cost seconds of LLVM time
that did not depend on the stage's own code.

How: a call `f(c, ...)` of an outlined function in numba code
* packs its arguments into int64 words on the stack: an array as its data address and length, a tuple or
  namedtuple field by field, an int, bool or float as one word (floats by their bits);
* calls `void variant(int64 *words)`, a C function compiled once per process for f and those argument
  kinds (and cached on disk), which rebuilds the same arguments over the same memory (numba.carray, the same
  namedtuple classes) and runs f's body with everything it calls inlined;
* finds the variant's address in a process-wide table keyed by the 64-bit hash of the variant's descriptor
  (module, function, source stamp, argument kinds); the table's address is in the core state, so the stage's
  code holds no address and stays cacheable on disk.

A variant missing from the table (a stage loaded from the disk cache in a fresh process) is resolved before
the launch: `resolve_library` reads the descriptors the stage's module names (each call site leaves one as a
named constant) and loads their variants. Should a call site still find none (a stage dispatcher called
directly, bypassing ensure_compiled), the call resolves it through a callback into Python once.

Only void functions whose first argument is the Core are outlined. A call whose arguments include anything
but 1-D C-contiguous arrays of numbers, (named) tuples, ints, bools, floats and None is compiled inline, as an
@aicore call is: the same result, only without the compile saving.
"""
from __future__ import annotations

import ast
import ctypes
import hashlib
import inspect
import sys
import textwrap
import threading

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, types
from numba.core import cgutils
from numba.core.imputils import lower_builtin
from numba.core.typing import signature
from numba.extending import intrinsic, type_callable

from ._jit import AFTER_COMPILE, aicore, function_copy, source_stamp
from .layout import ERR_BASE, F_OUTLINE, OUTLINE_RESOLVER, OUTLINE_TABLE

TABLE_SLOTS = 8192          # variants one process can hold (a power of two); the demo uses about a hundred
PROBES = 32
_TABLE = np.zeros(2 * TABLE_SLOTS, dtype=np.int64)   # (hash, address) pairs, open addressing
TABLE_ADDRESS = _TABLE.ctypes.data
DESCRIPTOR_PREFIX = "asim.outline$"
_END = "#"                  # ends a descriptor in a global's name (LLVM may append ".1" to a repeated name)

_LOCK = threading.RLock()
_OUTLINED: dict[str, "Outlined"] = {}        # "module:qualname" -> the outlined function
_VARIANTS: dict[str, int] = {}               # descriptor -> address of its compiled variant
_KEEP: list = []                             # compiled variants (their code lives as long as they do)
_SCANNED: set[int] = set()                   # id() of libraries whose descriptors are resolved


class Outlined:
    """What `outline` knows of one function: its inline body (a device function) and its descriptor key."""

    def __init__(self, fn, returns_int: bool, as_bytes: tuple[str, ...] = (), as_width: tuple[str, ...] = ()):
        self.fn = fn
        self.returns_int = returns_int
        parameters = inspect.signature(fn).parameters
        self.params = list(parameters)
        # trailing parameters with a default (an int, bool or float: MicroAPI's `mode=ZEROING`): a call that leaves
        # them out crosses them as those constants, so it shares the variant of a call that passes them
        self.defaults = tuple(p.default for p in parameters.values() if p.default is not inspect.Parameter.empty)
        if any(type(d) not in (int, bool, float) for d in self.defaults):
            raise TypeError(f"{fn.__qualname__}: only int, bool or float defaults can be outlined")
        unknown = (set(as_bytes) | set(as_width)) - set(self.params)
        if unknown:
            raise TypeError(f"{fn.__qualname__} has no parameter {sorted(unknown)}")
        self.as_bytes = tuple(p in as_bytes for p in self.params)
        self.as_width = tuple(p in as_width for p in self.params)
        self.key = f"{fn.__module__}:{fn.__qualname__}"
        # compiled in place at a call site that cannot be outlined
        self.inline = function_copy(fn, f"{fn.__qualname__}__inline")
        # what a variant runs, inlined into it (the variant is what is cached)
        self.body = aicore(function_copy(fn, f"{fn.__qualname__}__body"), cached=False)

    def descriptor(self, kinds: str) -> str:
        return f"{self.key}:{source_stamp(self.fn.__module__)}|{kinds}{_END}"



def outline(fn=None, *, as_bytes: tuple[str, ...] = (), as_width: tuple[str, ...] = ()):
    """Make `fn(c, ...)` (a void AscendC-call implementation taking the Core first) an outlined call: see the
    module docstring. Returns fn; numba code calling it gets the by-address call.

    as_bytes: parameters that are LocalTensors fn only locates (their UB address and byte size), never reads as
    elements: they cross as uint8 views of the same bytes, so one variant serves every element type.
    as_width: parameters (LocalTensors, or GlobalTensors and other named tuples holding arrays) whose elements fn
    only moves, never interprets: their arrays cross as unsigned integers of the same width (float32, int32 and
    uint32 as uint32; int16 as uint16, the fp16 / bf16 carrier), the same element count over the same bytes, so
    one variant per element width serves every element type. The inline fallback keeps the original types, which
    fn must treat alike."""
    def register(f):
        _check_void(f)
        return _register(Outlined(f, returns_int=False, as_bytes=as_bytes, as_width=as_width))
    return register if fn is None else register(fn)


def outline_int(fn):
    """`outline` for a function that returns an integer on every path (returned as int64)."""
    return _register(Outlined(fn, returns_int=True))


def _register(o: "Outlined"):
    fn = o.fn
    _OUTLINED[o.key] = o
    required = len(o.params) - len(o.defaults)
    params = ", ".join(o.params[:required] + [f"{p}=None" for p in o.params[required:]])
    namespace: dict = {"types": types}
    result = "types.int64" if o.returns_int else "types.none"
    exec(f"def typer({params}):\n    return {result}\n", namespace)  # noqa: S102 - the typer takes fn's parameters
    typer = namespace["typer"]

    @type_callable(fn)
    def _typing(context):
        return typer

    def _lower(context, builder, sig, args):
        return _lower_call(o, context, builder, sig, args)

    for arity in range(required, len(o.params) + 1):
        lower_builtin(fn, *([types.Any] * arity))(_lower)
    return fn


def _check_void(fn) -> None:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    for node in ast.walk(tree.body[0]):
        if isinstance(node, ast.Return) and node.value is not None:
            raise TypeError(f"@outline needs a function that returns nothing: {fn.__qualname__} returns a value")


# --- argument kinds: what a call site packs, and what a variant rebuilds ------------------------------------
def _kind(ty, as_bytes: bool = False, as_width: bool = False) -> str | None:
    """The kind string of a numba type, or None when it cannot cross a by-address call (as_bytes: an array that
    crosses as its bytes, "B"; as_width: arrays, also inside tuples, cross as unsigned integers of their width)."""
    if as_bytes and isinstance(ty, types.Array) and ty.ndim == 1 and ty.layout == "C":
        return "B"
    if isinstance(ty, types.Array):
        if ty.ndim != 1 or ty.layout != "C" or not isinstance(ty.dtype, (types.Integer, types.Float, types.Boolean)):
            return None
        dtype = np.dtype(str(ty.dtype))
        return f"auint{8 * dtype.itemsize}" if as_width else f"a{dtype.name}"
    if isinstance(ty, (types.NamedTuple, types.NamedUniTuple)):
        cls = ty.instance_class
        if getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is not cls:
            return None
        inner = [_kind(t, as_width=as_width) for t in ty.types]
        return None if None in inner else f"N{cls.__module__}.{cls.__qualname__}({','.join(inner)})"
    if isinstance(ty, types.BaseTuple):
        inner = [_kind(t, as_width=as_width) for t in ty.types]
        return None if None in inner else f"T({','.join(inner)})"
    if isinstance(ty, types.Boolean):
        return "b"
    if isinstance(ty, types.Integer):
        return "u" if (not ty.signed and ty.bitwidth == 64) else "i"
    if isinstance(ty, types.Float):
        return "f" if ty.bitwidth == 32 else "d"
    if isinstance(ty, types.NoneType):
        return "n"
    return None


def _words(context, builder, ty, value, out: list, as_bytes: bool = False) -> None:
    """Append the int64 words of `value` (numba type ty) in the order _rebuild reads them."""
    i64 = ir.IntType(64)
    if isinstance(ty, types.Array):
        a = context.make_array(ty)(context, builder, value)
        out.append(builder.ptrtoint(a.data, i64))
        out.append(builder.mul(a.nitems, ir.Constant(i64, ty.dtype.bitwidth // 8)) if as_bytes else a.nitems)
    elif isinstance(ty, types.BaseTuple):
        for k, t in enumerate(ty.types):
            _words(context, builder, t, builder.extract_value(value, k), out)
    elif isinstance(ty, types.Boolean):
        out.append(builder.zext(value, i64) if value.type.width < 64 else value)
    elif isinstance(ty, types.Integer):
        out.append(context.cast(builder, value, types.unliteral(ty), types.uint64 if not ty.signed else types.int64))
    elif isinstance(ty, types.Float):
        if ty.bitwidth == 32:
            out.append(builder.zext(builder.bitcast(value, ir.IntType(32)), i64))
        else:
            out.append(builder.bitcast(value, i64))


def _rebuild(kinds: str, namespace: dict) -> tuple[list[str], int]:
    """Python expressions rebuilding the arguments a call site packed as `kinds`, reading words w[0...]; returns
    (one expression per argument, words read). Names the expressions use are added to `namespace`."""
    pos = 0
    word = 0

    def name_until(stops: str) -> str:
        nonlocal pos
        start = pos
        while pos < len(kinds) and kinds[pos] not in stops:
            pos += 1
        return kinds[start:pos]

    def items() -> list[str]:
        nonlocal pos
        assert kinds[pos] == "("
        pos += 1
        out = []
        while kinds[pos] != ")":
            out.append(item())
            if kinds[pos] == ",":
                pos += 1
        pos += 1
        return out

    def item() -> str:
        nonlocal pos, word
        ch = kinds[pos]
        pos += 1
        if ch == "B":
            namespace["_dt_uint8"] = np.uint8
            expr = f"carray(_voidptr(w[{word}]), w[{word + 1}], _dt_uint8)"
            word += 2
            return expr
        if ch == "a":
            dtype = name_until(",)")
            namespace[f"_dt_{dtype}"] = np.dtype(dtype).type
            expr = f"carray(_voidptr(w[{word}]), w[{word + 1}], _dt_{dtype})"
            word += 2
            return expr
        if ch in "iubfd":
            expr = {"i": "w[{}]", "u": "_u64(w[{}])", "b": "(w[{}] != 0)", "f": "_f32(w[{}])",
                    "d": "_f64(w[{}])"}[ch].format(word)
            word += 1
            return expr
        if ch == "n":
            return "None"
        if ch == "T":
            inner = items()
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if ch == "N":
            path = name_until("(")
            module, _, qualname = path.rpartition(".")
            alias = "_nt_" + path.replace(".", "_")
            namespace[alias] = getattr(sys.modules[module], qualname)
            return f"{alias}({', '.join(items())})"
        raise ValueError(f"bad argument kinds {kinds!r} at {pos - 1}")

    exprs = []
    while pos < len(kinds):
        exprs.append(item())
        if pos < len(kinds) and kinds[pos] == ",":
            pos += 1
    return exprs, word


@intrinsic
def _voidptr(typingctx, address):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(types.int64), codegen


@intrinsic
def _f32(typingctx, word):
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
    return types.float32(types.int64), codegen


@intrinsic
def _f64(typingctx, word):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _u64(typingctx, word):
    def codegen(context, builder, signature, args):
        return args[0]
    return types.uint64(types.int64), codegen


# --- variants ------------------------------------------------------------------------------------------------
def variant_address(descriptor: str) -> int:
    """The address of the compiled variant `descriptor` names: compiled (or loaded from the disk cache) once per
    process and entered in the table. Thread-safe."""
    address = _VARIANTS.get(descriptor)
    if address is not None:
        return address
    with _LOCK:
        address = _VARIANTS.get(descriptor)
        if address is None:
            address = _compile_variant(descriptor)
            _insert(_hash(descriptor), address)
            _VARIANTS[descriptor] = address
        return address


def _compile_variant(descriptor: str) -> int:
    head, _, kinds = descriptor[: -len(_END)].partition("|")
    key = head.rsplit(":", 1)[0]
    o = _OUTLINED.get(key)
    if o is None:       # the module defining it is not imported yet
        module = key.split(":", 1)[0]
        __import__(module)
        o = _OUTLINED[key]
    if o.descriptor(kinds) != descriptor:
        raise LookupError(f"stale machine-model call {descriptor!r}: its sources changed since it was compiled")
    namespace = {"carray": carray, "_voidptr": _voidptr, "_u64": _u64, "_f32": _f32, "_f64": _f64, "body": o.body}
    exprs, n_words = _rebuild(kinds, namespace)
    fn = o.fn
    # compiled under fn's own file and line: numba's disk cache locates and stamps the entry there
    call = f"body({', '.join(exprs)})"
    source = "\n" * (fn.__code__.co_firstlineno - 1) + (
        f"def variant(words):\n"
        f"    w = carray(words, {n_words + 1})\n"
        f"    {f'w[{n_words}] = {call}' if o.returns_int else call}\n")
    exec(compile(source, fn.__code__.co_filename, "exec"), namespace)  # noqa: S102
    variant = namespace["variant"]
    variant.__qualname__ = f"{fn.__qualname__}__v{_hash(descriptor):016x}"
    variant.__module__ = fn.__module__
    compiled = cfunc(types.void(types.CPointer(types.int64)), cache=True, error_model="numpy")(variant)
    _KEEP.append(compiled)
    resolve_library(compiled._library)       # outlined calls inside this variant's body
    return compiled.address


def _hash(descriptor: str) -> int:
    """A nonzero positive 63-bit key of the descriptor (0 marks a free table slot)."""
    h = int.from_bytes(hashlib.blake2b(descriptor.encode(), digest_size=8).digest(), "little") & ((1 << 63) - 1)
    return h or 1


def _insert(h: int, address: int) -> None:
    """Enter (h, address) at the first free slot from h's own; call sites probe at most PROBES slots."""
    slot = h & (TABLE_SLOTS - 1)
    for _ in range(PROBES):
        if _TABLE[2 * slot] in (0, h):
            _TABLE[2 * slot + 1] = address      # the address before the key: a reader that sees the key sees it
            _TABLE[2 * slot] = h
            return
        slot = (slot + 1) & (TABLE_SLOTS - 1)
    raise RuntimeError(f"machine-model call table: no free slot within {PROBES} of this variant's "
                       f"({len(_VARIANTS)} variants held)")


def resolve_library(library) -> None:
    """Load every variant the outlined calls in a compiled library name (a stage loaded from the disk cache does
    not compile its call sites again, so this is how their variants get into the table before it runs)."""
    key = id(library)
    if key in _SCANNED:
        return
    names = set()
    for attr in ("_final_module", "_shared_module"):
        module = getattr(library, attr, None)
        if module is None:
            continue
        for gv in module.global_variables:
            if gv.name.startswith(DESCRIPTOR_PREFIX):
                names.add(gv.name[len(DESCRIPTOR_PREFIX): gv.name.rindex(_END) + 1])
    for descriptor in sorted(names):
        variant_address(descriptor)
    _SCANNED.add(key)


AFTER_COMPILE.append(resolve_library)


# --- the fallback resolver, called from kernel code -----------------------------------------------------------
_RESOLVER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


def _resolve_from_kernel(descriptor_address: int, descriptor_len: int) -> int:
    try:
        return variant_address(ctypes.string_at(descriptor_address, descriptor_len).decode())
    except BaseException:   # noqa: BLE001 - never raise into kernel code; the call site records the fault
        return 0


_RESOLVER = _RESOLVER_TYPE(_resolve_from_kernel)
RESOLVER_ADDRESS = ctypes.cast(_RESOLVER, ctypes.c_void_p).value


CALL_HELPER = "asim.outline.call"


def _call_helper(module):
    """`void asim.outline.call(i64 *state, i64 hash, i64 descriptor, i64 descriptor_len, i64 *words)`, defined
    once per LLVM module (linkonce_odr, never inlined): finds the variant in the table (a few loads), else asks
    the resolver, then calls it with the words; with no variant it records F_OUTLINE and calls nothing. One
    shared copy keeps each call site to its stores and one call."""
    try:
        return module.get_global(CALL_HELPER)
    except KeyError:
        pass
    i64 = ir.IntType(64)
    p64 = i64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [p64, i64, i64, i64, p64]), name=CALL_HELPER)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")
    state, h, text, text_len, words = fn.args
    entry, probe, hit, next_slot, resolve, ask, found, missing, done = (
        fn.append_basic_block(n) for n in ("entry", "probe", "hit", "next", "resolve", "ask", "found", "missing",
                                           "done"))
    b = ir.IRBuilder(entry)
    zero = ir.Constant(i64, 0)
    table = b.load(b.gep(state, [ir.Constant(i64, OUTLINE_TABLE)]))
    b.cbranch(b.icmp_unsigned("==", table, zero), resolve, probe)
    b.position_at_end(probe)
    slot = b.phi(i64)          # unmasked: the loop masks it
    tries = b.phi(i64)
    slot.add_incoming(h, entry)
    tries.add_incoming(zero, entry)
    base = b.inttoptr(table, p64)
    masked = b.and_(slot, ir.Constant(i64, TABLE_SLOTS - 1))
    key_ptr = b.gep(base, [b.shl(masked, ir.Constant(i64, 1))])
    key = b.load_atomic(key_ptr, "acquire", 8)
    b.cbranch(b.icmp_unsigned("==", key, h), hit, next_slot)
    b.position_at_end(hit)
    hit_address = b.load(b.gep(key_ptr, [ir.Constant(i64, 1)]))
    b.branch(found)
    b.position_at_end(next_slot)
    more = b.and_(b.icmp_unsigned("!=", key, zero), b.icmp_unsigned("<", tries, ir.Constant(i64, PROBES - 1)))
    slot_next = b.add(masked, ir.Constant(i64, 1))
    tries_next = b.add(tries, ir.Constant(i64, 1))
    b.cbranch(more, probe, resolve)
    slot.add_incoming(slot_next, next_slot)
    tries.add_incoming(tries_next, next_slot)
    b.position_at_end(resolve)
    resolver = b.load(b.gep(state, [ir.Constant(i64, OUTLINE_RESOLVER)]))
    b.cbranch(b.icmp_unsigned("==", resolver, zero), missing, ask)
    b.position_at_end(ask)
    resolver_fn = b.inttoptr(resolver, ir.FunctionType(i64, [i64, i64]).as_pointer())
    asked = b.call(resolver_fn, [text, text_len])
    b.cbranch(b.icmp_unsigned("==", asked, zero), missing, found)
    b.position_at_end(found)
    address = b.phi(i64)
    address.add_incoming(hit_address, hit)
    address.add_incoming(asked, ask)
    variant = b.inttoptr(address, ir.FunctionType(ir.VoidType(), [p64]).as_pointer())
    b.call(variant, [words])
    b.branch(done)
    b.position_at_end(missing)
    err = b.gep(state, [ir.Constant(i64, ERR_BASE)])
    with b.if_then(b.icmp_unsigned("==", b.load(err), zero)):
        b.store(ir.Constant(i64, F_OUTLINE), err)
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _with_defaults(o: Outlined, context, sig, args):
    """sig and args with the defaults of the parameters a call left out appended as constants."""
    missing = len(o.params) - len(sig.args)
    if missing <= 0:
        return sig, args
    extra = o.defaults[len(o.defaults) - missing:]
    tys = [types.boolean if type(d) is bool else types.float64 if type(d) is float else types.int64 for d in extra]
    values = [context.get_constant(t, d) for t, d in zip(tys, extra, strict=True)]
    return signature(sig.return_type, *sig.args, *tys), list(args) + values


def _lower_call(o: Outlined, context, builder, sig, args):
    sig, args = _with_defaults(o, context, sig, args)
    kinds = [_kind(t, b, w) for t, b, w in zip(sig.args, o.as_bytes, o.as_width, strict=False)]
    core = sig.args[0] if sig.args else None
    is_core = isinstance(core, types.NamedTuple) and core.instance_class.__name__ == "Core" \
        and core.instance_class.__module__ == "ascend_sim.core"
    descriptor = o.descriptor(",".join(kinds)) if is_core and None not in kinds else None
    if descriptor is not None:
        try:
            variant_address(descriptor)     # compiled now, while the stage compiles, not at its first run
        except Exception:                   # noqa: BLE001 - cannot cross by address: compile it inline instead
            descriptor = None
    if descriptor is None:
        return context.compile_internal(builder, o.inline, sig, args)
    i64 = ir.IntType(64)
    words: list = []
    for ty, value, kind in zip(sig.args, args, kinds, strict=False):
        _words(context, builder, ty, value, words, kind == "B")
    buf = cgutils.alloca_once(builder, i64, size=len(words) + 1)     # the last word: the result
    for k, w in enumerate(words + [ir.Constant(i64, 0)]):
        builder.store(w, builder.gep(buf, [ir.Constant(i64, k)]))
    text = _descriptor_global(builder.module, descriptor)
    state_ty = core.types[core.instance_class._fields.index("state")]
    state = context.make_array(state_ty)(context, builder,
                                         builder.extract_value(args[0], core.instance_class._fields.index("state")))
    builder.call(_call_helper(builder.module),
                 [builder.bitcast(state.data, i64.as_pointer()), ir.Constant(i64, _hash(descriptor)),
                  builder.ptrtoint(text, i64), ir.Constant(i64, len(descriptor.encode())), buf])
    if o.returns_int:
        return builder.load(builder.gep(buf, [ir.Constant(i64, len(words))]))
    return context.get_dummy_value()


def _descriptor_global(module, descriptor: str):
    """The descriptor as a named constant of the module: the resolver reads its bytes, resolve_library its name."""
    name = DESCRIPTOR_PREFIX + descriptor
    try:
        return module.get_global(name)
    except KeyError:
        data = bytearray(descriptor.encode())
        ty = ir.ArrayType(ir.IntType(8), len(data))
        gv = ir.GlobalVariable(module, ty, name=name)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ty, data)
        return gv
