"""The L2 model's window at its boundary: a core that reads exactly its share of the L2 over and over.

ascend910b: 192 MiB of L2 over 48 running cores is 4 MiB per core (8192 lines of 512 bytes). The copy benchmark's
band-four-times scenario on a 12288 x 8192 fp16 matrix in 64 x 1024 tiles gives each core a band of 12288 / 48 =
256 rows x 8192 x 2 bytes = 4 MiB, read four times: every line is read again exactly one table's worth of lines
after its last use, the last reuse distance the window still holds. The numbers below are worked out by hand.
"""
from __future__ import annotations

from ops.bench import data_copy as bench
from tiling import get_soc

CORES = 48
M, N = 12288, 8192
BAND = (M // CORES) * N * 2                  # 4 MiB: one core's band, bytes
LINE = 512
EXACT = bench.Scenario("ascend910b", 5, "band x 4, band = L2 share", M, N, 64, 1024, 0.0)


def test_a_band_of_exactly_the_l2_share_hits_l2_on_three_of_four_passes():
    assert BAND == 4 * 1024 * 1024 == 192 * 1024 * 1024 // CORES
    report = bench.run(EXACT)
    est = report.estimate
    assert [c.mte2_bytes for c in report.cores] == [4 * BAND] * CORES
    assert est.gm_bytes == CORES * 4 * BAND
    # the first pass misses every line; the three after it hit every block: three quarters of the bytes
    assert est.l2_hit_bytes == CORES * 3 * BAND == 3 * est.gm_bytes // 4


def test_a_window_one_line_short_of_the_band_keeps_nothing():
    """An L2 share one line short of the band (192 MiB less one line per core): an LRU window smaller than the
    sweep keeps no line until its reuse, so no pass hits and the estimate is that of four passes from HBM."""
    short = get_soc("ascend910b", cost={"l2_bytes": CORES * (BAND - LINE)})
    exact = bench.run(EXACT).estimate
    past = bench.run(EXACT, soc=short).estimate
    assert past.l2_hit_bytes == 0 and past.gm_bytes == exact.gm_bytes
    assert 2.1 < past.time_us / exact.time_us < 2.3
