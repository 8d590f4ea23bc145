"""The AscendC calls a simulated kernel uses, in one namespace.

Kernels import this module as `asc` and write `asc.data_copy_pad(c, ...)` where AscendC
code writes `DataCopyPad(...)`. Every function takes the core context `c` first.
"""
from ._jit import aicore, global_aicore  # noqa: F401   (device functions and kernel stage entries)
from .core import Core  # noqa: F401
from .layout import BLOCK_BYTES, align32  # noqa: F401   (the UB block: 32 bytes, and bytes rounded up to it)
from .datacopy import (DataCopyExtParams, DataCopyPadExtParams, DataCopyParams, GlobalTensor, NO_PAD,  # noqa: F401
                       data_copy, data_copy_pad, gm_as_i32, gm_at, init_output)
from .atomic import set_atomic_add, set_atomic_max, set_atomic_none  # noqa: F401
from .dtypes import (CAST_CEIL, CAST_FLOOR, CAST_NONE, CAST_ODD, CAST_RINT, CAST_ROUND, CAST_TRUNC,  # noqa: F401
                     DT_BF16, DT_FLOAT, DT_FLOAT16, DT_INT8, DT_INT32)
from .events import (MTE2_MTE3, MTE2_S, MTE2_V, MTE3_MTE2, MTE3_S, MTE3_V, PIPE_ALL, PIPE_MTE2,  # noqa: F401
                     PIPE_MTE3, PIPE_S, PIPE_V, S_MTE2, S_MTE3, S_V, V_MTE2, V_MTE3, V_S, V_V, fetch_event_id,
                     pipe_barrier, set_flag, sync_pipes, wait_flag)
from .local import ub_f32, ub_i8, ub_i16, ub_u8, ub_i32, ub_i64, ub_like, ub_offset, ub_u16, ub_u32, view_as  # noqa: F401
from .pipe import buffer_ids  # noqa: F401   (queue / TBuf ids from the buffer-name tuple)
from .queue import alloc_tensor, de_que, en_que, free_tensor, tbuf_get, tbuf_get_with_offset  # noqa: F401
from .scalar import (atomic_add, atomic_exch, get_value, members, scalar_load, scalar_store,  # noqa: F401
                     set_value, to_float)   # AtomicAdd / AtomicExch on a GM element
from .vector import (CopyRepeatParams, add, adds, as_elem, block_reduce_sum, cast, copy, copy_count, duplicate,  # noqa: F401
                     mul, muls, muls_half, whole_reduce_sum)
from .sort import arith_progression, concat, duplicate_mask, extract, mrg_sort, sort  # noqa: F401
from .vf import vf_call, vf_operand  # noqa: F401
from .mask import (CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, GatherMaskParams, cast_f32_to_i32,  # noqa: F401
                   cast_u8_to_half, compare_scalar, gather_mask)
from .dtypes import (DT_FLOAT4_E2M1, DT_FLOAT8_E4M3FN, DT_FLOAT8_E5M2, bf16_bits_to_f32_bits,  # noqa: F401
                     f16_bits_to_f32_bits, f32_bits_to_bf16_bits, f32_bits_to_mini_float_bits)
from .simt import (simt_atomic_add, simt_end, simt_load, simt_store, simt_thread, simt_vf_call,  # noqa: F401
                   thread_idx, thread_num)   # asc_vf_call / Simt::VF_CALL, GetThreadIdx, GetThreadNum, AtomicAdd
from .cache import (CACHELINE_ALL, CACHELINE_ATOMIC, CACHELINE_OUT, CACHELINE_UB, ENTIRE_DATA_CACHE,  # noqa: F401
                    SINGLE_CACHE_LINE, data_cache_clean_and_invalid)   # DataCacheCleanAndInvalid, CacheLine, DcciDst
from .regbase import (CMP_EQ as R_CMP_EQ, CMP_GE as R_CMP_GE, CMP_GT as R_CMP_GT, CMP_LE as R_CMP_LE,  # noqa: F401
                      CMP_LT as R_CMP_LT, CMP_NE as R_CMP_NE, LAYOUT_ONE, LAYOUT_ZERO, LOAD_BRC, LOAD_NORM, MERGING,
                      NO_SAT, PAT_ALL, PAT_ALLF, PAT_H, PAT_M3, PAT_M4, PAT_Q, SAT, STORE_NORM, ZEROING, create_mask,
                      mreg, reg_load, reg_load_unalign, reg_store, reg_store_pack4, reg_store_unalign, update_mask,
                      vabs, vadd, vadds, varange, vcast_f32_to_f16, vcast_f32_to_i32, vcast_i32_to_f32,
                      vcast_i32_to_u8, vcast_u16_to_u32, vcompare, vcompare_scalar, vdeinterleave, vdiv, vduplicate,
                      vec_scope_begin, vec_scope_end, vgather_mask, vinterleave, vmask_and, vmax, vmin, vmul, vmuls,
                      vreduce_max, vreduce_min, vreduce_sum, vreg_f32, vreg_i16, vreg_i32, vreg_i8, vreg_u16,
                      vreg_u32, vreg_u8, vselect, vsub)   # MicroAPI (arch35 __VEC_SCOPE__ register instructions)
from .regbase import (reg_load_unpack_b16, reg_store_pack_b32, vcast_f32_to_bf16,  # noqa: F401,E501
                      vcast_half_to_f32)   # MicroAPI: UNPACK_B16 load, PACK_B32 store, fp16 / bf16 <-> fp32 casts
from .regbase import reg_load_align, vunpack_u16_to_u32  # noqa: F401,E402   (MoeFinalizeRoutingV2 VFs)
from .regbase import reg_gather, reg_load_unpack4_b8, vcopy, vduplicate_reg  # noqa: F401,E402   (MoeMaskedScatter VF)
