"""The host l0 steps of the composite routing-map aclnn calls on the demo's shapes (tokens 512, hidden 4096,
experts 64; drop-and-pad capacity 128, so 8192 permuted rows; bf16, and fp16 too for Mul and the index add),
each beside the same step written in NumPy float32 on the same shape (role "numpy") and np.copyto of the
bytes the step reads and writes, in one run.
Run with `pytest tests/benchmarks/test_bench_host_steps.py -o addopts= --benchmark-only -n0`.

Each step is built the way its operator builds it (the same ops._host helpers and step factories). Before any
timing, each half-precision step's result is checked against the ml_dtypes / NumPy expression it replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

from ops._host import (
    gather_rows,
    index_add_rows_step,
    masked_scatter_rows,
    mul_rows,
    nonzero_mask,
    round_to_half,
    sort_ids_as_fp32_step,
    transpose_step,
    view_copy_step,
    zeros_like_step,
)
from tests.bits import assert_bits_equal

from .conftest import record

TOKENS, HIDDEN, EXPERTS, CAPACITY = 512, 4096, 64, 128
ROWS = CAPACITY * EXPERTS
BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)


@dataclass
class Case:
    """One host step: `step` and `numpy` fill preallocated outputs; gm_bytes = the step's bytes read + written
    (for the copyto baseline); iterations per timed round (the (N, E) steps take microseconds)."""
    name: str
    step: Callable[[], None]
    numpy: Callable[[], None]
    gm_bytes: int
    iterations: int = 1


def _rng():
    return np.random.default_rng(0)


def _nbytes(*arrays) -> int:
    return sum(a.nbytes for a in arrays)


def _probs(dtype):
    return _rng().random((TOKENS, EXPERTS), dtype=np.float32).astype(dtype)


def _transpose(dtype) -> Case:
    src, src32 = _probs(dtype), _probs(F32)
    dst, dst32 = np.empty((EXPERTS, TOKENS), dtype), np.empty((EXPERTS, TOKENS), F32)
    return Case(f"Transpose ({TOKENS}, {EXPERTS}) {dtype}", transpose_step(src, dst).run,
                lambda: np.copyto(dst32, src32.T), _nbytes(src, dst), 200)


def _gather() -> Case:
    rng = _rng()
    x32 = rng.standard_normal((TOKENS, HIDDEN), dtype=np.float32)
    x = x32.astype(BF16)
    idx = rng.integers(0, TOKENS, ROWS).astype(np.int32)
    out, out32 = np.empty((ROWS, HIDDEN), BF16), np.empty((ROWS, HIDDEN), F32)
    gather_rows(x, idx, out)
    assert_bits_equal(out, np.take(x, idx, axis=0))
    return Case(f"GatherV2 ({TOKENS}, {HIDDEN}) -> ({ROWS}, {HIDDEN}) bf16", lambda: gather_rows(x, idx, out),
                lambda: np.take(x32, idx, axis=0, out=out32), _nbytes(out, out, idx))


def _mul(tokens_dtype, probs_dtype) -> Case:
    rng = _rng()
    a32 = rng.standard_normal((ROWS, HIDDEN), dtype=np.float32)
    a = a32.astype(tokens_dtype)
    w32 = rng.random(ROWS, dtype=np.float32)
    w = w32.astype(probs_dtype)
    out = np.empty(a.shape, dtype=tokens_dtype if probs_dtype == tokens_dtype else F32)
    out32 = np.empty(a.shape, F32)
    mul_rows(a, w, out)
    assert_bits_equal(out, (a.astype(F32) * w.astype(F32)[:, None]).astype(out.dtype))
    return Case(f"Mul ({ROWS}, {HIDDEN}) {tokens_dtype} x ({ROWS}, 1) {probs_dtype} -> {out.dtype}",
                lambda: mul_rows(a, w, out), lambda: np.multiply(a32, w32[:, None], out=out32), _nbytes(a, w, out))


def _zeros() -> Case:
    arr, arr32 = np.ones((TOKENS, HIDDEN), BF16), np.ones((TOKENS, HIDDEN), F32)
    return Case(f"ZerosLike ({TOKENS}, {HIDDEN}) bf16", zeros_like_step(arr).run, lambda: arr32.fill(0),
                arr.nbytes)


def _sort() -> Case:
    ids = _rng().integers(0, TOKENS, ROWS).astype(np.int32)
    ids32 = ids.astype(F32)
    values, order = np.empty_like(ids), np.empty_like(ids)
    values32, order32 = np.empty_like(ids32), np.empty_like(ids)

    def numpy_sort():
        perm = np.argsort(ids32, kind="stable")
        np.copyto(order32, perm.astype(np.int32))
        np.copyto(values32, ids32[perm])
    return Case(f"Sort ({ROWS},) int32 as fp32", sort_ids_as_fp32_step(ids, values, order).run, numpy_sort,
                _nbytes(ids, values, order), 20)


def _index_add(dtype) -> Case:
    rng = _rng()
    source32 = rng.standard_normal((ROWS, HIDDEN), dtype=np.float32)
    source = source32.astype(dtype)
    ids = rng.integers(0, TOKENS, ROWS).astype(np.int32)
    var = np.zeros((TOKENS, HIDDEN), dtype)
    var32 = np.zeros((TOKENS, HIDDEN), F32)
    step = index_add_rows_step(var, ids, source, lambda k, v: AssertionError((k, v)))
    step.run()
    acc = np.zeros((TOKENS, HIDDEN), F32)
    np.add.at(acc, ids.astype(np.int64), source.astype(F32))
    assert_bits_equal(var, acc.astype(dtype))
    slots = ids.astype(np.int64)
    return Case(f"index add ({ROWS}, {HIDDEN}) -> ({TOKENS}, {HIDDEN}) {dtype}", step.run,
                lambda: np.add.at(var32, slots, source32), _nbytes(source, var, var, ids))


def _cast() -> Case:
    var = _rng().standard_normal((TOKENS, HIDDEN), dtype=np.float32)
    out, out32 = np.empty(var.shape, BF16), np.empty(var.shape, F32)
    round_to_half(var, out)
    assert_bits_equal(out, var.astype(BF16))
    # an fp32 -> fp32 Cast is a copy: that is the NumPy fp32 form of this step
    return Case(f"Cast ({TOKENS}, {HIDDEN}) fp32 -> bf16", lambda: round_to_half(var, out),
                lambda: np.copyto(out32, var), _nbytes(var, out))


def _view_copy(shape) -> Case:
    src = _rng().standard_normal(shape, dtype=np.float32)
    src16, dst16, dst32 = src.astype(BF16), np.empty(shape, BF16), np.empty(shape, F32)
    return Case(f"ViewCopy {shape} bf16", view_copy_step(src16, dst16).run, lambda: np.copyto(dst32, src),
                _nbytes(src16, dst16), 200 if src.size < 1 << 20 else 1)


def _mask_cast() -> Case:
    rm = _rng().random((TOKENS, EXPERTS)) < 8 / EXPERTS
    rm32 = rm.astype(F32)
    mask, mask32 = np.empty(rm.shape, bool), np.empty(rm.shape, bool)
    return Case(f"Cast ({TOKENS}, {EXPERTS}) bool -> bool mask", lambda: nonzero_mask(rm, mask),
                lambda: np.not_equal(rm32, 0, out=mask32), _nbytes(rm, mask), 200)


def _masked_scatter() -> Case:
    mask_t = _rng().random((EXPERTS, TOKENS)) < 8 / EXPERTS
    gp32 = _rng().random(int(mask_t.sum()), dtype=np.float32)
    gp = gp32.astype(BF16)
    zeros_t, zeros32 = np.zeros(mask_t.shape, BF16), np.zeros(mask_t.shape, F32)
    return Case(f"MaskedScatter ({EXPERTS}, {TOKENS}) bf16", lambda: masked_scatter_rows(zeros_t, mask_t, gp),
                lambda: zeros32.__setitem__(mask_t, gp32), _nbytes(mask_t, gp, zeros_t), 200)


CASES = {
    "transpose-map": lambda: _transpose(np.dtype(bool)),
    "transpose-probs": lambda: _transpose(BF16),
    "gather": _gather,
    "mul-bf16": lambda: _mul(BF16, BF16),
    "mul-mixed": lambda: _mul(BF16, F32),
    "mul-fp16": lambda: _mul(F16, F16),
    "zeros-like": _zeros,
    "sort": _sort,
    "index-add-fp32": lambda: _index_add(F32),
    "index-add-bf16": lambda: _index_add(BF16),
    "index-add-fp16": lambda: _index_add(F16),
    "cast-to-bf16": _cast,
    "view-copy-tokens": lambda: _view_copy((TOKENS, HIDDEN)),
    "view-copy-probs": lambda: _view_copy((TOKENS, EXPERTS)),
    "cast-mask": _mask_cast,
    "masked-scatter": _masked_scatter,
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request) -> Case:
    return CASES[request.param]()


def _time(benchmark, fn, iterations):
    # medians of many rounds: the machine is shared, and a microsecond step's round is easily hit by another job
    benchmark.pedantic(fn, rounds=41 if iterations > 1 else 15, iterations=iterations, warmup_rounds=1)


def test_host_step(benchmark, case):
    _time(benchmark, case.step, case.iterations)
    record(case.name, "sim", benchmark, case.gm_bytes)


def test_numpy_fp32(benchmark, case):
    _time(benchmark, case.numpy, case.iterations)
    record(case.name, "numpy", benchmark, case.gm_bytes)


def test_copyto_same_bytes(benchmark, case, copyto_baseline):
    copyto_baseline(benchmark, case.name, case.gm_bytes)
