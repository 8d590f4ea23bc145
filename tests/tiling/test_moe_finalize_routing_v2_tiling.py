"""tiling.moe_finalize_routing_v2: the arch35 (Ascend 950) host tiling of MoeFinalizeRoutingV2.

* UT_CASES: the 14 cases of tests/ut/op_host/test_moe_finalize_routing_v2_arch35_tiling.cpp @ 25fb6b92890d
  (compile info {40 cores, 262144 bytes UB}: a profile whose GetCoreMemSize is 262144), with their status, key
  (where the test states one) and workspace; the key it skips and every struct field are worked by hand from
  op_host/moe_finalize_routing_v2_tiling_arch35.cpp.
* test_moe_finalize_routing_v2_tiling.cpp (master) runs only membase (Ascend910B) cases: another template and
  struct, not modelled (test_only_the_950_profile_has_the_arch35_tiling).
* CASES: one hand-worked case per template, drop-pad family and K-H path; BAD: one per check (status 561002).
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
NONE = (-1, -1)


def F(row, e, c, h, h_aligned, k, row_of_former, row_of_tail, row_loop_former, row_loop_tail, row_factor,
      const_factor, tail_rf_former, tail_rf_tail, h_loop, h_factor, tail_h_factor, k_loop, k_factor, tail_k_factor,
      active_num, zero=NONE, copy=NONE, const=NONE, const_num=0):
    """The 28 fields of MoeFinalizeRoutingV2RegbaseTilingData in its order (the three ranges as pairs)."""
    return [row, e, c, h, h_aligned, k, row_of_former, row_of_tail, row_loop_former, row_loop_tail, row_factor,
            const_factor, tail_rf_former, tail_rf_tail, h_loop, h_factor, tail_h_factor, k_loop, k_factor,
            tail_k_factor, active_num, *zero, *copy, *const, const_num]


def _tile(ex, idx, *, scales=None, x1=None, x2=None, bias=None, expert_idx=None, y=None, mode=2, soc="ascend950",
          **attrs):
    return tiling.moe_finalize_routing_v2(ex, idx, x1, x2, bias, scales, expert_idx, y_out=y, drop_pad_mode=mode,
                                          soc=soc, **attrs)


# id: (arguments, key, block dim, fields in struct order, ub_plan rows (name, bytes, count))
CASES = {
    # whole expanded_x 768 B + 2 * (32 B scales + 256 B y) fits: one token per core
    "row-k-h-full-load": (dict(x=T((6, 64), BF16), idx=T((6,), I32), scales=T((3, 2), BF16)), 30022, 3,
                          F(3, 0, 0, 64, 64, 2, 1, 1, 1, 1, 1, 0, 1, 1, 1, 64, 64, 2, 1, 1, 6),
                          [("expandedXQue", 768, 1), ("yQue", 256, 2), ("scalesQue", 32, 2)]),
    # 2 * (8 * 4096 * 2 + 32 + 16384) = 163904 fits; rowFactor: 130944 - 65536 leaves room for 3 tokens' y
    "k-h-full-load": (dict(x=T((8192, 4096), BF16), idx=T((8192,), I32), scales=T((1024, 8), BF16)), 40022, 64,
                      F(1024, 0, 0, 4096, 4096, 8, 16, 16, 6, 6, 3, 0, 1, 1, 1, 4096, 4096, 8, 1, 1, 8192),
                      [("expandedXQue", 65536, 2), ("yQue", 49152, 2), ("scalesQue", 64, 2)]),
    # K-H needs 286784 B; kFactor bisects to 7 -> kLoop 2 of 4; rowFactor 2 (73568 B left, 28672 B a token)
    "h-full-load": (dict(x=T((4096, 7168), BF16), idx=T((4096,), I32), scales=T((512, 8), BF16)), 10022, 64,
                    F(512, 0, 0, 7168, 7168, 8, 8, 8, 4, 4, 2, 0, 2, 2, 1, 7168, 7168, 2, 4, 4, 4096),
                    [("expandedXQue", 57344, 2), ("yQue", 57344, 2), ("scalesQue", 32, 2)]),
    # hFactor = 130944 / 2 / 3 buffers = 21824 -> 4 loops of 17500; kLoop / kFactor stay 0
    "split-h": (dict(x=T((20, 70000), BF16), idx=T((20,), I32)), 20020, 20,
                F(20, 0, 0, 70000, 70000, 1, 1, 1, 1, 1, 1, 0, 1, 1, 4, 17500, 17500, 0, 0, 0, 20),
                [("expandedXQue", 35008, 2), ("yQue", 70016, 2)]),
    # drop-pad row mode with every input: e, c from expanded_x, activeNum = e, fp16 scales (+1)
    "drop-pad-row-all-inputs": (dict(x=T((4, 8, 32), F32), idx=T((6,), I32), scales=T((3, 2), F16),
                                     x1=T((3, 32), F32), x2=T((3, 32), F32), bias=T((4, 32), F32),
                                     expert_idx=T((3, 2), I32), mode=3), 30031, 3,
                                F(3, 4, 8, 32, 32, 2, 1, 1, 1, 1, 1, 0, 1, 1, 1, 32, 32, 2, 1, 1, 4),
                                [("expandedXQue", 4096, 1), ("yQue", 128, 2), ("x1Que", 128, 2), ("biasQue", 512, 1),
                                 ("x2Que", 128, 2), ("scalesQue", 16, 2)]),
    # dropless column mode on a 3-core chip: rows 4 / 4 / 2, fp32 scales (+0); scalesQue rounds 8 scales up to
    # 16 (a block of the fp16 tokens), times 4 bytes
    "dropless-column-uneven-cores": (dict(x=T((20, 16), F16), idx=T((20,), I32), scales=T((10, 2), F32), mode=0,
                                          soc=tiling.get_soc("ascend950", aiv_num=3)), 30000, 3,
                                     F(10, 0, 0, 16, 16, 2, 4, 2, 1, 1, 4, 0, 4, 2, 1, 16, 16, 2, 1, 1, 20),
                                     [("expandedXQue", 640, 1), ("yQue", 256, 2), ("scalesQue", 64, 2)]),
    # MoeTokenUnpermute's shape, topK 4: k <= 4 sizes rowFactor with RowsHSizeForKHFullLoad (6176 B a token:
    # 4 rows of 1024 B, 8 B of scales, two index blocks, 2048 B of y) -> 20 in 126848 B; 64 rows a core even out
    # to 4 loops of 16, so the kernel takes its 16-token batched path (expandedXQue 16 * 4 * 512 * 2 B)
    "k-h-full-load-topk4-batched": (dict(x=T((16384, 512), BF16), idx=T((16384,), I32), scales=T((4096, 4), BF16)),
                                    40022, 64, F(4096, 0, 0, 512, 512, 4, 64, 64, 4, 4, 16, 0, 16, 16, 1, 512, 512, 4,
                                                 1, 1, 16384),
                                    [("expandedXQue", 65536, 2), ("yQue", 32768, 2), ("scalesQue", 128, 2)]),
}


@pytest.mark.parametrize("case", CASES)
def test_hand_worked_cases(case):
    args, key, block_dim, fields, plan = CASES[case]
    args = dict(args)
    r = _tile(args.pop("x"), args.pop("idx"), **args)
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, MIB16)
    assert list(r.fields.values()) == fields
    assert [(u.name, u.bytes, u.count) for u in r.ub_plan] == plan


def _ut(x, idx, x1, x2, bias, scales, expert_idx, y, mode, k, *, zero=NONE, copy=NONE, const=NONE, extra=None,
        dt=F32, sdt=None):
    """One case of the arch35 UT: shapes as it lists them (None = the empty shape the faker leaves absent)."""
    def d(shape, t=None):
        return None if shape is None else T(shape, t or dt)

    args = dict(expanded_x=d(x), idx=T(idx, I32), x1=d(x1), x2=d(x2), bias=d(bias), scales=d(scales, sdt),
                expert_idx=None if expert_idx is None else T(expert_idx, I32), y=d(y), mode=mode, k=k,
                zero_expert_range=list(zero), copy_expert_range=list(copy), constant_expert_range=list(const))
    for name, shape in (extra or {}).items():
        args[name] = d(shape)
    return args


SQ = dict(x=(16, 16), idx=(16,), x1=(16, 16), x2=(16, 16), bias=(16, 16), scales=(16, 1), expert_idx=(16, 1),
          y=(16, 16))
SQ_RANGES = dict(zero=(0, 2), copy=(2, 4), const=(4, 6))

# the real test's name without "MoeFinalizeRoutingV2_arch35_": (arguments, key or None on GRAPH_FAILED, the key
# the test asserts (None: UINT64_MAX, not checked), block dim, fields, ub_plan)
UT_CASES = {
    # expanded_x 1024 B + bias 1024 B + 2 * (32 + 2 * 64 + 64) B fits: row-K-H, one token per core
    "dropless_float_h_full": (_ut(**SQ, mode=0, k=1), 30000, 30000, 16,
                              F(16, 16, 0, 16, 16, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 16, 16, 1, 1, 1, 16),
                              [("expandedXQue", 1024, 1), ("yQue", 64, 2), ("x1Que", 64, 2), ("biasQue", 1024, 1),
                               ("x2Que", 64, 2), ("scalesQue", 32, 2)]),
    # k 232 (the attribute equals scales' dim 1), e 316, hAligned 64: 2 * (2 * 29696 + 480 + 256 + 224) B fits
    # K-H; k > 4: 71680 B for rowsH of ~880 B a token -> 81, evened to the 7 rows of a core (37 cores)
    "droppad_col_bf16": (_ut((316, 96, 52), (60088,), (259, 52), (259, 52), (316, 52), (259, 232), (259, 232),
                             (259, 52), 1, 232, dt=BF16), 40012, None, 37,
                         F(259, 316, 96, 52, 64, 232, 7, 7, 1, 1, 7, 0, 7, 7, 1, 52, 52, 232, 1, 1, 316),
                         [("expandedXQue", 29696, 2), ("yQue", 1472, 2), ("biasQue", 29696, 2), ("x1Que", 736, 2),
                          ("x2Que", 736, 2), ("scalesQue", 3264, 2)]),
    # drop-pad row, k 233, h 6825 (hAligned 6832): H full load (4 inputs: 2 * 82016 B); kFactor 2 of
    # 2 * 27328 + 32 + 54656 <= 131072 -> 117 loops, tail 1; 76384 B left holds one token; 17 rows a core, 40 cores
    "dropless_bf16_split_h": (_ut((248, 1, 6825), (157042,), (674, 6825), (674, 6825), (248, 6825), (674, 233),
                                  (674, 233), (674, 6825), 3, 233, dt=BF16), 10032, None, 40,
                              F(674, 248, 1, 6825, 6832, 233, 17, 11, 17, 11, 1, 0, 1, 1, 1, 6825, 6825, 117, 2, 1,
                                248),
                              [("expandedXQue", 27328, 2), ("yQue", 27328, 2), ("biasQue", 27328, 2),
                               ("x1Que", 13664, 2), ("x2Que", 13664, 2), ("scalesQue", 32, 2)]),
    "dropless_float16_h_full": (_ut(**SQ, mode=0, k=1, dt=F16), 30001, None, 16,
                                F(16, 16, 0, 16, 16, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 16, 16, 1, 1, 1, 16),
                                [("expandedXQue", 512, 1), ("yQue", 64, 2), ("x1Que", 32, 2), ("biasQue", 512, 1),
                                 ("x2Que", 32, 2), ("scalesQue", 32, 2)]),
    # bias / scales / expert_idx absent: k is the attribute (1), e stays 0
    "dropless_no_scales": (_ut(**dict(SQ, bias=None, scales=None, expert_idx=None), mode=0, k=1), 30000, None, 16,
                           F(16, 0, 0, 16, 16, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 16, 16, 1, 1, 1, 16),
                           [("expandedXQue", 1024, 1), ("yQue", 64, 2), ("x1Que", 64, 2), ("x2Que", 64, 2)]),
    # the ranges land in the struct; constExpertRangeNum 6 - 4 = 2, its factor min(2, rowFactor 1) = 1
    "dropless_active_expert_range": (_ut(**SQ, mode=0, k=1, **SQ_RANGES), 30000, None, 16,
                                     F(16, 16, 0, 16, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 16, 16, 1, 1, 1, 16,
                                       (0, 2), (2, 4), (4, 6), 2),
                                     [("expandedXQue", 1024, 1), ("yQue", 64, 2), ("x1Que", 64, 2),
                                      ("biasQue", 1024, 1), ("x2Que", 64, 2), ("scalesQue", 32, 2)]),
    # x and the (2, 16) a1 / a2 / v: 2048 + 2 * (32 + 6 * 64 + 64) B still fits row-K-H
    "constant_expert_inputs": (_ut(**SQ, mode=0, k=1, **SQ_RANGES,
                                   extra=dict(x=(16, 16), a1=(2, 16), a2=(2, 16), v=(2, 16))), 30000, None, 16,
                               F(16, 16, 0, 16, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 16, 16, 1, 1, 1, 16,
                                 (0, 2), (2, 4), (4, 6), 2),
                               [("expandedXQue", 1024, 1), ("yQue", 64, 2), ("x1Que", 64, 2), ("biasQue", 1024, 1),
                                ("x2Que", 64, 2), ("scalesQue", 32, 2), ("xQue", 64, 2),
                                ("constExpertAlpha1Que", 64, 2), ("constExpertAlpha2Que", 64, 2), ("vQue", 64, 2)]),
    # zero experts [20, 22) past E = 16
    "invalid_expert_range_bounds": (_ut(**SQ, mode=0, k=1, zero=(20, 22)), None, None, 0, None, None),
    # 4 rows of 8192 fp32 with x1 / x2 / bias: no full load fits; hFactor 131072 / 4 / 5 = 6553 -> 2 of 4096
    "dropless_split_h_large_h": (_ut((4, 8192), (4,), (4, 8192), (4, 8192), (4, 8192), (4, 1), (4, 1), (4, 8192),
                                     2, 1), 20020, 20020, 4,
                                 F(4, 4, 0, 8192, 8192, 1, 1, 1, 1, 1, 1, 0, 1, 1, 2, 4096, 4096, 0, 0, 0, 4),
                                 [("expandedXQue", 16384, 2), ("yQue", 16384, 2), ("biasQue", 16384, 2),
                                  ("x1Que", 16384, 2), ("x2Que", 16384, 2)]),
    # k 4: RowsHSizeForKHFullLoad is 22528 B a token + 3 index / scale blocks -> rowFactor 5, evened to the 2 rows
    # of a core (32 cores); rowFactor < 16 keeps one token's k rows per copy
    "kh_full_load_small_k": (_ut((64, 512), (256,), (64, 512), (64, 512), (64, 512), (64, 4), (64, 4), (64, 512),
                                 0, 4), 40000, 40000, 32,
                             F(64, 64, 0, 512, 512, 4, 2, 2, 1, 1, 2, 0, 2, 2, 1, 512, 512, 4, 1, 1, 64),
                             [("expandedXQue", 8192, 2), ("yQue", 4096, 2), ("biasQue", 8192, 2), ("x1Que", 4096, 2),
                              ("x2Que", 4096, 2), ("scalesQue", 32, 2)]),
    # e * c * h = 128 fp32 + bias 256 B + 2 * 224 B: row-K-H (the test's name notwithstanding)
    "droppad_col_kh_full_load": (_ut((4, 2, 16), (8,), (2, 16), (2, 16), (4, 16), (2, 4), (2, 4), (2, 16), 1, 4),
                                 30010, 30010, 2,
                                 F(2, 4, 2, 16, 16, 4, 1, 1, 1, 1, 1, 0, 1, 1, 1, 16, 16, 4, 1, 1, 4),
                                 [("expandedXQue", 512, 1), ("yQue", 64, 2), ("x1Que", 64, 2), ("biasQue", 256, 1),
                                  ("x2Que", 64, 2), ("scalesQue", 32, 2)]),
    # bias has 2 experts for k 4 (CheckBiasShape fails before the ranges are looked at)
    "droppad_invalid_expert_range": (_ut((2, 4, 16), (8,), (2, 16), (2, 16), (2, 16), (2, 4), (2, 4), (2, 16), 1, 4,
                                         zero=(0, 3), copy=(2, 4)), None, None, 0, None, None),
    # zero [0, 4) and copy [2, 6) overlap
    "invalid_expert_range_overlap": (_ut(**SQ, mode=0, k=1, zero=(0, 4), copy=(2, 6)), None, None, 0, None, None),
    "invalid_drop_pad_mode": (_ut(**SQ, mode=99, k=1), None, None, 0, None, None),
}


@pytest.mark.parametrize("case", UT_CASES)
def test_real_arch35_unit_test(case):
    args, key, ut_key, block_dim, fields, plan = UT_CASES[case]
    args = dict(args)
    x, idx = args.pop("expanded_x"), args.pop("idx")
    if key is None:
        with pytest.raises(TilingError) as info:
            _tile(x, idx, soc=UT_SOC, **args)
        assert info.value.status == 561002
        return
    r = _tile(x, idx, soc=UT_SOC, **args)
    if ut_key is not None:
        assert r.tiling_key == ut_key
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, MIB16)
    assert list(r.fields.values()) == fields
    assert [(u.name, u.bytes, u.count) for u in r.ub_plan] == plan
    assert r.ub_fits


def test_the_unit_test_count():
    assert len(UT_CASES) == 14


def test_small_ub_walks_every_template():
    """With 16 KiB of UB, bf16 tokens and topK 4, growing the hidden size leaves each template in turn."""
    soc = tiling.get_soc("ascend950", ub_size=16384, aiv_num=3)
    keys = [_tile(T((40, h), BF16), T((40,), I32), scales=T((10, 4), BF16), soc=soc).tiling_key
            for h in (64, 200, 1000, 3000)]
    assert keys == [30022, 40022, 10022, 20022]


BAD = {
    "drop-pad-mode": dict(mode=4),
    "expanded-x-dtype": dict(ex=T((6, 64), I32)),
    "dropless-expanded-x-3d": dict(ex=T((6, 1, 64), BF16)),
    "drop-pad-expanded-x-2d": dict(mode=1),
    "hidden-zero": dict(ex=T((6, 0), BF16), y=T((3, 0), BF16)),
    "scales-1d": dict(scales=T((6,), BF16)),
    "k-zero": dict(scales=T((3, 0), BF16)),
    "row-idx-2d": dict(idx=T((3, 2), I32)),
    "row-zero": dict(idx=T((1,), I32), y=T((0, 64), BF16)),
    "x2-without-x1": dict(x2=T((3, 64), BF16)),
    "row-idx-dtype": dict(idx=T((6,), np.int64)),
    "row-idx-not-row-times-k": dict(idx=T((7,), I32)),
    "x1-shape": dict(x1=T((3, 63), BF16)),
    "x1-dtype": dict(x1=T((3, 64), F16)),
    "bias-e-below-k": dict(bias=T((1, 64), BF16)),
    "bias-hidden": dict(bias=T((4, 63), BF16)),
    "scales-dtype": dict(scales=T((3, 2), I32)),
    "expert-idx-shape": dict(expert_idx=T((3, 3), I32)),
    "y-dtype": dict(y=T((3, 64), F16)),
    "y-shape": dict(y=T((4, 64), BF16)),
    # master's newer checks: the k attribute, x, the constant-expert inputs and the expert ranges
    "k-attr-not-scales-dim1": dict(k=3),
    "k-attr-zero-without-scales": dict(scales=None, k=0),
    "x-dtype": dict(x=T((3, 64), F16)),
    "x-shape": dict(x=T((3, 63), BF16)),
    "a1-dtype": dict(a1=T((2, 64), F16), constant_expert_range=[0, 2]),
    "a2-hidden": dict(a2=T((2, 63), BF16), constant_expert_range=[0, 2]),
    "v-rows-not-constant-count": dict(v=T((3, 64), BF16), constant_expert_range=[0, 2]),
    "v-1d": dict(v=T((64,), BF16)),
    "zero-range-past-e": dict(bias=T((4, 64), BF16), zero_expert_range=[2, 5]),
    "copy-range-empty": dict(bias=T((4, 64), BF16), copy_expert_range=[2, 2]),
    "constant-range-half-set": dict(bias=T((4, 64), BF16), constant_expert_range=[-1, 2]),
    "zero-constant-overlap": dict(zero_expert_range=[0, 3], constant_expert_range=[2, 4]),
    "copy-constant-overlap": dict(copy_expert_range=[1, 3], constant_expert_range=[0, 2]),
}


@pytest.mark.parametrize("case", BAD)
def test_each_check_fails_with_561002(case):
    args = dict(ex=T((6, 64), BF16), idx=T((6,), I32), scales=T((3, 2), BF16))
    args.update(BAD[case])
    with pytest.raises(TilingError) as info:
        _tile(args.pop("ex"), args.pop("idx"), **args)
    assert info.value.status == 561002


def test_drop_pad_bias_rows_must_equal_experts():
    with pytest.raises(TilingError, match="dim 0 of bias"):
        _tile(T((4, 2, 64), BF16), T((6,), I32), scales=T((3, 2), BF16), bias=T((5, 64), BF16), mode=1)


def test_ranges_are_checked_against_e_only_once_e_is_known():
    """Dropless without bias leaves E at 0: CheckRange lets any range through (only overlaps fail); a range list
    of another length than 2 is ignored (the struct keeps -1, -1)."""
    r = _tile(T((6, 64), BF16), T((6,), I32), scales=T((3, 2), BF16), zero_expert_range=[100, 200],
              copy_expert_range=[1, 2, 3])
    f = r.fields
    assert (f["zero_expert_start"], f["zero_expert_end"], f["copy_expert_start"], f["copy_expert_end"]) == \
        (100, 200, -1, -1)


def test_k_attr_is_the_k_without_scales():
    """Without scales k is the attribute: 6 indices of k 2 are 3 rows."""
    r = _tile(T((6, 64), BF16), T((6,), I32), k=2)
    assert (r.fields["row"], r.fields["k"], r.tiling_key) == (3, 2, 30020)


def test_only_the_950_profile_has_the_arch35_tiling():
    with pytest.raises(NotImplementedError):
        _tile(T((6, 64), BF16), T((6,), I32), soc="ascend910b")
