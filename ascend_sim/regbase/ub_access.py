"""The UB span a register load or store touches, checked before any byte moves: inside its LocalTensor
(`_ub_span`, the DataCopy forms on a LocalTensor) or only inside the UB (`_ub_reach`, the raw `__ubuf__` pointer
forms, which may run past the buffer they start in). Both return the span's UB byte address, or -1 after a fault."""
from __future__ import annotations

from .._jit import aicore
from ..faults import fault
from ..layout import F_UB_ALIGN, F_UB_OOB
from ..local import ub_offset


@aicore
def _ub_span(c, call, t, offset, nbytes, align):
    """UB byte address of element `offset` of LocalTensor t, checked: nbytes from there stay in t (and so in the
    UB), the address is `align`-byte aligned. -1 after a fault."""
    base = ub_offset(c, t, call)
    if base < 0:
        return -1
    start = base + offset * t.itemsize
    if offset < 0 or offset * t.itemsize + nbytes > t.nbytes:
        fault(c, F_UB_OOB, call, base, offset * t.itemsize + nbytes, t.nbytes)
        return -1
    if start % align != 0:
        fault(c, F_UB_ALIGN, call, start, align)
        return -1
    return start


@aicore
def _ub_reach(c, call, t, offset, nbytes, align):
    """UB byte address of element `offset` of t read as a raw `__ubuf__` pointer: nbytes from there must stay
    in the UB (not in t: a register load may run past the end of the buffer it starts in, as the kernels'
    whole-register loads of short rows do), `align`-byte aligned. -1 after a fault."""
    base = ub_offset(c, t, call)
    if base < 0:
        return -1
    start = base + offset * t.itemsize
    if offset < 0 or start + nbytes > c.ub.size:
        fault(c, F_UB_OOB, call, base, offset * t.itemsize + nbytes, c.ub.size - base)
        return -1
    if start % align != 0:
        fault(c, F_UB_ALIGN, call, start, align)
        return -1
    return start
