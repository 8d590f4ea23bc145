"""The register file and the VF scope: `__VEC_SCOPE__` brackets, RegTensor / MaskReg views, the prologue every
register instruction runs (`_instr`) and the operand-type checks the instructions share.

RegTensor<T> is `vreg_f32(c, r)` etc., a typed view of vector register r (VL = 256 bytes) of the per-core register
file in the core's state array (layout.REG_BASE), so no instruction or VF allocates. MaskReg is `mreg(c, m)`: 256
predicate bytes, one per byte lane; a lane of a T-typed instruction is active when the predicate byte of its FIRST
byte is set."""
from __future__ import annotations

import numpy as np

from .._jit import aicore
from ..dtypes import DT_FLOAT
from ..faults import fault, issue
from ..layout import (
    CALL_R_VEC_SCOPE,
    CALL_VF,
    CAP_NPU_ARCH,
    ERR_BASE,
    F_ELEM_TYPE,
    F_UNSUPPORTED,
    MREG_BASE,
    N_MREGS,
    N_VREGS,
    REG_BASE,
    VF_INSTR,
    VF_KIND_BASE,
    VF_OPEN,
    VREG_WORDS,
    VTMP_BASE,
)
from ..timeline import vector

VL = 256                 # bytes of one vector register
HALF_LANES = VL // 4     # 16-bit elements an UNPACK_B16 load / PACK_B32 store moves (one per 32-bit lane)
REGBASE_ARCH = 3510      # npu_arch of Ascend 950, the only chip with MicroAPI

ZEROING = 0              # MaskMergeMode
MERGING = 1

# what a register instruction counts as in the open VF's per-kind tally (layout.VF_KIND_BASE + kind)
KIND_MASK, KIND_LOAD, KIND_STORE, KIND_ARITH, KIND_CAST, KIND_CMPSEL, KIND_REDUCE, KIND_MOVE = range(8)

# mode -1 of an F_UNSUPPORTED record from a register instruction: it ran outside a __VEC_SCOPE__
MODE_NO_SCOPE = -1


@aicore
def vec_scope_begin(c):
    """Open a VF (`__VEC_SCOPE__`); False if it must not run (an earlier fault, or a chip without MicroAPI)."""
    if not issue(c, CALL_R_VEC_SCOPE):
        return False
    if c.state[CAP_NPU_ARCH] != REGBASE_ARCH:
        fault(c, F_UNSUPPORTED, CALL_R_VEC_SCOPE, DT_FLOAT, 0, c.state[CAP_NPU_ARCH])
        return False
    c.state[VF_OPEN] = 1
    c.state[VF_INSTR] = 0
    return True


@aicore
def vec_scope_end(c):
    """Close the VF: it takes PIPE_V as one instruction of (register instructions inside it) repeats."""
    if c.state[VF_OPEN] == 0:
        return
    c.state[VF_OPEN] = 0
    if c.state[ERR_BASE] == 0:
        vector(c, CALL_VF, c.state[VF_INSTR])


@aicore
def _instr(c, call, kind):
    """Prologue of one register instruction: False if it must do nothing."""
    if not issue(c, call):
        return False
    if c.state[CAP_NPU_ARCH] != REGBASE_ARCH:
        fault(c, F_UNSUPPORTED, call, DT_FLOAT, 0, c.state[CAP_NPU_ARCH])
        return False
    if c.state[VF_OPEN] == 0:
        fault(c, F_UNSUPPORTED, call, DT_FLOAT, MODE_NO_SCOPE, c.state[CAP_NPU_ARCH])
        return False
    c.state[VF_INSTR] += 1
    c.state[VF_KIND_BASE + kind] += 1
    return True


@aicore
def _vreg_words(c, r):
    base = REG_BASE + (r % N_VREGS) * VREG_WORDS
    return c.state[base: base + VREG_WORDS]


# RegTensor<T> views of register r (0..31); r is taken modulo 32, so a view never leaves the register file.
@aicore
def vreg_f32(c, r):
    """RegTensor<float32> view of vector register r (0..31, taken modulo 32): 64 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.float32)


@aicore
def vreg_i32(c, r):
    """RegTensor<int32> view of vector register r (0..31, taken modulo 32): 64 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.int32)


@aicore
def vreg_u32(c, r):
    """RegTensor<uint32> view of vector register r (0..31, taken modulo 32): 64 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.uint32)


@aicore
def vreg_i16(c, r):
    """RegTensor<int16> view of vector register r (0..31, taken modulo 32): 128 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.int16)


@aicore
def vreg_u16(c, r):
    """RegTensor<half> / <bfloat16_t> as their bit patterns."""
    return _vreg_words(c, r).view(np.uint16)


@aicore
def vreg_u8(c, r):
    """RegTensor<uint8> view of vector register r (0..31, taken modulo 32): 256 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.uint8)


@aicore
def vreg_i8(c, r):
    """RegTensor<int8> view of vector register r (0..31, taken modulo 32): 256 lanes, 256 bytes."""
    return _vreg_words(c, r).view(np.int8)


@aicore
def mreg(c, m):
    """MaskReg m (0..7, modulo 8): 256 predicate bytes."""
    base = MREG_BASE + (m % N_MREGS) * VREG_WORDS
    return c.state[base: base + VREG_WORDS].view(np.uint8)


@aicore
def _vtmp_u8(c):
    return c.state[VTMP_BASE: VTMP_BASE + 2 * VREG_WORDS].view(np.uint8)


@aicore
def _same_type(c, call, x, y):
    if x.itemsize != y.itemsize:
        fault(c, F_ELEM_TYPE, call, x.itemsize, y.itemsize)
        return False
    return True


@aicore
def _b16_operands(c, call, a, b):
    if a.itemsize != 2 or b.itemsize != 2:
        fault(c, F_ELEM_TYPE, call, a.itemsize, b.itemsize)
        return False
    return True


@aicore
def _int_operands(c, call, x, y):
    """Bitwise instructions take unsigned / signed 16- or 32-bit registers of one width."""
    if x.itemsize != y.itemsize or (x.itemsize != 2 and x.itemsize != 4):
        fault(c, F_ELEM_TYPE, call, x.itemsize, y.itemsize)
        return False
    return True
