"""Tiling of the masked select shared by the routing-map ops (Tiling4MaskedSelect of
moe_token_permute_with_routing_map_tiling.cpp and moe_token_unpermute_with_routing_map_tiling.cpp, @ 25fb6b92890d).

The flat mask of num_experts rows x num_tokens elements is split by rows over
min(num_experts, cores) cores: the first `formerNum` cores take ceil(E / cores) rows, the others
floor(E / cores) rows; each core walks its elements in tiles of ubLength elements, where
ubLength = AlignDown((UB - 128) / (4 * elem_bytes + 19), 128), at most num_tokens.
(Per element: in and out value buffers, 7 bytes of mask buffers, 12 of index buffers.)

The struct is uint64 in C++ (needCoreNum int64); the one place unsigned arithmetic shows is a UB
below 128 bytes, where UB - 128 wraps and the tile length ends up clamped to num_tokens.
"""
from __future__ import annotations

from ascend_sim.pipe import UbBuffer

from .common import BLOCK_BYTES
from .status import TilingError

MS_FIELDS = (
    "former_num", "former_length", "formertile_num", "formertile_length", "formerlasttile_length",
    "tail_num", "tail_length", "tailtile_num", "tailtile_length", "taillasttile_length",
    "token_num", "need_core_num",
)
"""MaskedSelectRMTilingData (PWRM) / MaskedSelectMTUTilingData (UWRM) fields, snake_case, in order."""

IO_QUE = 2
DOUBLE_BUFFER = 2
MASK_ONE_DATA_SIZE = 7        # bytes of mask-side buffers per element
INDEX_ONE_DATA_SIZE = 12      # bytes of index-side buffers per element
TILE_ALIGN_ELEMS = 128        # BLOCK_SIZE 256 / 2
KERNEL_TILE_ALIGN_ELEMS = 128  # the kernels' tileLengthAlign: DATA_ALIGN 256 / sizeof(half)
_U64 = 1 << 64


def _ub_length(ub_bytes: int, elem_bytes: int, num_tokens: int) -> int:
    """Elements one tile holds (uint64 arithmetic, then at most num_tokens)."""
    one_data_bytes = IO_QUE * DOUBLE_BUFFER * elem_bytes + MASK_ONE_DATA_SIZE + INDEX_ONE_DATA_SIZE
    free = (ub_bytes - BLOCK_BYTES * DOUBLE_BUFFER * DOUBLE_BUFFER) % _U64
    length = free // one_data_bytes // TILE_ALIGN_ELEMS * TILE_ALIGN_ELEMS
    return min(length, num_tokens)


def masked_select_tiling(*, ub_bytes: int, core_num: int, num_tokens: int, num_experts: int, elem_bytes: int,
                         skip_empty_tile: bool = True) -> dict:
    """The 12 masked-select tiling fields (MS_FIELDS order) for one operator's inputs.

    ub_bytes: UB the op's tiling sees (PWRM: floored to 32 B; UWRM: raw GetCoreMemSize).
    core_num: vector cores (PWRM: compile-info aivNum; UWRM: GetCoreNumAiv).
    num_tokens / num_experts: row length and row count of the flat mask (PWRM: N and E of routingMap^T;
        UWRM: tokensNum and probs.dim1, or 1 without probs).
    elem_bytes: bytes of one value (PWRM: its own table, 2 without probs; UWRM: the GetLengthByType
        table, 0 without probs).
    skip_empty_tile: PWRM (True) leaves every field 0 when the tile length is 0 (its OP_CHECK_IF
        returns); UWRM (False) would divide by that 0, so it fails with TilingError.

    Raises TilingError where the real host code would divide by zero (no cores or no experts).
    """
    f = dict.fromkeys(MS_FIELDS, 0)
    ub_length = _ub_length(ub_bytes, elem_bytes, num_tokens)
    if ub_length == 0:
        if skip_empty_tile:
            return f
        raise TilingError(
            f"masked-select tiling: a tile holds 0 elements (UB {ub_bytes} bytes, {elem_bytes}-byte values, "
            f"{num_tokens} tokens: AlignDown((UB - 128) / {4 * elem_bytes + 19}, 128) must be >= 1 and tokens > 0); "
            "the real host tiling divides by this length")
    blocks = min(num_experts, core_num)
    if blocks <= 0:
        raise TilingError(f"masked-select tiling: {num_experts} experts on {core_num} cores leaves no core to run; "
                          "the real host tiling divides by this core count")
    former = num_experts % blocks or blocks
    tail = blocks - former
    former_length = (num_experts + blocks - 1) // blocks * num_tokens
    f.update(need_core_num=blocks, former_num=former, tail_num=tail, token_num=num_tokens,
             former_length=former_length, formertile_num=(former_length + ub_length - 1) // ub_length,
             formertile_length=ub_length, formerlasttile_length=former_length % ub_length or ub_length)
    if tail > 0:
        tail_length = (num_tokens * num_experts - former_length * former) // tail
        f.update(tail_length=tail_length, tailtile_num=(tail_length + ub_length - 1) // ub_length,
                 tailtile_length=ub_length, taillasttile_length=tail_length % ub_length or ub_length)
    return f


def tile_length_align(fields: dict) -> int:
    """tileLengthAlign of the kernels: the longest tile rounded up to 128 elements (former and tail tiles
    have the same length, ubLength)."""
    tile = max(fields["formertile_length"], fields["tailtile_length"])
    return (tile + KERNEL_TILE_ALIGN_ELEMS - 1) // KERNEL_TILE_ALIGN_ELEMS * KERNEL_TILE_ALIGN_ELEMS


def masked_select_ub_plan(fields: dict, *, elem_bytes: int, with_values: bool, with_indices: bool,
                          pipe: str) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the masked-select kernel, in its order, for one TPipe named `pipe`.

    with_indices=True is KernelMaskedSelectV3 of masked_select_v3.h (PWRM: writes the index stream; values
    only when probs are given); False is masked_select.h (UWRM: values only, with_values must be True).
    elem_bytes: sizeof of one value, ignored without values. The kernels size their value buffers with
    sizeof(T), so any width gives the plan the template would allocate; the OpDefs only compile fp16 / bf16 /
    fp32 values, and the aclnn dtype checks keep every other dtype away from a launch (the real tilings of
    int8 and int64 probs succeed, so this plan must not refuse them).

    The counts TBuf is sized by use: pass 2 copies needCoreNum int32 counts into it, but the real kernels
    give it 64 bytes (v3) or 32 bytes (UWRM), and with more than 16 (8) cores the copy spills into the
    buffers behind it (harmless on the device: those are rewritten before they are read). The plan
    makes it at least AlignUp(needCoreNum * 4, 32) bytes so the simulator's bounds checks hold.
    """
    if not with_indices and not with_values:
        raise ValueError("the UWRM masked select (with_indices=False) always selects values")
    align = tile_length_align(fields)
    counts_bytes = (fields["need_core_num"] * 4 + 31) // 32 * 32

    def que(name, nbytes, position):
        return UbBuffer(name, nbytes, 1, "TQue", position, 1, pipe)

    def tbuf(name, nbytes):
        return UbBuffer(name, nbytes, 1, "TBuf", "VECCALC", 0, pipe)

    if with_indices:
        values = (que("inQueueX", align * elem_bytes, "VECIN"), que("outQueueY", align * elem_bytes, "VECOUT")) \
            if with_values else ()
        return values + (
            que("inQueueMask", align, "VECIN"),
            que("outQueueIndex", align * 4, "VECOUT"),
            tbuf("offsetBuf", max(64, counts_bytes)),
            tbuf("sumBuf", 32),
            tbuf("maskCastBuf", align * 4),
            tbuf("bitMaskBuf", align),
            tbuf("indexBuf", align * 4),
        )
    return (
        que("inQueueX", align * elem_bytes, "VECIN"),
        que("inQueueMask", align, "VECIN"),
        que("outQueueY", align * elem_bytes, "VECOUT"),
        UbBuffer("moveQue", align * elem_bytes, 1, "TQueBind", "VECIN->VECOUT", 1, pipe),
        tbuf("offsetBuf", max(32, counts_bytes)),
        tbuf("sumBuf", 32),
        tbuf("maskCastBuf", align * 4),
        tbuf("bitMaskBuf", align),
    )
