"""DataCacheCleanAndInvalid: no data effect, arguments checked, the next scalar read of the line misses."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import OutOfBoundsError, ParamRangeError
from ascend_sim._jit import global_aicore
from ascend_sim.cost import CostModel
from tiling import get_soc

from .harness import run

COST = CostModel(scalar_call_cycles=4, scalar_gm_hit_cycles=4, scalar_gm_miss_cycles=241, scalar_gm_write_cycles=8)
CHIP = get_soc("ascend950", cost=COST)


@global_aicore
def read_twice(c, g, out, p):
    """GetValue(0); DataCacheCleanAndInvalid<p[0], p[1]> at g[p[2]] (p[3] = 0: none); GetValue(0); out = both."""
    a = asc.get_value(c, g, 0)
    if p[3] != 0:
        asc.data_cache_clean_and_invalid(c, asc.gm_at(g, p[2]), p[0], p[1])
    b = asc.get_value(c, g, 0)
    asc.set_value(c, out, 0, a + b)


def _run(line, dst, at, dcci=1):
    g = np.array([21, 0, 0, 0], dtype=np.int32)
    out = np.zeros(1, dtype=np.int32)
    report = run([read_twice], [], asc.GlobalTensor(g, 0, 0), asc.GlobalTensor(out, 1, 0),
                 np.array([line, dst, at, dcci], dtype=np.int64), chip=CHIP, gm_names=("g", "out"))
    return out[0], report.estimate.cores[0].busy_of("S")


@pytest.mark.parametrize("line", [asc.SINGLE_CACHE_LINE, asc.ENTIRE_DATA_CACHE], ids=["single_line", "entire"])
def test_dcci_makes_next_read_miss(line):
    value, s_cycles = _run(line, asc.CACHELINE_OUT, 0)
    assert value == 42
    # two reads: miss (4 + 241) + miss again (4 + 241) + dcci (4 + 8) + SetValue (4 + 8)
    assert s_cycles == 2 * 245 + 12 + 12
    _, without = _run(line, asc.CACHELINE_OUT, 0, dcci=0)
    assert without == 245 + 8 + 12      # second read hits


@pytest.mark.parametrize("line,dst,match", [(2, 2, "CacheLine = 2"), (0, 4, "DcciDst = 4")], ids=["line", "dst"])
def test_dcci_bad_mode(line, dst, match):
    with pytest.raises(ParamRangeError, match=match):
        _run(line, dst, 0)


def test_dcci_outside_tensor():
    with pytest.raises(OutOfBoundsError, match=r"bytes \[16, 20\) of 'g'"):
        _run(asc.SINGLE_CACHE_LINE, asc.CACHELINE_OUT, 4)
