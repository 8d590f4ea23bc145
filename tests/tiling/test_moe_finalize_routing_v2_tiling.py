"""tiling.moe_finalize_routing_v2: the arch35 (Ascend 950) host tiling of MoeFinalizeRoutingV2.

The real unit-test file (tests/ut/op_host/test_moe_finalize_routing_v2_tiling.cpp, Dec 2025) has no case on an
ASCEND910_95 platform: every case there runs the membase template (keys 200xx, another struct). The cases below
are worked by hand from moe_finalize_routing_v2_tiling_arch35.cpp, one per template, one per drop-pad family,
and one per check (status 561002).
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


def _tile(x, idx, *, scales=None, x1=None, x2=None, bias=None, expert_idx=None, y=None, mode=2, soc="ascend950"):
    return tiling.moe_finalize_routing_v2(x, idx, x1, x2, bias, scales, expert_idx, y_out=y, drop_pad_mode=mode,
                                          soc=soc)


# id: (arguments, key, block dim, fields in struct order, ub_plan rows (name, bytes, count))
CASES = {
    # whole expanded_x 768 B + 2 * (32 B scales + 256 B y) fits: one token per core
    "row-k-h-full-load": (dict(x=T((6, 64), BF16), idx=T((6,), I32), scales=T((3, 2), BF16)), 30022, 3,
                          [3, 0, 0, 64, 64, 2, 1, 1, 1, 1, 1, 1, 1, 1, 64, 64, 2, 1, 1, 6],
                          [("expandedXQue", 768, 1), ("yQue", 256, 2), ("scalesQue", 32, 2)]),
    # 2 * (8 * 4096 * 2 + 32 + 16384) = 163904 fits; rowFactor: 130944 - 65536 leaves room for 3 tokens' y
    "k-h-full-load": (dict(x=T((8192, 4096), BF16), idx=T((8192,), I32), scales=T((1024, 8), BF16)), 40022, 64,
                      [1024, 0, 0, 4096, 4096, 8, 16, 16, 6, 6, 3, 1, 1, 1, 4096, 4096, 8, 1, 1, 8192],
                      [("expandedXQue", 65536, 2), ("yQue", 49152, 2), ("scalesQue", 64, 2)]),
    # K-H needs 286784 B; kFactor bisects to 7 -> kLoop 2 of 4; rowFactor 2 (73568 B left, 28672 B a token)
    "h-full-load": (dict(x=T((4096, 7168), BF16), idx=T((4096,), I32), scales=T((512, 8), BF16)), 10022, 64,
                    [512, 0, 0, 7168, 7168, 8, 8, 8, 4, 4, 2, 2, 2, 1, 7168, 7168, 2, 4, 4, 4096],
                    [("expandedXQue", 57344, 2), ("yQue", 57344, 2), ("scalesQue", 32, 2)]),
    # hFactor = 130944 / 2 / 3 buffers = 21824 -> 4 loops of 17500; kLoop / kFactor stay 0
    "split-h": (dict(x=T((20, 70000), BF16), idx=T((20,), I32)), 20020, 20,
                [20, 0, 0, 70000, 70000, 1, 1, 1, 1, 1, 1, 1, 1, 4, 17500, 17500, 0, 0, 0, 20],
                [("expandedXQue", 35008, 2), ("yQue", 70016, 2)]),
    # drop-pad row mode with every input: e, c from expanded_x, activeNum = e, fp16 scales (+1)
    "drop-pad-row-all-inputs": (dict(x=T((4, 8, 32), F32), idx=T((6,), I32), scales=T((3, 2), F16),
                                     x1=T((3, 32), F32), x2=T((3, 32), F32), bias=T((4, 32), F32),
                                     expert_idx=T((3, 2), I32), mode=3), 30031, 3,
                                [3, 4, 8, 32, 32, 2, 1, 1, 1, 1, 1, 1, 1, 1, 32, 32, 2, 1, 1, 4],
                                [("expandedXQue", 4096, 1), ("yQue", 128, 2), ("biasQue", 512, 1), ("x1Que", 128, 2),
                                 ("x2Que", 128, 2), ("scalesQue", 16, 2)]),
    # dropless column mode on a 3-core chip: rows 4 / 4 / 2, fp32 scales (+0); scalesQue rounds 8 scales up to
    # 16 (a block of the fp16 tokens), times 4 bytes
    "dropless-column-uneven-cores": (dict(x=T((20, 16), F16), idx=T((20,), I32), scales=T((10, 2), F32), mode=0,
                                          soc=tiling.get_soc("ascend950", aiv_num=3)), 30000, 3,
                                     [10, 0, 0, 16, 16, 2, 4, 2, 1, 1, 4, 4, 2, 1, 16, 16, 2, 1, 1, 20],
                                     [("expandedXQue", 640, 1), ("yQue", 256, 2), ("scalesQue", 64, 2)]),
}


@pytest.mark.parametrize("case", CASES)
def test_hand_worked_cases(case):
    args, key, block_dim, fields, plan = CASES[case]
    args = dict(args)
    r = _tile(args.pop("x"), args.pop("idx"), **args)
    assert (r.tiling_key, r.block_dim, r.workspace_size) == (key, block_dim, MIB16)
    assert list(r.fields.values()) == fields
    assert [(u.name, u.bytes, u.count) for u in r.ub_plan] == plan


def test_small_ub_walks_every_template():
    """With 16 KiB of UB, bf16 tokens and topK 4, growing the hidden size leaves each template in turn."""
    soc = tiling.get_soc("ascend950", ub_size=16384, aiv_num=3)
    keys = [_tile(T((40, h), BF16), T((40,), I32), scales=T((10, 4), BF16), soc=soc).tiling_key
            for h in (64, 200, 1000, 3000)]
    assert keys == [30022, 40022, 10022, 20022]


BAD = {
    "drop-pad-mode": dict(mode=4),
    "expanded-x-dtype": dict(x=T((6, 64), I32)),
    "dropless-expanded-x-3d": dict(x=T((6, 1, 64), BF16)),
    "drop-pad-expanded-x-2d": dict(mode=1),
    "hidden-zero": dict(x=T((6, 0), BF16), y=T((3, 0), BF16)),
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
}


@pytest.mark.parametrize("case", BAD)
def test_each_check_fails_with_561002(case):
    args = dict(x=T((6, 64), BF16), idx=T((6,), I32), scales=T((3, 2), BF16))
    args.update(BAD[case])
    with pytest.raises(TilingError) as info:
        _tile(args.pop("x"), args.pop("idx"), **args)
    assert info.value.status == 561002


def test_drop_pad_bias_rows_must_equal_experts():
    with pytest.raises(TilingError, match="dim 0 of bias"):
        _tile(T((4, 2, 64), BF16), T((6,), I32), scales=T((3, 2), BF16), bias=T((5, 64), BF16), mode=1)


def test_only_the_950_profile_has_the_arch35_tiling():
    with pytest.raises(NotImplementedError):
        _tile(T((6, 64), BF16), T((6,), I32), soc="ascend910b")
