"""Copy on LocalTensors, both forms (vector.py): the count form Copy(dst, src, count) and the repeat form
Copy(dst, src, mask, repeatTime, CopyRepeatParams), against hand-worked elements, and the operand checks they
share (alignment, the span each operand must hold)."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, OutOfBoundsError
from ascend_sim._jit import global_aicore
from tiling import get_soc

from .harness import run, tbuf

X = np.arange(256, dtype=np.float32) + 0.5


@global_aicore
def copy_kernel(c, p, src, dst):
    """x = src (256 fp32) in UB, y = -1; p[0] 0: Copy(y[p[5]:p[1]], x[:p[2]], p[3]); 1: Copy(y[:p[1]], x[:p[2]],
    mask p[3], repeatTime p[4], block stride 1, repeat stride 8); 2 / 3: forms 0 / 1 with y seen as uint16 (a
    different T); y dumped to dst."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, -1.0, y.size)
    asc.pipe_barrier(c, asc.PIPE_ALL)
    yh = asc.view_as(c, y, asc.ub_u16(c))
    if p[0] == 0:
        asc.copy_count(c, y[p[5]: p[1]], x[: p[2]], p[3])
    elif p[0] == 1:
        asc.copy(c, y[: p[1]], x[: p[2]], p[3], p[4], asc.CopyRepeatParams(1, 1, 8, 8))
    elif p[0] == 2:
        asc.copy_count(c, yh[p[5]: p[1]], x[: p[2]], p[3])
    else:
        asc.copy(c, yh[: p[1]], x[: p[2]], p[3], p[4], asc.CopyRepeatParams(1, 1, 8, 8))
    asc.pipe_barrier(c, asc.PIPE_ALL)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


def launch(p):
    dst = np.zeros(256, np.float32)
    p = list(p) + [0] * (6 - len(p))
    run([copy_kernel], [tbuf("x", 1024), tbuf("y", 1024)], np.array(p, np.int64), asc.GlobalTensor(X.copy(), 0, 0),
        asc.GlobalTensor(dst, 1, 0), chip=get_soc("ascend950"))
    return dst


def _want(spans):
    want = np.full(256, -1.0, np.float32)
    for lo, hi in spans:
        want[lo:hi] = X[lo:hi]
    return want


@pytest.mark.parametrize("p, spans", [
    ((0, 256, 256, 70), [(0, 70)]),
    ((0, 256, 256, 0), []),
    ((1, 256, 256, 16, 2), [(0, 16), (64, 80)]),       # lanes 0..15 of repeats 0 and 1 (64 fp32 a repeat)
    ((1, 256, 256, 64, 1), [(0, 64)]),
], ids=["count-70", "count-0", "repeat-mask16-x2", "repeat-full"])
def test_copy_by_hand(p, spans):
    assert np.array_equal(launch(p), _want(spans))


@pytest.mark.parametrize("p, error", [
    ((0, 64, 256, 70), OutOfBoundsError),                # dst holds 64 of the 70
    ((0, 256, 64, 70), OutOfBoundsError),                # src holds 64
    ((0, 256, 256, 8, 0, 3), AlignmentError),            # dst at byte 12
    ((1, 70, 256, 16, 2), OutOfBoundsError),             # the second repeat reaches element 80 of dst
    ((1, 256, 70, 16, 2), OutOfBoundsError),             # ... of src
], ids=["count-dst-short", "count-src-short", "count-dst-unaligned", "repeat-dst-short", "repeat-src-short"])
def test_copy_operand_checks(p, error):
    with pytest.raises(error):
        launch(p)


@pytest.mark.parametrize("p", [(2, 512, 256, 70), (3, 512, 256, 16, 2)],
                         ids=["count-u16-from-f32", "repeat-u16-from-f32"])
def test_copy_takes_one_element_type(p):
    with pytest.raises(ElementTypeError) as exc:
        launch(p)
    assert exc.value.call.startswith("Copy (call #") and "2-byte destination and 4-byte source" in str(exc.value)
