"""The arch35 register-based vector model: `__VEC_SCOPE__` functions over MicroAPI registers (Ascend 950 only).

A VF is bracketed by `vec_scope_begin(c)` / `vec_scope_end(c)`. Inside it a kernel works on
* RegTensor<T>: `vreg_f32(c, r)` etc., a typed view of vector register r (256 bytes) of the per-core register
  file, which lives in the core's state array (layout.REG_BASE), so no instruction or VF allocates;
* MaskReg: `mreg(c, m)`, 256 bytes, one predicate byte per byte lane. A lane of a T-typed instruction is active
  when the predicate byte of its FIRST byte is set (the hardware's per-byte predicate, read at the lane's start);
  CreateMask / UpdateMask / Compare set every byte of a lane, so a mask made for one width reads the same
  lanes at that width.
Inactive lanes of a destination register are zeroed (MaskMergeMode::ZEROING, MicroAPI's default) or kept
(MERGING), chosen by the `mode` argument.

Each instruction counts as one call (fault records locate it) and one register instruction of the open VF;
the VF is charged at `vec_scope_end` as ONE PIPE_V instruction of n repeats, n = register instructions inside it,
at the cost model's cycles per repeat for CALL_VF (an assumed figure: one register instruction issues per
CALL_VF repeat cost, as a pipelined VF issues about one instruction per cycle). In checked mode every UB load /
store is a PIPE_V UB access of CALL_VF.

The instructions live in one module per concern; this package's namespace holds them all, so kernels write
`from ascend_sim import regbase as rb` / `rb.vadd(...)` (or take them from kernel_api):

| module     | what it holds                                                                              |
|------------|--------------------------------------------------------------------------------------------|
| registers  | VL, the VF scope, RegTensor / MaskReg views, the instruction prologue, operand-type checks |
| masks      | CreateMask, UpdateMask, MaskAnd / MaskOr / MaskDeInterleave                                |
| ub_access  | the checked UB span of a load or store (inside its LocalTensor, or inside the UB)          |
| loads      | DataCopy LoadDist NORM / BRC / UNPACK / DINTLV / E2B, LoadAlign, unaligned load, gather   |
| stores     | DataCopy StoreDist NORM / PACK*, raw-pointer stores, unaligned store, UnalignReg stream    |
| arith      | Add / Sub / Mul / Div / Max / Min, Adds / Muls / Maxs, Abs, And, shifts, bf16 Mul          |
| compare    | Compare, CompareScalar, Select                                                             |
| reduce     | ReduceSum / Max / Min, ReduceMaxWithDataBlock                                              |
| moves      | Duplicate, Copy, Arange, GatherMask, (De)Interleave, Pack, UnPack                          |
| casts      | the standard-type casts (RegLayout, SatMode, round modes), Truncate                        |
| mx_casts   | fp32 -> FP8 and bf16 -> FP4 (the MX element formats)                                       |
| first_element | StoreDist::DIST_FIRST_ELEMENT_B32 (one lane to any float address)                      |

Not modelled: the other LoadDist / StoreDist modes and width casts.

The underscored helpers exported here (`_instr`, the operand checks, the UB span checks, the register views'
words) are the pieces a new instruction module builds on.
"""
from .arith import (
    vabs,
    vadd,
    vadds,
    vand,
    vdiv,
    vmax,
    vmaxs,
    vmin,
    vmul,
    vmul_bf16,
    vmuls,
    vshift_lefts,
    vshift_rights,
    vsub,
)
from .casts import (
    LAYOUT_ONE,
    LAYOUT_ZERO,
    NO_SAT,
    SAT,
    vcast_b16_to_f32,
    vcast_f16_to_bf16,
    vcast_f32_to_bf16,
    vcast_f32_to_f16,
    vcast_f32_to_i32,
    vcast_half_to_f32,
    vcast_i32_to_f32,
    vcast_i32_to_u8,
    vcast_u16_to_u32,
    vtruncate,
)
from .compare import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, vcompare, vcompare_scalar, vselect
from .first_element import reg_store_first_element
from .loads import (
    LOAD_BRC,
    LOAD_NORM,
    reg_gather,
    reg_load,
    reg_load_align,
    reg_load_dintlv,
    reg_load_e2b,
    reg_load_span,
    reg_load_unalign,
    reg_load_unpack4_b8,
    reg_load_unpack_b16,
)
from .masks import (
    PAT_ALL,
    PAT_ALLF,
    PAT_H,
    PAT_M3,
    PAT_M4,
    PAT_Q,
    create_mask,
    update_mask,
    vmask_and,
    vmask_deinterleave,
    vmask_or,
)
from .moves import (
    varange,
    vcopy,
    vdeinterleave,
    vduplicate,
    vduplicate_all,
    vduplicate_reg,
    vgather_mask,
    vinterleave,
    vinterleave_inplace,
    vpack_lowest,
    vunpack_u16_to_u32,
)
from .mx_casts import vcast_bf16_to_fp4, vcast_f32_to_fp8
from .reduce import vreduce_max, vreduce_max_with_datablock, vreduce_min, vreduce_sum
from .registers import (
    HALF_LANES,
    KIND_ARITH,
    KIND_CAST,
    KIND_CMPSEL,
    KIND_LOAD,
    KIND_MASK,
    KIND_MOVE,
    KIND_REDUCE,
    KIND_STORE,
    MERGING,
    MODE_NO_SCOPE,
    REGBASE_ARCH,
    VL,
    ZEROING,
    _b16_operands,
    _instr,
    _int_operands,
    _same_type,
    _vreg_words,
    _vtmp_u8,
    mreg,
    vec_scope_begin,
    vec_scope_end,
    vreg_f32,
    vreg_i8,
    vreg_i16,
    vreg_i32,
    vreg_u8,
    vreg_u16,
    vreg_u32,
)
from .stores import (
    STORE_NORM,
    _ureg_words,
    reg_store,
    reg_store_pack4,
    reg_store_pack4_span,
    reg_store_pack_b16,
    reg_store_pack_b32,
    reg_store_span,
    reg_store_unalign,
    reg_store_unalign_post,
    reg_store_unalign_stream,
    unalign_reg,
)
from .ub_access import _ub_reach, _ub_span
