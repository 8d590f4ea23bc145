"""A register instruction's fault names the instruction's own AscendC call: outside a __VEC_SCOPE__ (the prologue
every instruction runs) and, for the instructions that check their operands, from the check in its body."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, OutOfBoundsError, ParamRangeError
from ascend_sim import regbase as rb
from ascend_sim._jit import global_aicore

from .harness import run_vf

# One kernel calling every register instruction with operand types no shipped kernel uses: ~10 s of cold
# compile for the fault messages alone, so the file runs with the slow sweeps
pytestmark = pytest.mark.slow

F32 = 4


@global_aicore
def fault_name_kernel(c, p, src, dst):
    """p[0] picks the instruction, p[1] = 1 runs it inside a VF (else outside any). Where the instruction checks
    its operands it gets operands that fail the check; the others get well-formed ones."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.view_as(c, x, asc.ub_u16(c))
    f0, f1 = rb.vreg_f32(c, 0), rb.vreg_f32(c, 1)
    i0, u0 = rb.vreg_i32(c, 2), rb.vreg_u32(c, 3)
    h0, h1 = rb.vreg_u16(c, 4), rb.vreg_u16(c, 5)
    m0, m1 = rb.mreg(c, 0), rb.mreg(c, 1)
    if p[1] == 1 and not asc.vec_scope_begin(c):
        return
    if p[1] == 1:
        rb.create_mask(c, m0, F32, rb.PAT_ALL)
        rb.vduplicate(c, u0, np.uint32(1 << 20), m0)        # gather indices past x's end
    op = p[0]
    if op == 0:
        rb.vmask_and(c, m0, m0, m1, m0)
    elif op == 1:
        rb.vmask_or(c, m0, m0, m1, m0)
    elif op == 2:
        rb.vmask_deinterleave(c, m0, m1, m0, m1, 3)          # no 3-byte element type
    elif op == 3:
        rb.vcopy(c, f0, h0, m0)                              # element types differ
    elif op == 4:
        rb.vpack_lowest(c, h0, h1)                           # src must be 32-bit
    elif op == 5:
        rb.vunpack_u16_to_u32(c, h0, h1)                     # dst must be 32-bit
    elif op == 6:
        rb.vinterleave(c, f0, f1, f0, f1)
    elif op == 7:
        rb.vdeinterleave(c, f0, f1, h0, h1)                  # element types differ
    elif op == 8:
        rb.vtruncate(c, h0, f0, asc.CAST_RINT, m0)           # fp32 only
    elif op == 9:
        rb.vcompare_scalar(c, m1, f0, np.float32(0.0), rb.CMP_LT, m0)
    elif op == 10:
        rb.reg_load_unalign(c, f0, x, 0, -1)                 # negative count
    elif op == 11:
        rb.reg_load_align(c, f0, x, 1, False)                # not 32-byte aligned
    elif op == 12:
        rb.reg_gather(c, f0, x, u0, m0)                      # index outside x
    elif op == 13:
        rb.reg_store_unalign(c, y, f0, 0, -1)
    elif op == 14:
        rb.reg_store_unalign_stream(c, y, f0, rb.unalign_reg(c, 0), 0, -1)
    elif op == 15:
        rb.reg_store_unalign_post(c, y, rb.unalign_reg(c, 0), 0, 0)
    elif op == 16:
        rb.vadd(c, f0, f0, f1, m0)
    elif op == 17:
        rb.vsub(c, f0, f0, f1, m0)
    elif op == 18:
        rb.vmul(c, f0, f0, f1, m0)
    elif op == 19:
        rb.vdiv(c, f0, f0, f1, m0)
    elif op == 20:
        rb.vmax(c, f0, f0, f1, m0)
    elif op == 21:
        rb.vmin(c, f0, f0, f1, m0)
    elif op == 22:
        rb.vabs(c, f0, f1, m0)
    elif op == 23:
        rb.vadds(c, f0, f1, np.float32(1.0), m0)
    elif op == 24:
        rb.vmuls(c, f0, f1, np.float32(1.0), m0)
    elif op == 25:
        rb.vmaxs(c, f0, f1, np.float32(1.0), m0)
    elif op == 26:
        rb.vand(c, i0, i0, i0, m0)
    elif op == 27:
        rb.vshift_lefts(c, i0, i0, 99, m0)                   # shift past the element's bits
    elif op == 28:
        rb.vshift_rights(c, i0, i0, 99, m0)
    elif op == 29:
        rb.vmul_bf16(c, f0, h0, h1, m0)                      # bf16 bit patterns only
    elif op == 30:
        rb.vreduce_sum(c, f0, f1, m0)
    elif op == 31:
        rb.vreduce_max(c, f0, f1, m0)
    elif op == 32:
        rb.vreduce_min(c, f0, f1, m0)
    elif op == 33:
        rb.vreduce_max_with_datablock(c, f0, f1, m0)
    elif op == 34:
        rb.vduplicate_reg(c, f0, f1, m0)
    elif op == 35:
        rb.vcast_f32_to_f16(c, h0, f0, asc.CAST_RINT, 2, m0)  # no RegLayout 2
    elif op == 36:
        rb.vcast_f32_to_bf16(c, h0, f0, asc.CAST_RINT, 2, m0)
    if p[1] == 1:
        asc.vec_scope_end(c)


# instruction: (case, the AscendC call its faults name, the error its own operand check raises or None)
CASES = {
    "vmask_and": (0, "MicroAPI::MaskAnd", None),
    "vmask_or": (1, "MicroAPI::MaskOr", None),
    "vmask_deinterleave": (2, "MicroAPI::MaskDeInterleave", ParamRangeError),
    "vcopy": (3, "MicroAPI::Copy", ElementTypeError),
    "vpack_lowest": (4, "MicroAPI::Pack", ElementTypeError),
    "vunpack_u16_to_u32": (5, "MicroAPI::UnPack", ElementTypeError),
    "vinterleave": (6, "MicroAPI::Interleave", None),
    "vdeinterleave": (7, "MicroAPI::DeInterleave", ElementTypeError),
    "vtruncate": (8, "MicroAPI::Truncate", ElementTypeError),
    "vcompare_scalar": (9, "MicroAPI::CompareScalar", None),
    "reg_load_unalign": (10, "MicroAPI::DataCopyUnAlign(UB->RegTensor)", ParamRangeError),
    "reg_load_align": (11, "MicroAPI::LoadAlign", AlignmentError),
    "reg_gather": (12, "MicroAPI::DataCopyGather", OutOfBoundsError),
    "reg_store_unalign": (13, "MicroAPI::DataCopyUnAlign(RegTensor->UB)", ParamRangeError),
    "reg_store_unalign_stream": (14, "MicroAPI::DataCopyUnAlign(RegTensor->UB)", ParamRangeError),
    "reg_store_unalign_post": (15, "MicroAPI::DataCopyUnAlignPost", None),
    "vadd": (16, "MicroAPI::Add", None),
    "vsub": (17, "MicroAPI::Sub", None),
    "vmul": (18, "MicroAPI::Mul", None),
    "vdiv": (19, "MicroAPI::Div", None),
    "vmax": (20, "MicroAPI::Max", None),
    "vmin": (21, "MicroAPI::Min", None),
    "vabs": (22, "MicroAPI::Abs", None),
    "vadds": (23, "MicroAPI::Adds", None),
    "vmuls": (24, "MicroAPI::Muls", None),
    "vmaxs": (25, "MicroAPI::Maxs", None),
    "vand": (26, "MicroAPI::And", None),
    "vshift_lefts": (27, "MicroAPI::ShiftLefts", ParamRangeError),
    "vshift_rights": (28, "MicroAPI::ShiftRights", ParamRangeError),
    "vmul_bf16": (29, "MicroAPI::Mul", ElementTypeError),
    "vreduce_sum": (30, "MicroAPI::ReduceSum", None),
    "vreduce_max": (31, "MicroAPI::ReduceMax", None),
    "vreduce_min": (32, "MicroAPI::ReduceMin", None),
    "vreduce_max_with_datablock": (33, "MicroAPI::ReduceMaxWithDataBlock", None),
    "vduplicate_reg": (34, "MicroAPI::Duplicate", None),
    "vcast_f32_to_f16": (35, "MicroAPI::Cast", ParamRangeError),
    "vcast_f32_to_bf16": (36, "MicroAPI::Cast", ParamRangeError),
}


def _fault(case: int, in_scope: bool):
    with pytest.raises((ElementTypeError, ParamRangeError, AlignmentError, OutOfBoundsError)) as exc:
        run_vf(fault_name_kernel, [case, int(in_scope)], np.zeros(256, np.float32), np.zeros(256, np.float32))
    return exc.value


@pytest.mark.parametrize("name", list(CASES))
def test_outside_a_vf_the_instruction_names_itself(name):
    case, call, _ = CASES[name]
    err = _fault(case, False)
    assert isinstance(err, ElementTypeError) and "mode -1" in str(err)
    assert err.call.startswith(f"{call} (call #"), err.call


@pytest.mark.parametrize("name", [n for n, (_, _, error) in CASES.items() if error is not None])
def test_the_operand_check_names_the_instruction(name):
    case, call, error = CASES[name]
    err = _fault(case, True)
    assert type(err) is error, repr(err)
    assert err.call.startswith(f"{call} (call #"), err.call
