"""Which msprof rows the simulator can reproduce: a registry from msprof's "OP Type" to a builder.

A builder takes one OpRow (its shapes and dtypes) and returns an estimator: a function of a chip profile that
gives the estimate of that row's kernel on that chip (an ascend_sim Estimate of a simulated launch, or a
host_cost ModelledEstimate). It raises the row's InputError when the shapes do not fit the operator. The
builder makes the inputs once; the estimator runs the kernel again for every set of figures tried.

Registered here: the family's l0 operators that run as one simulated kernel (MoeTokenPermute,
MoeTokenUnpermute; MoeInitRoutingV3, the permute call's kernel on Ascend 950) and the generic l0 operators the
composites use (Transpose, Cast, Mul, ZerosLike, Sort, GatherV2, ViewCopy), modelled by ascend_sim.host_cost. Others (a
calibration kernel, another operator) add
theirs with `register_op`.
"""
from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

from ascend_sim import host_cost
from tiling.platform import SocProfile

from .._framework import recorded_runs
from .msprof import OpRow

Estimator = Callable[[SocProfile], Any]
"""chip profile -> Estimate-like (`.time_us`; a simulated one also `.cores` and `.cost`)."""

Builder = Callable[[OpRow], Estimator]

CALIBRATION_OPS: dict[str, Builder] = {}
"""msprof OP Type (case-insensitive key: lower case) -> its builder."""


def register_op(op_type: str, builder: Builder) -> None:
    """Make rows of `op_type` (msprof's OP Type) usable by `ascend-sim calibrate`."""
    CALIBRATION_OPS[op_type.strip().lower()] = builder


def builder_for(row: OpRow) -> Builder:
    """The registered builder of the row's OP Type, or the row's InputError listing the known ones."""
    builder = CALIBRATION_OPS.get(row.op_type.strip().lower())
    if builder is None:
        raise row.error(f"unknown operator {row.op_type!r}: the simulator can estimate "
                        f"{', '.join(sorted(CALIBRATION_OPS))} (drop the other rows from the CSV)", "OP Type")
    return builder


def _inputs(row: OpRow, count: int, *, at_least: int | None = None) -> list:
    """The row's first `count` (shape, dtype) inputs; the row's error if it has fewer than `at_least`."""
    need = count if at_least is None else at_least
    if len(row.input_shapes) < need:
        raise row.error(f"{row.op_type} takes {need} input(s), the row gives {len(row.input_shapes)}",
                        "Input Shapes")
    dtypes = list(row.input_dtypes) + [None] * len(row.input_shapes)
    return [(row.input_shapes[k], dtypes[k]) for k in range(min(count, len(row.input_shapes)))]


def _need(row: OpRow, ok: bool, what: str):
    if not ok:
        raise row.error(f"{row.op_type}: {what}", "Input Shapes")


def _values(rng, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype if dtype is not None else np.float32)
    if dtype.kind == "f" or dtype == np.dtype(ml_dtypes.bfloat16):
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def _step_estimate(report, op_type: str, row: OpRow, soc):
    """The estimate of kernel `op_type` in an aclnn run's report (a single launch, or one step of a composite)."""
    if hasattr(report, "step_estimates"):
        for name, est in report.step_estimates():
            if name.split("::")[-1].lower() == op_type.lower():
                return est
        raise row.error(f"{row.op_type} is no kernel of this call on {soc.name} (its steps: "
                        f"{', '.join(s.name for s in report.steps)})")
    if report is None or report.estimate is None:
        raise row.error(f"{row.op_type}: nothing to launch at these shapes")
    if report.op.lower() != op_type.lower():
        raise row.error(f"{row.op_type} is no kernel of this call on {soc.name} (it launches {report.op})")
    return report.estimate


def _run_estimate(row: OpRow, call: Callable[[SocProfile], object]) -> Estimator:
    def estimate(soc):
        with recorded_runs() as runs:
            call(soc)
        return _step_estimate(runs[-1].executor.report, row.op_type, row, soc)
    return estimate


# --- the family's l0 kernels -------------------------------------------------------------------------------
def _permute(row: OpRow) -> Estimator:
    """MoeTokenPermute(tokens (N, H), indices (N, K) int32 / int64)."""
    from ..permute import moe_token_permute

    (tshape, tdtype), (ishape, idtype) = _inputs(row, 2)
    _need(row, len(tshape) == 2 and len(ishape) in (1, 2) and ishape[0] == tshape[0],
          f"expects tokens (N, H) and indices (N, K), got {tshape} and {ishape}")
    rng = np.random.default_rng(row.line)
    tokens = _values(rng, tshape, tdtype)
    topk = ishape[1] if len(ishape) == 2 else 1
    indices = rng.integers(0, max(8, topk), ishape).astype(idtype if idtype is not None else np.int32)
    return _run_estimate(row, lambda soc: moe_token_permute(tokens, indices, soc=soc))


def _unpermute(row: OpRow) -> Estimator:
    """MoeTokenUnpermute(permuted_tokens (M, H), sorted_indices (M,), probs (N, K) optional)."""
    from ..unpermute import moe_token_unpermute

    got = _inputs(row, 3, at_least=2)
    (pshape, pdtype), (sshape, _) = got[:2]
    _need(row, len(pshape) == 2 and len(sshape) == 1 and sshape[0] == pshape[0],
          f"expects permuted_tokens (M, H) and sorted_indices (M,), got {pshape} and {sshape}")
    rng = np.random.default_rng(row.line)
    permuted = _values(rng, pshape, pdtype)
    sorted_indices = rng.permutation(sshape[0]).astype(np.int32)
    probs = None
    if len(got) == 3 and got[2][0]:
        qshape, qdtype = got[2]
        _need(row, len(qshape) == 2 and qshape[0] * qshape[1] == sshape[0],
              f"probs {qshape} must hold one value per sorted index ({sshape[0]})")
        probs = rng.random(qshape).astype(np.float32).astype(qdtype if qdtype is not None else permuted.dtype)
    return _run_estimate(row, lambda soc: moe_token_unpermute(permuted, sorted_indices, probs, soc=soc))


register_op("MoeTokenPermute", _permute)
# on Ascend 950 the permute call is MoeInitRoutingV3 (V2 for the V1 call) + Slice / ViewCopy steps: the same
# inputs first, so the same builder, its kernel picked from the chain by name
register_op("MoeInitRoutingV3", _permute)
register_op("MoeTokenUnpermute", _unpermute)


# --- generic l0 operators, modelled ------------------------------------------------------------------------
def _elems(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _nbytes(shape, dtype) -> int:
    return _elems(shape) * np.dtype(dtype if dtype is not None else np.float32).itemsize


def _modelled(work: host_cost.HostWork) -> Estimator:
    return lambda soc: host_cost.modelled_estimate(work, soc.aiv_num, soc.cost)


def _output(row: OpRow, shape, dtype):
    """The row's first output (shape, dtype), defaulting to the given ones."""
    out_shape = row.output_shapes[0] if row.output_shapes else shape
    out_dtype = row.output_dtypes[0] if row.output_dtypes and row.output_dtypes[0] is not None else dtype
    return out_shape, out_dtype


def _itemsize(dtype) -> int:
    return np.dtype(dtype if dtype is not None else np.float32).itemsize


def _transpose(row: OpRow) -> Estimator:
    (shape, dtype), = _inputs(row, 1)
    return _modelled(host_cost.elementwise(_nbytes(shape, dtype), _nbytes(shape, dtype), _elems(shape),
                                           _itemsize(dtype)))


def _cast(row: OpRow) -> Estimator:
    (shape, dtype), = _inputs(row, 1)
    _, out_dtype = _output(row, shape, dtype)
    return _modelled(host_cost.elementwise(_nbytes(shape, dtype), _nbytes(shape, out_dtype), _elems(shape),
                                           max(_itemsize(dtype), _itemsize(out_dtype)), call="Cast"))


def _mul(row: OpRow) -> Estimator:
    (a, adtype), (b, bdtype) = _inputs(row, 2)
    out_shape, out_dtype = _output(row, a, adtype)
    passes = (1 if _itemsize(adtype) < 4 else 0) + 1 + (1 if _itemsize(out_dtype) < 4 else 0)
    return _modelled(host_cost.elementwise(_nbytes(a, adtype) + _nbytes(b, bdtype), _nbytes(out_shape, out_dtype),
                                           _elems(out_shape), 4, passes=passes))


def _zeros_like(row: OpRow) -> Estimator:
    (shape, dtype), = _inputs(row, 1)
    return _modelled(host_cost.fill(_nbytes(shape, dtype), _elems(shape), _itemsize(dtype)))


def _sort(row: OpRow) -> Estimator:
    (shape, dtype), = _inputs(row, 1)
    return _modelled(host_cost.sort(_elems(shape), _itemsize(dtype)))


def _gather(row: OpRow) -> Estimator:
    (x, xdtype), (idx, idtype) = _inputs(row, 2)
    _need(row, len(x) >= 1, f"expects x of at least one dimension, got {x}")
    rows = _elems(idx)
    return _modelled(host_cost.gather(rows, _nbytes(x[1:], xdtype), _nbytes(idx, idtype or np.int32)))


def _view_copy(row: OpRow) -> Estimator:
    # ViewCopy's inputs are (dst, dst_size, dst_stride, dst_offset, src, ...): the copy is the largest tensor's
    got = _inputs(row, len(row.input_shapes), at_least=1)
    size = max(_nbytes(shape, dtype) for shape, dtype in got)
    return _modelled(host_cost.move(size))


for _name, _builder in (("Transpose", _transpose), ("Cast", _cast), ("Mul", _mul), ("ZerosLike", _zeros_like),
                        ("Sort", _sort), ("GatherV2", _gather), ("ViewCopy", _view_copy)):
    register_op(_name, _builder)
