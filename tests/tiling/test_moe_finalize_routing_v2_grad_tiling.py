"""tiling.moe_finalize_routing_v2_grad: the arch35 (Ascend 950) host tiling of MoeFinalizeRoutingV2Grad.

* UT_CASES: the 13 cases of the real tests/ut/op_host/test_moe_finalize_routing_v2_grad_arch35_tiling.cpp (master),
  compile info {40 cores, 262144 bytes UB} (a profile whose GetCoreMemSize is 262144): status, tilingKey and
  workspace (those cases print no tiling data).
* The without-scale struct is the membase one, and the membase template computes its fields with the same formula:
  the two "regbase_1000x" cases of test_moe_finalize_routing_v2_grad_tiling.cpp (40 cores, UB 65536) give the
  tiling data the arch35 template must give on a profile of that UB.
* WORKED: one case per template and per split shape, worked by hand from the *_arch35.cpp formulas.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tiling
from tiling import TensorDesc as T
from tiling.status import TilingError

BF16, F16, F32, I32 = ml_dtypes.bfloat16, np.float16, np.float32, np.int32
MIB16 = 16 * 1024 * 1024
UT_SOC = tiling.get_soc("ascend950", aiv_num=40, ub_size=262144 + 256)


def _tile(gy, idx, ex=None, sc=None, ei=None, bias=None, *, gex, gsc, mode=0, active=0, e=0, c=0, soc=UT_SOC):
    return tiling.moe_finalize_routing_v2_grad(gy, idx, ex, sc, ei, bias, mode, active, e, c,
                                               grad_expanded_x_out=gex, grad_scales_out=gsc, soc=soc)


def _scaled(h, dt=F32, *, ex_dt=None, idx_dt=I32, sc_dt=None, ei_dt=I32, bias_dt=None, bias=False, expert_idx=True):
    """The arch35 UT's with-scales inputs: grad_y (5, h), 15 slots (topK 3), 8 experts."""
    args = dict(gy=T((5, h), dt), idx=T((15,), idx_dt), ex=T((15, h), ex_dt or dt), sc=T((5, 3), sc_dt or dt),
                gex=T((15, h), dt), gsc=T((5, 3), sc_dt or dt))
    if expert_idx:
        args["ei"] = T((5, 3), ei_dt)
    if bias:
        args["bias"] = T((8, h), bias_dt or dt)
    return args


def _unscaled(h, idx_dt=I32):
    return dict(gy=T((5, h), F32), idx=T((5,), idx_dt), gex=T((5, h), F32), gsc=T((5, 1), F32))


# id (the real test's name without its MoeFinalizeRoutingV2Grad_arch35_ prefix, which the test ids add back):
# (arguments, tilingKey or None when the tiling fails)
UT_CASES = {
    "not_split_h_float_no_bias": (_scaled(8), 20011),
    "not_split_h_float_with_bias": (_scaled(8, bias=True), 20021),
    "not_split_h_bf16_no_bias": (_scaled(8, BF16), 20011),
    "not_split_h_invalid_expanded_row_idx": (_scaled(8, idx_dt=F32), None),
    "not_split_h_invalid_scales_dtype": (_scaled(8, sc_dt=I32), None),
    "not_split_h_bias_grad_y_mismatch": (_scaled(8, bias=True, bias_dt=BF16), None),
    "not_split_h_expert_idx_dtype_mismatch": (_scaled(8, bias=True, ei_dt=F32), None),
    "split_h_float_no_bias": (_scaled(262144), 20012),
    "split_h_float_with_bias": (_scaled(262144, bias=True), 20022),
    "split_h_invalid_expanded_x_dtype": (_scaled(262144, ex_dt=BF16), None),
    "without_scale_not_cut_h": (_unscaled(8), 10001),
    "without_scale_cut_h": (_unscaled(262144), 10002),
    "without_scale_invalid_row_idx": (_unscaled(8, idx_dt=F32), None),
}


@pytest.mark.parametrize("args,key", UT_CASES.values(),
                         ids=["MoeFinalizeRoutingV2Grad_arch35_" + k for k in UT_CASES])
def test_real_arch35_unit_test(args, key):
    if key is None:
        with pytest.raises(TilingError) as e:
            _tile(**args)
        assert e.value.status == 561002
        return
    r = _tile(**args)
    assert (r.tiling_key, r.workspace_size) == (key, MIB16)
    assert r.ub_fits


# the membase UT's without-scale data (same struct, same formula): "5 0 5 5 0 5 0 1 8 5 16376 0 0 10001"
MEMBASE_UT = {
    "MoeFinalizeRoutingV2GradTiling_regbase_10001_001": (8, 10001, [5, 0, 5, 5, 0, 5, 0, 1, 8, 5, 16376, 0, 0, 10001]),
    "MoeFinalizeRoutingV2GradTiling_regbase_10002_001": (262144, 10002,
                                                         [5, 0, 5, 5, 0, 5, 0, 1, 262144, 5, 16376, 16, 128, 10002]),
}


@pytest.mark.parametrize("h,key,data", MEMBASE_UT.values(), ids=MEMBASE_UT.keys())
def test_without_scale_data_equals_the_membase_unit_test(h, key, data):
    r = _tile(**_unscaled(h), soc=tiling.get_soc("ascend950", aiv_num=40, ub_size=65536 + 256))
    assert (r.tiling_key, r.block_dim, r.data()) == (key, 5, data)


S950 = tiling.get_soc("ascend950")          # 64 cores, GetCoreMemSize 253696


# id: (arguments, key, block dim, tiling data, ub_plan (name, bytes, count))
WORKED = {
    # hiddenPrePart = (253696 - 32) / 2 = 126832 bf16 elements; 100 rows over 64 cores: 36 cores take 2
    "without-scale-bf16-7168": (dict(gy=T((100, 7168), BF16), idx=T((100,), I32), gex=T((100, 7168), BF16),
                                     gsc=T((0,), BF16), soc=S950), 10001, 64,
                                [64, 1, 36, 64, 1, 36, 0, 1, 7168, 100, 126832, 0, 0, 10001],
                                [("gradYInQueue", 253664, 1), ("expandedRowIdxInQueue", 32, 1)]),
    # 3 slots of 130000 fp32: 63416-element pieces, 2 loops and 3168 left
    "without-scale-fp32-cut": (dict(gy=T((3, 130000), F32), idx=T((3,), I32), gex=T((3, 130000), F32),
                                    gsc=T((0,), F32), soc=S950), 10002, 3,
                               [3, 0, 3, 3, 0, 3, 0, 1, 130000, 3, 63416, 2, 3168, 10002],
                               [("gradYInQueue", 253664, 1), ("expandedRowIdxInQueue", 32, 1)]),
    # hidden 7168 bf16, topK 8: hAlign 7168; quotient 4096 -> 64 chunk sums, k 0, last 64; 4 tokens = 32 slots
    "not-cut-h-bf16-7168-topk8": (dict(gy=T((4, 7168), BF16), idx=T((32,), I32), ex=T((32, 7168), BF16),
                                       sc=T((4, 8), F32), gex=T((32, 7168), BF16), gsc=T((4, 8), F32), soc=S950),
                                  20011, 32, [32, 0, 32, 32, 0, 32, 0, 8, 7168, 32, 7168, 4096, 0, 64],
                                  [("gradYInQueue", 14336, 2), ("expandedXInQueue", 14336, 2),
                                   ("gradExpandedXOutQueue", 14336, 2), ("gradScalesOutQueue", 32, 2),
                                   ("binaryAddSumBuf", 256, 1)]),
    # hidden 10000 fp32: hiddenPrePart = (253696 - 512 - 64) / 24 * 4 / 32 * 32 / 4 = 10544 >= hAlign 10000;
    # quotient 8192 -> 128 chunk sums, folded once (k 1) to 64
    "not-cut-h-fp32-10000": (dict(gy=T((1, 10000), F32), idx=T((2,), I32), ex=T((2, 10000), F32),
                                  sc=T((1, 2), BF16), gex=T((2, 10000), F32), gsc=T((1, 2), BF16), soc=S950),
                             20011, 2, [2, 0, 2, 2, 0, 2, 0, 2, 10000, 2, 10000, 8192, 1, 64],
                             [("gradYInQueue", 40000, 2), ("expandedXInQueue", 40000, 2),
                              ("gradExpandedXOutQueue", 40000, 2), ("gradScalesOutQueue", 32, 2),
                              ("binaryAddSumBuf", 512, 1)]),
    # hidden 40 (< 64 lanes): quotient 32, no chunk sums, no binaryAddSumBuf
    "not-cut-h-fp16-40": (dict(gy=T((2, 40), F16), idx=T((2,), I32), ex=T((2, 40), F16), sc=T((2, 1), F16),
                               gex=T((2, 40), F16), gsc=T((2, 1), F16), soc=S950),
                          20011, 2, [2, 0, 2, 2, 0, 2, 0, 1, 40, 2, 48, 32, 0, 0],
                          [("gradYInQueue", 96, 2), ("expandedXInQueue", 96, 2), ("gradExpandedXOutQueue", 96, 2),
                           ("gradScalesOutQueue", 32, 2)]),
    # hidden 11000 fp32 > hiddenPrePart 10544: split H. mainFactor = (253696 - 4128) / 2 / 3 = 41594 -> 41536 B
    # = 10384 elements; 1 main block, fold 616 < mainFactor: no fold blocks, a tail of 616 (one tail block,
    # <= foldFactor 5192); main quotient 8192 (k 1, 64), fold quotient 4096 (k 0, 64)
    "cut-h-fp32-11000": (dict(gy=T((2, 11000), F32), idx=T((4,), I32), ex=T((4, 11000), F32), sc=T((2, 2), F32),
                              gex=T((4, 11000), F32), gsc=T((2, 2), F32), soc=S950),
                         20012, 4, [4, 0, 4, 4, 0, 4, 0, 2, 11000, 4, 10384, 1, 5192, 0, 616, 1, 8192, 1, 64,
                                    4096, 0, 64],
                         [("gradYInQueue", 41536, 2), ("expandedXInQueue", 41536, 2),
                          ("gradExpandedXOutQueue", 41536, 2), ("gradScalesOutQueue", 32, 1),
                          ("bianryAddCacheBuf", 3072, 1), ("binaryAddSumBuf", 1024, 1)]),
    # bf16 hidden 100000: mainFactor 20768; 4 blocks -> main 4; fold 16928 < main: tail 16928 > 10384 (two tail
    # blocks)
    "cut-h-bf16-100000": (dict(gy=T((1, 100000), BF16), idx=T((1,), I32), ex=T((1, 100000), BF16),
                               sc=T((1, 1), BF16), gex=T((1, 100000), BF16), gsc=T((1, 1), BF16), soc=S950),
                          20012, 1, [1, 0, 1, 1, 0, 1, 0, 1, 100000, 1, 20768, 4, 10384, 0, 16928, 2, 16384, 2, 64,
                                     8192, 1, 64],
                          [("gradYInQueue", 41536, 2), ("expandedXInQueue", 41536, 2),
                           ("gradExpandedXOutQueue", 41536, 2), ("gradScalesOutQueue", 32, 1),
                           ("bianryAddCacheBuf", 3072, 1), ("binaryAddSumBuf", 1024, 1)]),
    # drop-pad mode 1: expandedXDim0 = E * C = 6, 3-D expanded_x / grad_expanded_x, schedule mode 1
    "drop-pad-mode-1": (dict(gy=T((2, 16), F32), idx=T((4,), I32), ex=T((3, 2, 16), F32), sc=T((2, 2), F32),
                             gex=T((3, 2, 16), F32), gsc=T((2, 2), F32), mode=1, e=3, c=2, soc=S950),
                        20011, 6, [6, 0, 6, 4, 0, 4, 1, 2, 16, 6, 16, 16, 0, 0],
                        [("gradYInQueue", 64, 2), ("expandedXInQueue", 64, 2), ("gradExpandedXOutQueue", 64, 2),
                         ("gradScalesOutQueue", 32, 2)]),
    # activeNum 3 < 5 slots (dropPadMode 0): 3 rows of grad_expanded_x
    "active-num": (dict(gy=T((5, 8), F32), idx=T((5,), I32), gex=T((3, 8), F32), gsc=T((0,), F32), active=3,
                        soc=S950), 10001, 5, [3, 0, 3, 5, 0, 5, 0, 1, 8, 3, 63416, 0, 0, 10001],
                   [("gradYInQueue", 253664, 1), ("expandedRowIdxInQueue", 32, 1)]),
}


@pytest.mark.parametrize("args,key,block_dim,data,plan", WORKED.values(), ids=WORKED.keys())
def test_worked_case(args, key, block_dim, data, plan):
    r = _tile(**args)
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, MIB16)
    assert r.data() == data
    assert [tuple(row[:3]) for row in r.ub_plan] == plan
    assert r.schedule_mode == (1 if args.get("mode") == 1 else 0)


@pytest.mark.parametrize("h", [10544, 10545], ids=["h10544-not-cut", "h10545-cut"])
def test_fp32_cut_boundary(h):
    r = _tile(gy=T((1, h), F32), idx=T((1,), I32), ex=T((1, h), F32), sc=T((1, 1), F32), gex=T((1, h), F32),
              gsc=T((1, 1), F32), soc=S950)
    assert r.tiling_key == (20011 if h <= 10544 else 20012)


BAD = {
    "drop-pad-mode-2": (dict(mode=2), "drop_pad_mode"),
    "mode-1-zero-capacity": (dict(mode=1, e=3, c=0), "expert_capacity"),
    "grad-y-1d": (dict(gy=T((40,), F32)), "grad_y"),
    "grad-y-int32": (dict(gy=T((5, 8), I32)), "grad_y"),
    "scales-without-expanded-x": (dict(ex=None), "expanded_x"),
    "scales-3d": (dict(sc=T((5, 3, 1), F32)), "scales"),
    "expanded-x-rows": (dict(ex=T((14, 8), F32)), "expanded_x"),
    "expanded-x-hidden": (dict(ex=T((15, 9), F32)), "expanded_x"),
    "scales-rows": (dict(sc=T((3, 5), F32)), "scales"),
    "scales-size": (dict(sc=T((5, 2), F32)), "scales"),
    "grad-expanded-x-rows": (dict(gex=T((16, 8), F32)), "grad_expanded_x"),
    "grad-expanded-x-dtype": (dict(gex=T((15, 8), F16)), "grad_expanded_x"),
    "grad-scales-dtype": (dict(gsc=T((5, 3), F16)), "grad_scales"),
    "grad-scales-1d": (dict(gsc=T((15,), F32)), "grad_scales"),
    "hidden-0": (dict(gy=T((5, 0), F32), ex=T((15, 0), F32), gex=T((15, 0), F32)), "hidden"),
}


@pytest.mark.parametrize("change,word", BAD.values(), ids=BAD.keys())
def test_checks_fail_with_561002_naming_the_argument(change, word):
    args = _scaled(8, expert_idx=False)
    args.update(change)
    with pytest.raises(TilingError) as e:
        _tile(**args)
    assert e.value.status == 561002 and word in str(e.value)


def test_without_scales_rows_must_match():
    with pytest.raises(TilingError, match="grad_y and expanded_row_idx"):
        _tile(gy=T((5, 8), F32), idx=T((6,), I32), gex=T((6, 8), F32), gsc=T((0,), F32))


@pytest.mark.parametrize("soc", ["ascend910b", "ascend910_93"])
def test_membase_profiles_are_not_modelled(soc):
    with pytest.raises(NotImplementedError, match="membase"):
        _tile(**_unscaled(8), soc=soc)
