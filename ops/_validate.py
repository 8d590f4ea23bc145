"""Argument validation shared by every operator's aclnn layer, with the real status codes.

Each check turns one kind of bad argument into an AclnnError whose message names the
argument and the rule, so no operator repeats (or forgets) one:

* `require`: a missing required tensor, output or attribute -> 161001.
* `as_input` / `as_output`: numpy arrays of a real dtype in native byte order -> 161002;
  inputs become C-contiguous, read-only views (aclnn's AutoContiguous; one compiled kernel
  serves writeable and read-only callers alike, and a kernel cannot write its inputs);
  outputs must be writeable and C-contiguous, because the kernel fills them in place.
* `check_no_alias`: outputs that share memory with an input or another output -> 161002.
* `flag`, `int_attr`, `int_list`: scalar bool / int64 attributes and int64 lists -> 161002.
* `output_array`: the zeroed outputs a friendly call allocates; every dimension is checked (a
  non-negative int64, a total the host could hold) against the argument that produced it -> 161002,
  before anything is allocated.
"""
from __future__ import annotations

import operator
from typing import Iterable, Mapping

import numpy as np

from ascend_sim.dtypes import dt_of
from tiling.common import dtype_name
from tiling.status import ParamInvalidError, ParamNullptrError

_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def require(name: str, t) -> None:
    """161001 when a required tensor / output / attribute is missing."""
    if t is None:
        raise ParamNullptrError(f"{name} is required but is None")


def _array(name: str, t) -> np.ndarray:
    if not isinstance(t, np.ndarray):
        raise ParamInvalidError(f"{name} must be a numpy array, got {type(t).__name__}")
    dt = t.dtype
    if dt.byteorder == ">" or (dt.byteorder == "<" and not np.little_endian):
        native = dt.newbyteorder("=")
        raise ParamInvalidError(f"{name} has non-native byte order ({dt.str}); the NPU reads {native.name} in "
                                f"native order: pass {name}.astype({native.name!r})")
    try:
        dt_of(dt)
    except ValueError:
        raise ParamInvalidError(f"{name} has dtype {dt} ({dt.str}), which no operator of this library takes "
                                "(float32, float64, float16, bfloat16, the int / uint types, bool and the "
                                "float8 formats)") from None
    return t


def as_input(name: str, t):
    """An input tensor as a C-contiguous, read-only numpy array; None stays None (optional input)."""
    if t is None:
        return None
    t = np.ascontiguousarray(_array(name, t))
    if t.flags.writeable:
        t = t.view()
        t.flags.writeable = False
    return t


def as_output(name: str, t):
    """An output tensor: a writeable C-contiguous numpy array the kernel fills in place; None stays None."""
    if t is None:
        return None
    t = _array(name, t)
    if not t.flags.c_contiguous or not t.flags.writeable:
        raise ParamInvalidError(f"{name} must be a writeable C-contiguous array (the kernel fills outputs in "
                                "place; non-contiguous or read-only outputs are not supported)")
    return t


def check_no_alias(inputs: Mapping[str, np.ndarray | None], outputs: Mapping[str, np.ndarray | None]) -> None:
    """161002 when an output overlaps an input or another output in memory (empty tensors never do).

    The kernels read inputs while they write outputs, on many cores at once; the real op's results
    for overlapping tensors are undefined, so they are refused instead of simulated.
    """
    outs = [(n, t) for n, t in outputs.items() if t is not None and t.size]
    ins = [(n, t) for n, t in inputs.items() if t is not None and t.size]
    for k, (name, out) in enumerate(outs):
        for other, t in ins + outs[:k]:
            if np.may_share_memory(out, t):
                raise ParamInvalidError(f"{name} shares memory with {other}: outputs must not overlap inputs or "
                                        "other outputs (pass a separate array)")


MAX_OUTPUT_BYTES = 64 * 1024 ** 3
"""The largest output a friendly call allocates: 64 GiB, the HBM of the largest profiled chip (Atlas A2,
memory_size 68719476736), so no real device could hold a larger tensor either."""


def output_array(name: str, dims: Iterable[tuple[int, str]], dtype) -> np.ndarray:
    """A zeroed output array for a friendly call, or 161002 before anything is allocated.

    `dims` lists (size, source) per dimension, where source names the argument (or the input's shape) the
    size comes from, so an impossible size is reported against what the caller passed: a size below 0 or
    beyond int64 (num_out_tokens -1, a negative tokens_num), or a total beyond MAX_OUTPUT_BYTES or the
    host's memory (num_out_tokens 2**62, restore_shape [2**40, 64]). dtype: the output's numpy dtype.
    """
    dims = list(dims)
    dtype = np.dtype(dtype)
    for axis, (size, source) in enumerate(dims):
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) \
                or not 0 <= int(size) <= _INT64_MAX:
            raise ParamInvalidError(f"{source} gives {name} a dim {axis} of {size!r}: an output dimension must be "
                                    "a whole number in [0, 2**63)")
    shape = tuple(int(size) for size, _ in dims)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
    if nbytes > MAX_OUTPUT_BYTES:
        # the largest dimension is the one that went wrong (the others are shapes of real inputs)
        culprit = max(dims, key=lambda d: int(d[0]))[1]
        raise ParamInvalidError(f"{culprit} gives {name} the shape {shape} ({dtype_name(dtype)}): {nbytes:,} bytes, "
                                f"more than the {MAX_OUTPUT_BYTES:,} bytes an output may have (the HBM of the "
                                "largest simulated chip)")
    try:
        return np.zeros(shape, dtype=dtype)
    except MemoryError:
        culprit = max(dims, key=lambda d: int(d[0]))[1] if dims else name
        raise ParamInvalidError(f"{culprit} gives {name} the shape {shape} ({dtype_name(dtype)}): {nbytes:,} bytes, "
                                "which this host cannot allocate") from None


def flag(name: str, value) -> bool:
    """A C++ bool attribute: True / False (also NumPy bools and the integers 0 / 1), nothing else."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    shown = f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else repr(value)
    raise ParamInvalidError(f"{name} must be a single bool (True or False), got {shown}")


def int_attr(name: str, value) -> int:
    """An int64 attribute: a Python / NumPy integer (no silent truncation of 3.7, "3" or True)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ParamInvalidError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = operator.index(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ParamInvalidError(f"{name} = {value} does not fit in int64")
    return value


def int_list(name: str, value) -> tuple[int, ...] | None:
    """An aclIntArray attribute (e.g. restore_shape): None, or a flat sequence of int64 values."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not (np.issubdtype(value.dtype, np.integer) or value.size == 0):
            raise ParamInvalidError(f"{name} must be a 1-D sequence of integers, got an array of shape "
                                    f"{value.shape} and dtype {dtype_name(value.dtype)}")
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ParamInvalidError(f"{name} must be a list or tuple of integers, got {type(value).__name__}")
    return tuple(int_attr(f"{name}[{i}]", v) for i, v in enumerate(value))


def byte_count(name: str, value) -> int:
    """A non-negative byte count (workspace_size)."""
    n = int_attr(name, value)
    if n < 0:
        raise ParamInvalidError(f"{name} must not be negative, got {n}")
    return n


ROUTING_MAP_DTYPES = (np.dtype(np.bool_), np.dtype(np.int8))
"""The routing-map dtypes of every routing-map operator's OpDef (its columns pair each with every other dtype)."""


def routing_map_dtype(name: str, t) -> None:
    """161002 unless the routing map `t` (None = absent) is bool or int8.

    The kernels read the map as one byte per (token, expert) and select the bytes equal to 1, so a map of
    another width would be read as a byte mask of the wrong length, silently. The OpDefs declare bool / int8
    only; the permute, its gradient and the unpermute gradient refuse the rest in their aclnn, and the
    unpermute's aclnn (which only warns) hands them to an l0 op with no kernel for them.
    """
    if t is not None and np.dtype(t.dtype) not in ROUTING_MAP_DTYPES:
        raise ParamInvalidError(f"{name} dtype must be bool or int8 (the OpDef's routing-map dtypes), got "
                                f"{dtype_name(t.dtype)}")
