"""Register-based vector functions: the `__VEC_SCOPE__` / VF_CALL code of Ascend 950 kernels.

On arch35 a kernel writes its vector work as a function over vector registers (loads with a
distribution mode, masked arithmetic, stores), launched on the vector pipe as one unit. The
simulator runs such a function as a plain numba loop over the LocalTensors it reads and
writes; `vf_call` opens it (sticky-fault check, one instruction, its element operations) and
`vf_operand` checks each operand before the loop touches it, so a VF body can index its
views directly without leaving the tensors it was given.
"""
from __future__ import annotations

from ._jit import aicore
from .core import CNT_V_ELEMS, CNT_V_INSTR
from .faults import CALL_VF, F_PARAM, P_COUNT, fault, issue
from .local import check_count, note_ub_write, ub_aligned_offset


@aicore
def vf_call(c, elems):
    """Start a vector function doing `elems` element operations; False if it must not run."""
    if not issue(c, CALL_VF):
        return False
    if elems < 0:
        fault(c, F_PARAM, CALL_VF, P_COUNT, elems, 0, 2147483647)
        return False
    c.state[CNT_V_INSTR] += 1
    c.state[CNT_V_ELEMS] += elems
    return True


@aicore
def vf_operand(c, t, count, written):
    """True if LocalTensor t is 32-byte aligned in UB and holds `count` elements (fault otherwise);
    `written` operands raise the UB high-water mark."""
    off = ub_aligned_offset(c, t, CALL_VF)
    if off < 0 or not check_count(c, t, count, CALL_VF):
        return False
    if written:
        note_ub_write(c, off + count * t.itemsize)
    return True
