"""tiling.moe_masked_scatter: the arch35 (Ascend 950) host tiling of MoeMaskedScatter.

Upstream has no tiling unit test of this op (moe/3rd/moe_masked_scatter carries no tests/ folder @ 25fb6b92890d).
The cases below are worked by hand from moe/3rd/moe_masked_scatter/op_host/arch35/moe_masked_scatter_tiling.cpp:
on stock 950 the kernel UB is 253952 - 256 - 32768 = 220928 bytes, so ub_factor = 220928 / 10 = 22092 -> 22080
(a multiple of 64 int32 lanes) and, for 2-byte values, buffer_size = (220928 - 256) / 8 = 27584.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tiling
from tiling import TensorDesc as T
from tiling.moe_masked_scatter import FIELDS
from tiling.status import TilingError

BF16, F16, F32, F64, I8, I16, I32, I64, U8 = (ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.int8,
                                              np.int16, np.int32, np.int64, np.uint8)
MIB16 = 16 * 1024 * 1024
SMALL_UB = dict(ub_size=40960, aiv_num=4)      # kernel UB 40960 - 256 - 32768 = 7936 bytes


def _args(shape, dtype, updates_elems, soc="ascend950"):
    return T(shape, dtype), T(shape, np.bool_), T((updates_elems,), dtype), soc


# id: (x shape, dtype, updates elements, soc) -> key, block dim, workspace, fields, ub_plan rows (name, bytes, count)
CASES = {
    # 262144 elements over 64 cores: 4096 each, one piece of mask per core
    "fp32-64x4096-stock950": (_args((64, 4096), F32, 262144), 40, 64, MIB16 + (64 + 262144) * 4,
                              [4096, 4096, 22080, 1, 1, 4096, 4096, 262144, 0, 0],
                              [("maskQueue", 22080, 2), ("tmpBuf", 88320, 1), ("prefixSumQueue", 88320, 1)]),
    # 15 elements: the 1024-element core minimum leaves one core; updates may be longer or shorter than the mask
    "fp16-3x5-one-core": (_args((3, 5), F16, 7), 20, 1, MIB16 + (1 + 15) * 4,
                          [1024, 15, 22080, 1, 1, 1024, 15, 7, 27584, 256],
                          [("maskQueue", 22080, 2), ("tmpBuf", 88320, 1), ("prefixSumQueue", 88320, 1),
                           ("maskQueue", 27584, 2), ("xQueue", 55168, 2), ("tmpBuf", 256, 1), ("yQueue", 55168, 1)]),
    # ceil(196613 / 64) = 3073 a core; the last core takes 196613 - 63 * 3073 = 3014
    "int32-196613-tail-core": (_args((196613,), I32, 196613), 40, 64, MIB16 + (64 + 196613) * 4,
                               [3073, 3014, 22080, 1, 1, 3073, 3014, 196613, 0, 0],
                               [("maskQueue", 22080, 2), ("tmpBuf", 88320, 1), ("prefixSumQueue", 88320, 1)]),
    # custom 40 KiB UB on 4 cores: ub_factor 7936 / 10 -> 768; 2500 a core = 3 pieces of 768 + 196;
    # buffer_size (7936 - 32) / 8 = 988 -> 960
    "bf16-10000-small-ub-4-cores": (_args((10000,), BF16, 10000, tiling.get_soc("ascend950", **SMALL_UB)), 20, 4,
                                    MIB16 + (4 + 10000) * 4, [2500, 2500, 768, 4, 4, 196, 196, 10000, 960, 32],
                                    [("maskQueue", 768, 2), ("tmpBuf", 3072, 1), ("prefixSumQueue", 3072, 1),
                                     ("maskQueue", 960, 2), ("xQueue", 1920, 2), ("tmpBuf", 32, 1),
                                     ("yQueue", 1920, 1)]),
    # 2**31 elements: int64 prefix counts (key + 1), 32 lanes: ub_factor 220928 / 18 = 12273 -> 12256;
    # 33554432 a core = 2737 pieces + 9760; buffer (220928 - 512) / 5 = 44083 -> 44064
    "int8-2pow31-int64-counts": (_args((2 ** 31,), I8, 5), 11, 64, MIB16 + (64 + 2 ** 31) * 8,
                                 [33554432, 33554432, 12256, 2738, 2738, 9760, 9760, 5, 44064, 512],
                                 [("maskQueue", 12256, 2), ("tmpBuf", 98048, 1), ("prefixSumQueue", 98048, 1),
                                  ("maskQueue", 44064, 2), ("xQueue", 44064, 2), ("tmpBuf", 512, 1),
                                  ("yQueue", 44064, 1)]),
    # no elements: the tiling still sets a 1024-element core and a tail of 1024 - but launches no core
    "fp32-empty": (_args((0,), F32, 0), 40, 0, MIB16, [1024, 1024, 22080, 1, 1, 1024, 1024, 0, 0, 0],
                   [("maskQueue", 22080, 2), ("tmpBuf", 88320, 1), ("prefixSumQueue", 88320, 1)]),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_tiling_case(case):
    (x, mask, updates, soc), key, block_dim, workspace, fields, plan = CASES[case]
    r = tiling.moe_masked_scatter(x, mask, updates, soc=soc)
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, workspace)
    assert list(r.fields) == list(FIELDS)
    assert list(r.fields.values()) == fields
    assert [tuple(row[:3]) for row in r.ub_plan] == plan
    assert r.schedule_mode == 1          # SyncAll between the phases needs every core scheduled together
    kernel_ub = r.soc.ub_size - 256 - 32768
    assert all(used <= kernel_ub for used in r.ub_pipe_bytes().values())


# the key is 10 * the value width in bytes: one kernel per bit width, whatever the type
@pytest.mark.parametrize("dtype,key", [(np.bool_, 10), (U8, 10), (I8, 10), (I16, 20), (F16, 20), (BF16, 20),
                                       (I32, 40), (F32, 40), (I64, 80), (F64, 80)],
                         ids=lambda v: np.dtype(v).name if not isinstance(v, int) else str(v))
def test_key_per_width(dtype, key):
    r = tiling.moe_masked_scatter(*_args((4, 4), dtype, 16)[:3], soc="ascend950")
    assert r.tiling_key == key
    assert (r.fields["buffer_size"] > 0) == (np.dtype(dtype).itemsize <= 2)


def test_y_out_and_arrays_accepted():
    x, mask, updates = np.zeros((2, 3), F32), np.zeros((2, 3), bool), np.zeros(6, F32)
    r = tiling.moe_masked_scatter(x, mask, updates, y_out=np.empty((2, 3), F32), soc="950")
    assert r.tiling_key == 40 and r.fields["tail_core_data"] == 6


FAILS = {
    "mask-int8": (dict(x=T((4,), F32), mask=T((4,), I8), updates=T((4,), F32)), "mask must be bool"),
    "updates-dtype": (dict(x=T((4,), F32), mask=T((4,), np.bool_), updates=T((4,), F16)), "one dtype"),
    "y-dtype": (dict(x=T((4,), F32), mask=T((4,), np.bool_), updates=T((4,), F32), y_out=T((4,), F16)),
                "one dtype"),
    "uint32-unsupported": (dict(x=T((4,), np.uint32), mask=T((4,), np.bool_), updates=T((4,), np.uint32)),
                           "x dtype must be one of"),
    "mask-shape": (dict(x=T((4, 2), F32), mask=T((8,), np.bool_), updates=T((8,), F32)), "one shape"),
    "y-shape": (dict(x=T((4, 2), F32), mask=T((4, 2), np.bool_), updates=T((8,), F32), y_out=T((2, 4), F32)),
                "one shape"),
    # 33024 - 256 - 32768 = 0 bytes of kernel UB: ub_factor 0, which the real tiling divides by
    "ub-below-dcache": (dict(x=T((4,), F32), mask=T((4,), np.bool_), updates=T((4,), F32),
                             soc=tiling.get_soc("ascend950", ub_size=33024)), "ub_factor 0"),
}


@pytest.mark.parametrize("case", list(FAILS), ids=list(FAILS))
def test_tiling_fails_561002(case):
    kwargs, words = FAILS[case]
    kwargs = dict(kwargs)
    with pytest.raises(TilingError, match=words) as e:
        tiling.moe_masked_scatter(kwargs.pop("x"), kwargs.pop("mask"), kwargs.pop("updates"), **kwargs)
    assert e.value.status == 561002


def test_membase_profiles_not_modelled():
    with pytest.raises(NotImplementedError, match="MaskedScatter"):
        tiling.moe_masked_scatter(T((4,), F32), T((4,), np.bool_), T((4,), F32), soc="ascend910b")
