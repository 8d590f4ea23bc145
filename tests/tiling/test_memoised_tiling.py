"""Remembered tilings (tiling.common.memoised_tiling): a repeated call gives what a fresh tiling gives, and any
difference the tiling could see (shape, dtype, attribute, profile, custom profile) gives a fresh result."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from tiling import TensorDesc, get_soc
from tiling.moe_token_permute import moe_token_permute
from tiling.moe_token_unpermute import moe_token_unpermute
from tiling.status import TilingError

BF16 = np.dtype(ml_dtypes.bfloat16)


def _fresh(tiling, *args, **kwargs):
    """What the tiling computes without its memo."""
    return tiling.__wrapped__(*args, **kwargs)


def _same(a, b) -> bool:
    return (a.tiling_key, a.block_dim, a.workspace_size, a.fields, a.ub_plan, a.schedule_mode, a.soc) == \
        (b.tiling_key, b.block_dim, b.workspace_size, b.fields, b.ub_plan, b.schedule_mode, b.soc)


CASES = [
    ("permute-bf16", moe_token_permute, lambda: ((np.zeros((8, 64), BF16), np.zeros((8, 2), np.int32)), {})),
    ("permute-fp32-int64", moe_token_permute,
     lambda: ((np.zeros((8, 64), np.float32), np.zeros((8, 2), np.int64)), {})),
    ("permute-num-out", moe_token_permute, lambda: ((np.zeros((8, 64), BF16), np.zeros((8, 2), np.int32), 5), {})),
    ("permute-desc-950", moe_token_permute,
     lambda: ((TensorDesc((4096, 7168), BF16), TensorDesc((4096, 8), np.int32)), {"soc": "ascend950"})),
    ("unpermute-probs", moe_token_unpermute,
     lambda: ((np.zeros((16, 64), BF16), np.zeros(16, np.int32), np.zeros((8, 2), BF16)), {})),
    ("unpermute-no-probs", moe_token_unpermute, lambda: ((np.zeros((16, 64), np.float16), np.zeros(16, np.int32)), {})),
    ("unpermute-custom-ub", moe_token_unpermute,
     lambda: ((np.zeros((16, 64), BF16), np.zeros(16, np.int32), np.zeros((8, 2), BF16)),
              {"soc": get_soc("910b", ub_size=8192)})),
]


@pytest.mark.parametrize("name,tiling,make", CASES, ids=[c[0] for c in CASES])
def test_a_repeated_tiling_equals_a_fresh_one_and_owns_its_fields(name, tiling, make):
    args, kwargs = make()
    first, second = tiling(*args, **kwargs), tiling(*args, **kwargs)
    assert _same(first, _fresh(tiling, *args, **kwargs)) and _same(second, first)
    assert second.fields is not first.fields
    first.fields["n"] = second.fields["n"] = -1         # a caller's change stays its own
    assert _same(tiling(*args, **kwargs), _fresh(tiling, *args, **kwargs))


def test_every_difference_the_tiling_can_see_gives_a_fresh_result():
    x, idx = np.zeros((8, 64), BF16), np.zeros((8, 2), np.int32)
    variants = [((x, idx), {}), ((x.astype(np.float16), idx), {}), ((x, idx.astype(np.int64)), {}),
                ((np.zeros((9, 64), BF16), np.zeros((9, 2), np.int32)), {}), ((x[:, :32], idx), {}),
                ((x, idx, 3), {}), ((x, idx), {"soc": "ascend950"}), ((x, idx), {"soc": get_soc("910b", aiv_num=4)}),
                ((x, idx), {"soc": get_soc("910b", cost={"hbm_bytes_per_cycle": 100})})]
    for _ in range(2):
        for args, kwargs in variants:
            assert _same(moe_token_permute(*args, **kwargs), _fresh(moe_token_permute, *args, **kwargs))


def test_a_custom_profile_is_told_apart_from_the_stock_one_with_the_same_name():
    x, idx = np.zeros((4096, 64), BF16), np.zeros((4096, 2), np.int32)
    stock = moe_token_permute(x, idx)
    fewer = moe_token_permute(x, idx, soc=get_soc("910b", aiv_num=4))
    assert stock.fields["core_num"] == 48 and fewer.fields["core_num"] == 4
    assert moe_token_permute(x, idx).fields["core_num"] == 48


def test_failures_are_raised_again_and_not_remembered():
    x, idx = np.zeros((8, 64), BF16), np.zeros((7, 2), np.int32)
    for _ in range(2):
        with pytest.raises(TilingError, match="dim 0"):
            moe_token_permute(x, idx)


def test_arguments_the_memo_cannot_key_still_tile():
    class Duck:
        shape, dtype = (8, 64), BF16
    got = moe_token_permute(Duck(), np.zeros((8, 2), np.int32))
    assert _same(got, _fresh(moe_token_permute, Duck(), np.zeros((8, 2), np.int32)))


def test_threads_tiling_different_shapes_at_once_each_get_their_own():
    shapes = [(8 + k, 32 * (1 + k % 3), 1 + k % 4) for k in range(12)]
    want = {s: _fresh(moe_token_permute, np.zeros(s[:2], BF16), np.zeros((s[0], s[2]), np.int32)) for s in shapes}
    failures = []

    def run(s):
        for _ in range(20):
            got = moe_token_permute(np.zeros(s[:2], BF16), np.zeros((s[0], s[2]), np.int32))
            if not _same(got, want[s]):
                failures.append(s)

    workers = [threading.Thread(target=run, args=(s,)) for s in shapes]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
