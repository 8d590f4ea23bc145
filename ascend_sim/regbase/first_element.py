"""StoreDist::DIST_FIRST_ELEMENT_B32: the one-lane store a VF writes a ReduceSum result with."""
from __future__ import annotations

from .. import check as chk
from .._jit import aicore
from ..faults import fault
from ..layout import CALL_R_STORE, CALL_VF, F_ELEM_TYPE, PIPE_V
from ..local import note_ub_write
from .registers import KIND_STORE, _instr
from .ub_access import _ub_span


@aicore
def reg_store_first_element(c, t, src, offset, mask):
    """DataCopy<T, StoreDist::DIST_FIRST_ELEMENT_B32>(t + offset, src, mask) for a 32-bit T: lane 0 of src to
    t[offset] when the mask keeps lane 0 (the kernels pass a VL1 mask); nothing else is written. The address needs
    only the element's alignment (the kernels store row sums at consecutive floats). Returns offset + 1."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 1
    isz = src.itemsize
    if isz != 4 or t.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + 1
    if mask[0] == 0:
        return offset + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, isz, isz)
    if a < 0:
        return offset + 1
    chk.ub(c, CALL_VF, PIPE_V, a, isz, True)
    t[offset] = src[0]
    note_ub_write(c, a + isz)
    return offset + 1
