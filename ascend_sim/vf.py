"""Register-based vector functions: the `__VEC_SCOPE__` / VF_CALL code of Ascend 950 kernels.

On arch35 a kernel writes its vector work as a function over vector registers (loads with a
distribution mode, masked arithmetic, stores), launched on the vector pipe as one unit. The
simulator runs such a function as a plain numba loop over the LocalTensors it reads and
writes; `vf_call` opens it (sticky-fault check, one instruction, its element operations) and
`vf_operand` checks each operand before the loop touches it, so a VF body can index its
views directly without leaving the tensors it was given.
"""
from __future__ import annotations

from . import check as chk
from ._jit import aicore
from .layout import CALL_VF, CHK_MODE, PIPE_V
from .local import note_ub_write
from .vector import _begin, _operand


@aicore
def vf_call(c, elems):
    """Start a vector function doing `elems` element operations; False if it must not run (a fault, or
    nothing to do) -- the same prologue as a count-form instruction. Its time is that of one instruction
    over `elems` fp32 lanes (a VF's operations are counted, not its register loads and stores)."""
    return _begin(c, CALL_VF, elems, 4)


@aicore
def vf_operand(c, t, count, written):
    """True if LocalTensor t is 32-byte aligned in UB and holds `count` elements (fault otherwise);
    `written` operands raise the UB high-water mark."""
    off = _operand(c, CALL_VF, t, count)
    if off < 0:
        return False
    if c.state[CHK_MODE] != 0:
        chk.ub(c, CALL_VF, PIPE_V, off, count * t.itemsize, written)
    if written:
        note_ub_write(c, off + count * t.itemsize)
    return True
