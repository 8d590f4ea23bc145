"""MoeInitRoutingV3 arch35 tiling: the sub-struct formulas (sort, expert-token count, full-load test, the gathers,
drop-pad), each filling its part of the struct as the real tiling does.

source: moe/moe_init_routing_v3/op_host/moe_init_routing_v3_tiling_arch35.cpp @ 25fb6b92890d, lines 1582-1732
(VBS, VMS middle, SortOut, ExpertTokensCount), 1734-2129 (the gathers), 2131-2191 (IsFullLoad), 2193-2352
(drop-pad SrcToDst and gather)
"""
from __future__ import annotations

import math

from ..common import align_bytes, align_up, ceil_div, tdiv
from ..moe_sort import arch35_vbs_split
from .base import (
    BLOCK_BYTES,
    DROPLESS,
    DROPPAD,
    DYNAMIC,
    DYNAMIC_QUANT_COLS_BUFFER,
    DYNAMIC_QUANT_FULLLOAD_COLS_BUFFER,
    DYNAMIC_QUANTS,
    FP8_BLOCK_SIZE,
    HIF8_CAST,
    HIF8_PERTENSOR,
    HIF8_PERTOKEN,
    HIF8_QUANT_COLS_BUFFER,
    INT4_DYNAMIC,
    KEY_VALUE,
    MAX_QUEUE_BUFFER_NUM,
    MRG_LIST_NUM,
    MRG_SORT_API_MAX_ELEM,
    MX_QUANT_BLOCK_SIZE,
    MXFPX_SCALE_BLOCK_SIZE,
    ONE_CORE_SORT_BUFFER,
    REG_SIZE,
    SCALE_FACTOR_WITH_X,
    SORT32_ALIGN_ELEMENT,
    STATIC,
    STATIC_QUANT_FULLLOAD_COLS_BUFFER,
    UNQUANT,
    VBS_FIELDS,
    Ctx,
    align,
    fail,
    mxfpx_no_quant,
)


# --- sort and count (lines 1582-1732) ---------------------------------------------------------------------------
def vbs(c: Ctx) -> int:
    """Tiling4VBSCompute (lines 1648-1667): one core when the keys fit one sort loop (sortMode 0), else 4^x cores
    at most (sortMode 1). Returns sortMode."""
    f, total, loop_max = c.f, c.total, c.sort_loop_max
    f["vbs_one_loop_max_elements"] = loop_max
    if total <= loop_max:                # Tiling4VBSOneCoreCompute (lines 1582-1595)
        for name in VBS_FIELDS[:-1]:
            f[f"vbs_{name}"] = total
        f["vbs_need_core_num"] = f["vbs_per_core_loops"] = f["vbs_last_core_loops"] = 1
        return 0
    # Tiling4VBSMultiCoreCompute (lines 1597-1646): CeilLog4 in double precision, as the C++ does
    need = ceil_div(total, loop_max)
    need = min(int(math.pow(4, int(math.ceil(math.log(need) / math.log(4))))), c.aiv)
    arch35_vbs_split(f, total, need, loop_max)
    return 1


def vms_middle_and_sort_out(c: Ctx) -> None:
    """Tiling4VMSMiddleCompute (lines 1669-1683): no middle merge for up to four sorted lists, else one core per
    four lists; Tiling4SortOutCompute (lines 1685-1693): 1024 keys a merge window."""
    need = c.f["vbs_need_core_num"]
    c.f["vms_middle_need_core_num"] = 0 if need <= MRG_LIST_NUM else ceil_div(need, MRG_LIST_NUM)
    c.f["sort_out_one_loop_max_elements"] = MRG_SORT_API_MAX_ELEM


def expert_tokens_count(c: Ctx) -> None:
    """Tiling4ExpertTokensCountCompute (lines 1695-1732)."""
    f, total = c.f, c.total
    per_core = ceil_div(total, c.aiv)
    need = ceil_div(total, per_core)
    last = total - (need - 1) * per_core
    actual = c.end - c.start
    experts = actual if c.tokens_type != KEY_VALUE else (actual + 1) * 2
    max_per_loop = tdiv(c.avail_ub - align_up(experts, BLOCK_BYTES) * (4 * 2 + 8) - BLOCK_BYTES, 4)
    if max_per_loop <= 0:
        # not a check of the real tiling: it goes on with a loop of <= 0 ids (CeilDiv by it), which no kernel runs
        fail(f"UB of {c.avail_ub} bytes (after the SIMT data cache) leaves no room for ExpertTokensCount's loop of "
             f"sorted ids after its {experts}-expert count buffers ({align_up(experts, BLOCK_BYTES) * 16} "
             "bytes): fewer active experts or a larger UB")
    values = dict(need_core_num=need, per_core_elements=per_core, last_core_elements=last)
    for who, elems in (("per_core", per_core), ("last_core", last)):
        loops = ceil_div(elems, max_per_loop)
        per_loop = ceil_div(elems, loops)
        values.update({f"{who}_loops": loops, f"{who}_per_loop_elements": per_loop,
                       f"{who}_last_loop_elements": elems - (loops - 1) * per_loop})
    for k, v in values.items():
        f[f"expert_tokens_count_{k}"] = v


def is_full_load(c: Ctx) -> bool:
    """IsFullLoad (lines 2131-2191): sort and gather fit one core's UB; sets epFullload on the way."""
    if c.drop_pad == DROPPAD:
        return False
    per_core_tokens = 1
    if c.start == 0 and c.end == c.expert_num:
        ep = 0
        if c.quant not in DYNAMIC_QUANTS:
            est, rem = tdiv(c.n, c.aiv), c.n % c.aiv
            per_core_tokens = est + 1 if rem <= 1 else est + 2
    else:
        ep = 1
    c.f["ep_fullload"] = ep
    if c.total > c.sort_loop_max:
        return False
    tile = align(c.total, 4)
    sort_num = ceil_div(tile, SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT
    remain = (c.avail_ub - sort_num * 4 * ONE_CORE_SORT_BUFFER - sort_num * 4 * 3
              - ceil_div(c.expert_num * 8, BLOCK_BYTES) * BLOCK_BYTES * 3 - 1024)
    gather = ceil_div(c.cols * c.x_size, BLOCK_BYTES) * BLOCK_BYTES * per_core_tokens
    if c.quant == UNQUANT:
        remain -= gather + BLOCK_BYTES
    elif c.quant == STATIC:
        remain -= gather + align(c.cols, 1) * STATIC_QUANT_FULLLOAD_COLS_BUFFER * per_core_tokens
    elif c.quant == INT4_DYNAMIC:
        x_in = align_bytes(c.cols, 4) if c.x_size == 4 else 2 * align_bytes(c.cols, c.x_size)
        remain -= (2 * x_in + align_bytes(c.cols, 4) + align_bytes(c.cols, 4)
                   + align_bytes(ceil_div(c.cols, 2), 1) + BLOCK_BYTES * 2)
    elif c.quant == DYNAMIC:
        remain -= align(c.cols, BLOCK_BYTES) * DYNAMIC_QUANT_FULLLOAD_COLS_BUFFER + BLOCK_BYTES * 2
    return remain > 0


# --- the dropless gathers (lines 1734-2129) -----------------------------------------------------------------------
def _x_buffer_num(additional: int) -> int:
    """GetXBufferNum (lines 1865-1871)."""
    return min(additional + 2, MAX_QUEUE_BUFFER_NUM) if additional > 0 else 2


def _multiples(c: Ctx) -> tuple[int, int]:
    """GetMultipleParams (lines 1734-1758): (colMultiple, rowMultiple), UB bytes per column and per index."""
    if c.quant == STATIC:
        return 2 * c.x_size + 2 + 4 + 2, 2
    if c.quant in DYNAMIC_QUANTS:
        return DYNAMIC_QUANT_COLS_BUFFER, 4
    if c.quant == HIF8_CAST and c.x_dtype == "bfloat16":
        return 2 * (c.x_size + c.x_size * 2), 2    # bf16 goes through an fp32 copy before the cast
    if c.quant in (HIF8_PERTOKEN, HIF8_PERTENSOR):
        return HIF8_QUANT_COLS_BUFFER, 4
    return 2 * c.x_size, 2


def _per_loop_drop_pad(c: Ctx, col_mult: int, row_mult: int, cols: int, per_core: int) -> tuple[int, int, int]:
    """SetPerLoopParams4NoQuantDropPad (lines 1836-1863; also the quantised paths): (perLoopCols, maxIndices,
    xBufferNum)."""
    def max_idx(pc):
        return tdiv(tdiv(c.avail_ub - align(pc, c.x_size) * col_mult - BLOCK_BYTES * 2, row_mult), 4)
    m = max_idx(cols)
    while m <= 0 and cols > 1:
        cols = ceil_div(cols, 2)
        m = max_idx(cols)
    m = min(m, per_core)
    x_queue = align_bytes(cols, c.x_size)
    base = (align_bytes(m, 4) + x_queue + align_bytes(1, 4)) * 2
    return cols, m, _x_buffer_num(tdiv(c.avail_ub - base, x_queue))


def _per_loop(c: Ctx, col_mult: int, row_mult: int, per_core: int) -> tuple[int, int, int]:
    """GetPerLoopParams (lines 1760-1799)."""
    cols = c.cols
    if c.quant == HIF8_PERTENSOR:
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub - align(pc, c.x_size) * col_mult, row_mult), 4)
        m = max_idx(cols)
        while m <= 0 and cols > 1:
            cols = ceil_div(cols, 2)
            m = max_idx(cols)
        return cols, min(m, per_core), 2
    if mxfpx_no_quant(c.quant, c.x_dtype):
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub - align(pc, c.x_size) * col_mult
                             - align(tdiv(pc, SCALE_FACTOR_WITH_X), c.scale_size) * c.scale_size * 2, row_mult), 4)
        cols = align_up(cols, MXFPX_SCALE_BLOCK_SIZE)
        m = max_idx(cols)
        while m <= 0:
            cols = align_up(ceil_div(cols, 2), MXFPX_SCALE_BLOCK_SIZE)
            m = max_idx(cols)
        return cols, m, 2
    if c.quant == UNQUANT and c.drop_pad == DROPLESS:
        # SetPerLoopParams4NoQuantDropLess (lines 1810-1834)
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub, 2), align_bytes(pc, c.x_size) + align_bytes(1, 4) + 4)
        m = max_idx(cols)
        while m <= 0:
            cols = ceil_div(cols, 2)
            m = max_idx(cols)
        m = min(m, per_core)
        x_queue = m * align_bytes(cols, c.x_size)
        base = (align_bytes(m, 4) + x_queue + m * align_bytes(1, 4)) * 2
        return cols, m, _x_buffer_num(tdiv(c.avail_ub - base, x_queue))
    return _per_loop_drop_pad(c, col_mult, row_mult, cols, per_core)


def _core_split(total: int, aiv: int) -> tuple[int, int, int]:
    per_core = ceil_div(total, aiv)
    need = ceil_div(total, per_core)
    return need, per_core, total - (need - 1) * per_core


def _set_loops(f: dict, who: str, elems: int, max_per_loop: int) -> None:
    """SetLastCoreIndicesTiling / SetIndicesLoopParams4GatherOut's loop split of one core's indices."""
    per_loop = min(max_per_loop, elems)
    loops = ceil_div(elems, per_loop)
    f[f"gather_out_{who}_indices_loops"] = loops
    f[f"gather_out_{who}_per_loop_indices_elements"] = per_loop
    f[f"gather_out_{who}_last_loop_indices_elements"] = elems - (loops - 1) * per_loop


def _set_cols(f: dict, cols: int, per_loop_cols: int) -> None:
    loops = ceil_div(cols, per_loop_cols)
    f.update(gather_out_cols_loops=loops, gather_out_per_loop_cols=per_loop_cols,
             gather_out_last_loop_cols=cols - (loops - 1) * per_loop_cols)


def gather_out(c: Ctx) -> None:
    """Tiling4GatherOutCompute (lines 1887-1931), with AlignInt4DynamicQuantPerLoopCols (lines 1801-1808)."""
    f = c.f
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    need, per_core, last = _core_split(c.total, c.aiv)
    col_mult, row_mult = _multiples(c)
    cols, m, bufs = _per_loop(c, col_mult, row_mult, per_core)
    if c.quant == INT4_DYNAMIC and cols < c.cols and cols % 2:
        # two INT4 values share a byte: a column piece must be even
        cols, m, bufs = _per_loop_drop_pad(c, col_mult, row_mult, max(cols - 1, 2), per_core)
        if cols < c.cols and cols % 2:
            cols = max(cols - 1, 2)
    f.update(gather_out_need_core_num=need, gather_out_per_core_indices_elements=per_core,
             gather_out_last_core_indices_elements=last, gather_out_x_copy_in_queue_buffer_num=bufs)
    _set_cols(f, c.cols, cols)
    _set_loops(f, "per_core", per_core, m)
    _set_loops(f, "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


def gather_out_mxfp8_no_quant(c: Ctx) -> None:
    """Tiling4GatherOutMxFP8NoQuantCompute (lines 1933-1989): fp8 x copied with its E8M0 scales."""
    f = c.f
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    _, per_core, last = _core_split(c.total, c.aiv)

    def row_bytes(pc):
        return (align(pc, c.x_size) * c.x_size * 2
                + align(tdiv(pc, SCALE_FACTOR_WITH_X), c.scale_size) * c.scale_size * 2)
    cols = align_up(c.cols, MXFPX_SCALE_BLOCK_SIZE)
    m = tdiv(tdiv(c.avail_ub - row_bytes(cols), 2), 4)
    bufs = 2
    if m > 0:
        # more x buffers only when a whole row fits
        bufs = min(MAX_QUEUE_BUFFER_NUM, tdiv(c.avail_ub - 2 * 4 * min(m, per_core), row_bytes(cols)) * 2)
    while m <= 0:
        cols = align_up(ceil_div(cols, 2), MXFPX_SCALE_BLOCK_SIZE)
        m = tdiv(tdiv(c.avail_ub - row_bytes(cols), 2), 4)
    # this template leaves needCoreNum, the per-core counts and the per-core loop figures at 0 (the kernel
    # works them out from the expert counts)
    _set_cols(f, c.cols, cols)
    f["gather_out_x_copy_in_queue_buffer_num"] = bufs
    f["gather_out_per_core_per_loop_indices_elements"] = min(m, per_core)
    _set_loops(f, "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


def mx_max_indices(c: Ctx, per_loop_cols: int) -> int:
    """CalcMaxRowIdxPerLoopMxQuant (lines 1991-2004): row ids one loop holds in half the UB, after one piece's
    x (its own dtype plus a byte a column), its two dtype-sized and one byte-sized scale vectors (a scale per 32
    columns) and its codes."""
    x_in = align_bytes(per_loop_cols, c.x_size) + align_bytes(per_loop_cols, 1)
    blocks = tdiv(per_loop_cols, MX_QUANT_BLOCK_SIZE)
    scale = 2 * align_bytes(blocks, c.x_size) + align_bytes(blocks, 1)
    x_out = align(tdiv(per_loop_cols, 4), 1) * 4
    return tdiv(tdiv(c.avail_ub, 2) - (x_in + scale + x_out), 4)


def fp8_max_indices(c: Ctx, per_loop_cols: int) -> int:
    """CalcMaxRowIdxPerLoopFP8Quant (lines 2071-2080), per-block and per-group alike: half the UB less one piece's
    x, its codes and max(its float scales, one 256-byte register)."""
    x_in, x_out = align_bytes(per_loop_cols, c.x_size), align_bytes(per_loop_cols, 1)
    scale = max(align_bytes(ceil_div(per_loop_cols, FP8_BLOCK_SIZE), 4), REG_SIZE)
    return tdiv(tdiv(c.avail_ub, 2) - (x_in + x_out + scale), 4)


def gather_out_quant(c: Ctx, block: int, max_indices) -> None:
    """Tiling4GatherOutMxQuant (lines 2027-2069, `block` 32) / Tiling4GatherOutFP8Quant (lines 2082-2129, `block`
    128): columns in pieces of whole blocks, halved until a loop holds a row id."""
    f = c.f
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    need, per_core, last = _core_split(c.total, c.aiv)
    cols = align_up(c.cols, block)
    m = max_indices(c, cols)
    while m <= 0 and cols > block:
        cols = align_up(ceil_div(cols, 2), block)
        m = max_indices(c, cols)
    if m <= 0:
        # the real tiling logs "UB space insufficient" and goes on with the gather fields unset
        return
    f.update(gather_out_need_core_num=need, gather_out_per_core_indices_elements=per_core,
             gather_out_last_core_indices_elements=last)
    _set_cols(f, c.cols, cols)
    _set_loops(f, "per_core", per_core, m)
    _set_loops(f, "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


# --- drop-pad (lines 2193-2352) --------------------------------------------------------------------------------------
def src_to_dst_drop_pad(c: Ctx) -> None:
    """Tiling4SrcToDstDropPadCompute (lines 2215-2240) with SetLoopParams4SrcToDstDropPad (lines 2193-2213)."""
    f, p = c.f, "src_to_dst_drop_pad_"
    per_core = ceil_div(c.total, c.aiv)
    if per_core <= 0:
        f[p + "need_core_num"] = 0
        return
    need = ceil_div(c.total, per_core)
    last = c.total - per_core * (need - 1)
    row_align = BLOCK_BYTES // 4
    max_rows = max(tdiv(tdiv(c.avail_ub - BLOCK_BYTES, 4), 2) // row_align * row_align, row_align)
    values = dict(need_core_num=need, per_core_rows=per_core, last_core_rows=last, per_loop_cols=c.cols,
                  last_loop_cols=c.cols, col_loops=1)
    for who, rows in (("per_core", per_core), ("last_core", last)):
        per_loop = min(rows, max_rows)
        loops = ceil_div(rows, per_loop)
        values.update({f"{who}_per_loop_rows": per_loop, f"{who}_loops": loops,
                       f"{who}_last_loop_rows": rows - (loops - 1) * per_loop})
    for k, v in values.items():
        f[p + k] = v


def gather_out_drop_pad(c: Ctx) -> None:
    """Tiling4GatherOutDropPadCompute (lines 2326-2352): UseCompactGatherOutDropPad (lines 2242-2255),
    SetGatherOutDropPadCoreSplitParams (lines 2257-2274), SetGatherOutDropPadLoopParams (lines 2276-2324)."""
    f = c.f
    out_rows = c.expert_num * c.capacity
    compact = False
    if out_rows <= c.total:
        # scanning only the output rows saves index reads but copies rows beyond n at random (weight 4)
        row_copy = c.cols * c.x_size + (4 if c.is_scale == 1 else 0)
        compact = (c.total - out_rows) * 4 > max(out_rows - c.n, 0) * row_copy * 4
    f["gather_out_use_compact_gather_out_drop_pad"] = int(compact)
    split = out_rows if compact else c.total
    per_core = ceil_div(split, c.aiv)
    if per_core <= 0:
        f["gather_out_per_core_per_loop_indices_elements"] = f["gather_out_last_core_per_loop_indices_elements"] = 0
        return
    need = ceil_div(split, per_core)
    last = split - (need - 1) * per_core
    scale_q = 2 * align_bytes(1, 4) if c.is_scale == 1 else 0
    cols, m = c.cols, 0
    while m <= 0 and cols > 0:
        m = tdiv(tdiv(tdiv(c.avail_ub - 2 * align_bytes(cols, c.x_size) - scale_q, 2), 4), 8) * 8
        if m > 0 or cols <= 1:
            break
        cols = ceil_div(cols, 2)
    _set_cols(f, c.cols, cols)
    _set_loops(f, "per_core", per_core, m)
    _set_loops(f, "last_core", last, m)
    f.update(gather_out_x_copy_in_queue_buffer_num=2, gather_out_need_core_num=need,
             gather_out_per_core_indices_elements=per_core, gather_out_last_core_indices_elements=last)
