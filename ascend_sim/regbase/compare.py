"""Compare / CompareScalar (a register pair to a MaskReg) and Select (a MaskReg picks between two registers)."""
from __future__ import annotations

from .._jit import aicore
from ..layout import CALL_R_COMPARE, CALL_R_COMPARE_SCALAR, CALL_R_SELECT
from .registers import KIND_CMPSEL, _instr, _same_type

CMP_EQ, CMP_NE, CMP_GT, CMP_GE, CMP_LT, CMP_LE = range(6)   # CMPMODE


@aicore
def _cmp(x, y, cmp):
    if cmp == CMP_EQ:
        return x == y
    if cmp == CMP_NE:
        return x != y
    if cmp == CMP_GT:
        return x > y
    if cmp == CMP_GE:
        return x >= y
    if cmp == CMP_LT:
        return x < y
    return x <= y


@aicore
def vcompare(c, dst_mask, a, b, cmp, mask):
    """MicroAPI::Compare<T, cmp>(dst_mask, a, b, mask): a lane's predicate bytes are 1 where it is active and the
    comparison holds (IEEE: NaN compares unequal to everything), else 0."""
    if not _instr(c, CALL_R_COMPARE, KIND_CMPSEL):
        return
    if not _same_type(c, CALL_R_COMPARE, a, b):
        return
    isz = a.itemsize
    for i in range(a.size):
        p = 1 if mask[i * isz] != 0 and _cmp(a[i], b[i], cmp) else 0
        for k in range(isz):
            dst_mask[i * isz + k] = p


@aicore
def vcompare_scalar(c, dst_mask, a, s, cmp, mask):
    """MicroAPI::CompareScalar(dst_mask, a, scalar, mask)."""
    if not _instr(c, CALL_R_COMPARE_SCALAR, KIND_CMPSEL):
        return
    isz = a.itemsize
    for i in range(a.size):
        p = 1 if mask[i * isz] != 0 and _cmp(a[i], s, cmp) else 0
        for k in range(isz):
            dst_mask[i * isz + k] = p


@aicore
def vselect(c, dst, a, b, sel):
    """MicroAPI::Select(dst, a, b, sel): lane i is a[i] where sel is set, else b[i]."""
    if not _instr(c, CALL_R_SELECT, KIND_CMPSEL):
        return
    if not _same_type(c, CALL_R_SELECT, dst, a) or not _same_type(c, CALL_R_SELECT, dst, b):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        dst[i] = a[i] if sel[i * isz] != 0 else b[i]
