"""The AscendC calls a simulated kernel uses, in one namespace.

Kernels import this module as `asc` and write `asc.data_copy_pad(c, ...)` where AscendC
code writes `DataCopyPad(...)`. Every function takes the core context `c` first.
"""
# device functions and kernel stage entries
from ._jit import DEVICE_JIT_OPTIONS, aicore, global_aicore, host_jit

# a LocalTensor view at a byte offset, without slicing
from ._memory import ub_view

# a call compiled once as its own function, not inlined
from ._outline import outline
from .atomic import set_atomic_add, set_atomic_max, set_atomic_none

# DataCacheCleanAndInvalid, CacheLine, DcciDst
from .cache import (
    CACHELINE_ALL,
    CACHELINE_ATOMIC,
    CACHELINE_OUT,
    CACHELINE_UB,
    ENTIRE_DATA_CACHE,
    SINGLE_CACHE_LINE,
    data_cache_clean_and_invalid,
)
from .core import Core
from .datacopy import (
    NO_PAD,
    DataCopyExtParams,
    DataCopyPadExtParams,
    DataCopyParams,
    GlobalTensor,
    data_copy,
    data_copy_pad,
    gm_as_i32,
    gm_at,
    init_output,
)
from .dtypes import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT4_E2M1,
    DT_FLOAT8_E4M3FN,
    DT_FLOAT8_E5M2,
    DT_FLOAT16,
    DT_INT8,
    DT_INT32,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_mini_float_bits,
)
from .events import (
    MTE2_MTE3,
    MTE2_S,
    MTE2_V,
    MTE3_MTE2,
    MTE3_S,
    MTE3_V,
    PIPE_ALL,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_S,
    PIPE_V,
    S_MTE2,
    S_MTE3,
    S_V,
    V_MTE2,
    V_MTE3,
    V_S,
    V_V,
    fetch_event_id,
    pipe_barrier,
    set_flag,
    sync_pipes,
    wait_flag,
)

# the UB block (32 bytes) and bytes rounded up to it
from .layout import BLOCK_BYTES, align32
from .local import ub_f32, ub_i8, ub_i16, ub_i32, ub_i64, ub_like, ub_offset, ub_u8, ub_u16, ub_u32, view_as
from .mask import (
    CMP_EQ,
    CMP_GE,
    CMP_GT,
    CMP_LE,
    CMP_LT,
    CMP_NE,
    GatherMaskParams,
    cast_f32_to_i32,
    cast_u8_to_half,
    compare_scalar,
    gather_mask,
)

# queue / TBuf ids from the buffer-name tuple
from .pipe import buffer_ids
from .queue import alloc_tensor, de_que, en_que, free_tensor, tbuf_get, tbuf_get_with_offset

# MicroAPI (arch35 __VEC_SCOPE__ register instructions)
from .regbase import CMP_EQ as R_CMP_EQ
from .regbase import CMP_GE as R_CMP_GE
from .regbase import CMP_GT as R_CMP_GT
from .regbase import CMP_LE as R_CMP_LE
from .regbase import CMP_LT as R_CMP_LT
from .regbase import CMP_NE as R_CMP_NE

# MicroAPI: UNPACK_B16 load, PACK_B32 store, fp16 / bf16 <-> fp32 casts
# MoeFinalizeRoutingV2 VFs
# MoeMaskedScatter VF
from .regbase import (
    LAYOUT_ONE,
    LAYOUT_ZERO,
    LOAD_BRC,
    LOAD_NORM,
    MERGING,
    NO_SAT,
    PAT_ALL,
    PAT_ALLF,
    PAT_H,
    PAT_M3,
    PAT_M4,
    PAT_Q,
    SAT,
    STORE_NORM,
    ZEROING,
    create_mask,
    mreg,
    reg_gather,
    reg_load,
    reg_load_align,
    reg_load_unalign,
    reg_load_unpack4_b8,
    reg_load_unpack_b16,
    reg_store,
    reg_store_pack4,
    reg_store_pack_b32,
    reg_store_unalign,
    update_mask,
    vabs,
    vadd,
    vadds,
    varange,
    vcast_f32_to_bf16,
    vcast_f32_to_f16,
    vcast_f32_to_i32,
    vcast_half_to_f32,
    vcast_i32_to_f32,
    vcast_i32_to_u8,
    vcast_u16_to_u32,
    vcompare,
    vcompare_scalar,
    vcopy,
    vdeinterleave,
    vdiv,
    vduplicate,
    vduplicate_reg,
    vec_scope_begin,
    vec_scope_end,
    vgather_mask,
    vinterleave,
    vmask_and,
    vmax,
    vmin,
    vmul,
    vmuls,
    vreduce_max,
    vreduce_min,
    vreduce_sum,
    vreg_f32,
    vreg_i8,
    vreg_i16,
    vreg_i32,
    vreg_u8,
    vreg_u16,
    vreg_u32,
    vselect,
    vsub,
    vunpack_u16_to_u32,
)

# AtomicAdd / AtomicExch on a GM element
from .scalar import atomic_add, atomic_exch, get_value, members, scalar_load, scalar_store, set_value, to_float

# asc_vf_call / Simt::VF_CALL, GetThreadIdx, GetThreadNum, AtomicAdd
from .simt import simt_atomic_add, simt_end, simt_load, simt_store, simt_thread, simt_vf_call, thread_idx, thread_num
from .sort import arith_progression, concat, duplicate_mask, extract, mrg_sort, sort
from .vector import (
    CopyRepeatParams,
    add,
    adds,
    as_elem,
    block_reduce_sum,
    cast,
    copy,
    copy_count,
    duplicate,
    mul,
    muls,
    muls_half,
    whole_reduce_sum,
)
from .vf import vf_call, vf_operand
