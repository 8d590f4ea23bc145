"""DataCacheCleanAndInvalid<T, CacheLine, DcciDst>(gm) (numba).

The scalar unit reads GM through a data cache; a kernel that reads GM another core (or its own DMA) wrote calls
DataCacheCleanAndInvalid first (MoeInitRoutingV3's gather reads the expert total count so). The simulator's
scalar reads go to GM directly, so the call moves no data; it is checked, counted as a call and timed: it costs
`scalar_gm_write_cycles` on the scalar unit (assumed: a write-back of one line), and the timeline's data cache
drops the line (SINGLE_CACHE_LINE) or every line (ENTIRE_DATA_CACHE), so the next GetValue there misses.
"""
from __future__ import annotations

from . import timeline as tl
from ._jit import aicore
from .faults import fault, issue
from .gm_cost import device_address
from .layout import (
    CALL_DCCI,
    DCACHE_MAX_LINES,
    F_GM_OOB,
    F_PARAM,
    P_CACHE_LINE,
    P_DCCI_DST,
    TL_DCACHE,
    TL_DCACHE_MASK,
    TL_DCACHE_SHIFT,
    TL_GM_WRITE,
    TL_ON,
)

SINGLE_CACHE_LINE = 0     # AscendC::CacheLine
ENTIRE_DATA_CACHE = 1
CACHELINE_ALL = 0         # AscendC::DcciDst
CACHELINE_UB = 1
CACHELINE_OUT = 2
CACHELINE_ATOMIC = 3


@aicore
def data_cache_clean_and_invalid(c, g, cache_line, dst):
    """DataCacheCleanAndInvalid<T, cache_line, dst>(g): write back and drop the data-cache line holding g[0]
    (SINGLE_CACHE_LINE; g's offset must lie inside its tensor) or the whole cache (ENTIRE_DATA_CACHE)."""
    if not issue(c, CALL_DCCI):
        return
    if cache_line != SINGLE_CACHE_LINE and cache_line != ENTIRE_DATA_CACHE:
        fault(c, F_PARAM, CALL_DCCI, P_CACHE_LINE, cache_line, 0, 1)
        return
    if dst < CACHELINE_ALL or dst > CACHELINE_ATOMIC:
        fault(c, F_PARAM, CALL_DCCI, P_DCCI_DST, dst, 0, 3)
        return
    isz = g.data.itemsize
    if cache_line == SINGLE_CACHE_LINE and (g.offset < 0 or g.offset >= g.data.size):
        fault(c, F_GM_OOB, CALL_DCCI, g.id, g.offset * isz, (g.offset + 1) * isz, g.data.nbytes)
        return
    if c.state[TL_ON] == 0:
        return
    if cache_line == ENTIRE_DATA_CACHE:
        for k in range(DCACHE_MAX_LINES):
            c.state[TL_DCACHE + k] = 0
        tl.scalar(c, CALL_DCCI, c.state[TL_GM_WRITE], 0)
        return
    address = device_address(g, g.offset * isz)
    line = address >> c.state[TL_DCACHE_SHIFT]
    slot = TL_DCACHE + (line & c.state[TL_DCACHE_MASK])
    if c.state[slot] == line + 1:
        c.state[slot] = 0
    tl.scalar(c, CALL_DCCI, c.state[TL_GM_WRITE], address & 0xFFFF)
