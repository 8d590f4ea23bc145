"""Shared pieces of the host tilings: tensor descriptions, results, and C integer arithmetic.

Tilings run signed 64-bit C++ arithmetic: division truncates toward zero, and the
ops' own helpers return 0 for a zero divisor instead of failing. These helpers do the
same, so every figure equals the real op's even for degenerate shapes.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence, overload

import ml_dtypes
import numpy as np

from ascend_sim.dtypes import dt_of
from ascend_sim.layout import BLOCK_BYTES  # noqa: F401   (re-exported: the tilings import it from here)

from .platform import SocProfile
from .status import ParamInvalidError

_DTYPE_ALIASES = {
    "bf16": ml_dtypes.bfloat16, "bfloat16": ml_dtypes.bfloat16,
    "fp16": np.float16, "float16": np.float16, "half": np.float16,
    "fp32": np.float32, "float32": np.float32, "float": np.float32,
    "fp64": np.float64, "float64": np.float64, "double": np.float64,
    "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
    "float8_e5m2": ml_dtypes.float8_e5m2, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}


def as_dtype(dtype) -> np.dtype:
    """numpy dtype from a numpy / ml_dtypes dtype or a name ("bf16", "float16", "int8", ...)."""
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_ALIASES:
        return np.dtype(_DTYPE_ALIASES[dtype.lower()])
    return np.dtype(dtype)


def dtype_name(dtype) -> str:
    return as_dtype(dtype).name


_INT64_MAX = 2 ** 63 - 1


def _checked_shape(shape) -> tuple:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ParamInvalidError(f"a tensor shape must be a sequence of whole numbers, got {shape!r}")
    dims = tuple(shape)
    for i, d in enumerate(dims):
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise ParamInvalidError(f"dimension {i} of shape {dims!r} is {d!r}; dimensions must be whole numbers")
        if not 0 <= d <= _INT64_MAX:
            raise ParamInvalidError(f"dimension {i} of shape {dims!r} is {d}; dimensions must be in [0, 2**63)")
    return tuple(int(d) for d in dims)


def _checked_dtype(dtype) -> np.dtype:
    try:
        dt = as_dtype(dtype)
    except TypeError:
        raise ParamInvalidError(f"{dtype!r} is not a dtype (use a numpy / ml_dtypes dtype or a name such as "
                                "'bf16', 'fp16', 'fp32', 'int8', 'int32', 'int64', 'bool')") from None
    try:
        dt_of(dt)
    except ValueError:
        raise ParamInvalidError(f"dtype {dt} is not a tensor type the operators know") from None
    return dt


class _TensorDescFields(NamedTuple):
    shape: tuple
    dtype: Any


class TensorDesc(_TensorDescFields):
    """Shape and dtype of a tensor without its data (lets huge shapes be tiled without allocating).

    `shape` is a sequence of whole numbers >= 0 (any size up to int64); `dtype` a numpy / ml_dtypes
    dtype or a name ("bf16", "fp16", "int32", ...) of a type the operators know. Anything else raises
    ParamInvalidError (161002) naming the bad dimension or dtype.
    """
    __slots__ = ()

    def __new__(cls, shape, dtype):
        return super().__new__(cls, _checked_shape(shape), _checked_dtype(dtype))

    @overload
    @classmethod
    def of(cls, t: None) -> None: ...

    @overload
    @classmethod
    def of(cls, t: Any) -> TensorDesc: ...

    @classmethod
    def of(cls, t) -> TensorDesc | None:
        """The description of anything with `.shape` and `.dtype` (None stays None)."""
        if t is None or isinstance(t, TensorDesc):
            return t
        try:
            shape, dtype = t.shape, t.dtype
        except AttributeError:
            raise ParamInvalidError(f"expected a tensor (an array or a TensorDesc with .shape and .dtype), got "
                                    f"{type(t).__name__}") from None
        return cls(shape, dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self, i: int) -> int:
        return self.shape[i]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


# GetLengthByType of the tilings: bytes of a dtype, 0 for types the table does not list.
_LENGTH_BY_TYPE = {
    np.dtype(np.float16): 2, np.dtype(ml_dtypes.bfloat16): 2, np.dtype(np.int16): 2, np.dtype(np.uint16): 2,
    np.dtype(np.float32): 4, np.dtype(np.int32): 4, np.dtype(np.uint32): 4,
    np.dtype(np.float64): 8, np.dtype(np.int64): 8, np.dtype(np.uint64): 8,
}


def length_by_type(dtype) -> int:
    """Bytes per element as the tilings' GetLengthByType table gives it (INT8, UINT8, BOOL -> 0)."""
    return _LENGTH_BY_TYPE.get(as_dtype(dtype), 0)


def tdiv(a: int, b: int) -> int:
    """C++ a / b on int64 (truncates toward zero); 0 when b == 0, like the tilings' safe helpers."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def tmod(a: int, b: int) -> int:
    """C++ a % b (sign of a); 0 when b == 0."""
    return 0 if b == 0 else a - tdiv(a, b) * b


def ceil_div(a: int, b: int) -> int:
    """(a + b - 1) / b in C++ int64; 0 when b == 0."""
    return 0 if b == 0 else tdiv(a + b - 1, b)


def align_up(a: int, b: int) -> int:
    """(a + b - 1) / b * b in C++ int64; 0 when b == 0."""
    return 0 if b == 0 else tdiv(a + b - 1, b) * b


def align_down(a: int, b: int) -> int:
    """a / b * b in C++ int64; 0 when b == 0."""
    return 0 if b == 0 else tdiv(a, b) * b


def align_bytes(elems: int, nbytes: int) -> int:
    """AlignBytes of the kernels: the bytes of `elems` elements of `nbytes` bytes each, rounded up to whole
    BLOCK_BYTES blocks."""
    return align_up(elems * nbytes, BLOCK_BYTES)


@dataclass(frozen=True)
class TilingResult:
    """What the host tiling hands to the kernel launch.

    Attributes:
        tiling_key: selects the kernel (TILING_KEY_IS).
        block_dim: cores the kernel is launched on.
        workspace_size: bytes of GM workspace the aclnn call reports.
        fields: the tiling struct's fields in declaration order (snake_case names), int values.
        ub_plan: the kernel's UB buffers, one row per InitBuffer call: (name, bytes, count, kind, position, depth,
            pipe); the first three items are the (name, bytes, count) of the buffer. A kernel that runs several
            TPipes in turn (pipe names differ) reuses the UB: each pipe's rows must fit on their own.
        schedule_mode: SetScheduleMode value (1 = all cores scheduled together, needed by SyncAll).
        soc: the chip profile the tiling ran for.
    """
    tiling_key: int
    block_dim: int
    workspace_size: int
    fields: dict
    ub_plan: tuple = ()
    schedule_mode: int = 0
    soc: Any = None

    def ub_pipe_bytes(self) -> dict[str, int]:
        """UB each TPipe of the plan takes after InitBuffer's 32-byte rounding."""
        used: dict[str, int] = {}
        for r in self.ub_plan:
            pipe = r[6] if len(r) > 6 else "pipe"
            used[pipe] = used.get(pipe, 0) + int(r[2]) * ((int(r[1]) + 31) // 32 * 32)
        return used

    @property
    def ub_plan_bytes(self) -> int:
        """UB the plan needs: the largest of its TPipes (32-byte rounded)."""
        return max(self.ub_pipe_bytes().values(), default=0)

    @property
    def ub_fits(self) -> bool:
        return self.soc is None or self.ub_plan_bytes <= self.soc.ub_size

    def data(self) -> list[int]:
        """The tiling data as the UTs print it (field values in order)."""
        return list(self.fields.values())

    def __str__(self) -> str:
        lines = [f"tilingKey {self.tiling_key}, block_dim {self.block_dim}, workspace {self.workspace_size} bytes"
                 + (f", schedule mode {self.schedule_mode}" if self.schedule_mode else "")]
        width = max((len(k) for k in self.fields), default=0)
        lines += [f"  {k:<{width}} = {v}" for k, v in self.fields.items()]
        if self.ub_plan:
            cap = f" of {self.soc.ub_size}" if self.soc is not None else ""
            lines.append(f"UB plan ({self.ub_plan_bytes}{cap} bytes"
                         + ("" if self.ub_fits else ", DOES NOT FIT: the kernel would fail in InitBuffer") + "):")
            per_pipe = self.ub_pipe_bytes()
            pipe = None
            for row in self.ub_plan:
                name, nbytes, count = row[:3]
                if len(per_pipe) > 1 and row[6] != pipe:
                    pipe = row[6]
                    lines.append(f" TPipe {pipe} ({per_pipe[pipe]} bytes):")
                extra = f"  {row[3]}@{row[4]}" + (f" depth {row[5]}" if len(row) > 5 and row[5] else "") \
                    if len(row) > 4 else ""
                lines.append(f"  {name:<30} {count} x {nbytes} bytes{extra}")
        return "\n".join(lines)


def struct_fields(names: Sequence[str]) -> dict:
    """A zero-filled tiling struct (fields a branch does not set stay 0, as in the real ops)."""
    return {n: 0 for n in names}


# --- remembered tilings ---------------------------------------------------------------------------------------
MAX_REMEMBERED_TILINGS = 1024
"""Tiling results a memoised tiling keeps (per tiling function); beyond it the oldest are forgotten."""


class _Uncacheable(Exception):
    """An argument the memo cannot key exactly: the tiling just runs."""


def _arg_key(value, keep: list):
    """A hashable key equal for two arguments exactly when the tiling cannot tell them apart: an array or
    TensorDesc by class, shape and dtype (tilings read nothing else of a tensor), a scalar by class and value,
    a list / tuple item by item, a chip profile by identity (kept alive in `keep`, so its id stays its own)."""
    if value is None or isinstance(value, (bool, int, float, str, np.integer, np.bool_, np.floating)):
        return type(value), value
    if isinstance(value, (np.ndarray, TensorDesc)):
        return type(value), tuple(value.shape), np.dtype(value.dtype)
    if isinstance(value, (tuple, list)):
        return type(value), tuple(_arg_key(v, keep) for v in value)
    if isinstance(value, SocProfile):
        keep.append(value)
        return "soc", id(value)
    raise _Uncacheable


def memoised_tiling(tiling):
    """`tiling` (a host tiling function of shapes, dtypes, attributes and a chip profile) remembering its results.

    A friendly call tiles the same shapes again and again; the result of an earlier call with arguments it cannot
    tell apart (see _arg_key) is handed out again, with a fresh `fields` dict so no caller sees another's
    changes. Failures are not remembered (they are raised again, computed again). Thread-safe; an argument of
    another kind (a duck-typed tensor, a dict) makes the call run the tiling as before."""
    results: dict = {}
    lock = threading.Lock()

    @functools.wraps(tiling)
    def remembered(*args, **kwargs):
        keep: list = []
        try:
            key = (_arg_key(args, keep), _arg_key(tuple(sorted(kwargs.items())), keep))
            hit = results.get(key)
        except (_Uncacheable, TypeError):
            return tiling(*args, **kwargs)
        if hit is None or any(a is not b for a, b in zip(hit[0], keep, strict=True)):
            hit = (keep, tiling(*args, **kwargs))
            with lock:
                if len(results) >= MAX_REMEMBERED_TILINGS:
                    del results[next(iter(results))]
                results[key] = hit
        result = hit[1]
        return TilingResult(result.tiling_key, result.block_dim, result.workspace_size, dict(result.fields),
                            result.ub_plan, result.schedule_mode, result.soc)

    remembered.cache_size = lambda: len(results)
    return remembered
