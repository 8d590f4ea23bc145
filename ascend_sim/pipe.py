"""TPipe::InitBuffer: the buffer plan of a kernel, made before launch.

A kernel's Init() reserves its queues and TBufs from the Unified Buffer with a bump
allocator; lengths round up to 32 bytes. The plan is laid out on the host from the
kernel's buffer list, so a plan that does not fit fails with `UBOverflowError` (and its
whole allocation table) before any byte moves. The laid-out plan becomes the per-core
queue table that the numba queue calls (queue.py) read and update.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .errors import QueueError, UBOverflowError
from .layout import (
    KIND_TBUF,
    KIND_TQUE,
    KIND_TQUEBIND,
    MAX_BUFFERS_PER_POSITION,
    POS_VECCALC,
    POS_VECIN,
    POS_VECOUT,
    Q_BASE,
    Q_DEPTH,
    Q_DST_POS,
    Q_KIND,
    Q_LEN,
    Q_NUM,
    Q_SRC_POS,
    QUE_COLS,
    align32,
)

MAX_PIPE_BUFFERS = 64            # buffers one TPipe can manage

_KINDS = {"TQue": KIND_TQUE, "TQueBind": KIND_TQUEBIND, "TBuf": KIND_TBUF}
_POSITIONS = {"VECIN": POS_VECIN, "VECOUT": POS_VECOUT, "VECCALC": POS_VECCALC}


class UbBuffer(NamedTuple):
    """One TPipe::InitBuffer call: `count` buffers of `bytes` bytes for a TQue, TQueBind or TBuf.

    The first three fields are the (name, bytes, count) row of `TilingResult.ub_plan`.
    `position` is "VECIN", "VECOUT" or "VECCALC" (a TQueBind is "VECIN->VECOUT");
    `depth` is the TQue depth (0 for a TBuf); `pipe` names the TPipe (a kernel may use several in turn).
    """
    name: str
    bytes: int
    # the field shadows tuple.count on purpose (plans read .count); mypy reports any field named so
    count: int = 1  # type: ignore[assignment]
    kind: str = "TBuf"
    position: str = "VECCALC"
    depth: int = 0
    pipe: str = "pipe"


@dataclass(frozen=True)
class PipePlan:
    """The laid-out buffers: offsets in UB bytes, plus the queue table for the cores."""
    buffers: tuple[UbBuffer, ...]
    offsets: tuple[int, ...]
    capacity_bytes: int

    @property
    def used_bytes(self) -> int:
        if not self.buffers:
            return 0
        last = len(self.buffers) - 1
        return self.offsets[last] + self.buffers[last].count * align32(self.buffers[last].bytes)

    def table(self) -> list[tuple[str, str, int, int, int, int]]:
        """Rows (name, kind@position, num, bytes_each_rounded, offset, end) in allocation order."""
        rows = []
        for buf, off in zip(self.buffers, self.offsets, strict=True):
            each = align32(buf.bytes)
            rows.append((buf.name, f"{buf.kind}@{buf.position}", buf.count, each, off, off + buf.count * each))
        return rows

    def queue_table(self) -> np.ndarray:
        t = np.zeros((max(len(self.buffers), 1), QUE_COLS), dtype=np.int64)
        for i, (buf, off) in enumerate(zip(self.buffers, self.offsets, strict=True)):
            src, _, dst = buf.position.partition("->")
            t[i, Q_KIND] = _KINDS[buf.kind]
            t[i, Q_SRC_POS] = _POSITIONS[src]
            t[i, Q_DST_POS] = _POSITIONS[dst or src]
            t[i, Q_BASE] = off
            t[i, Q_LEN] = align32(buf.bytes)
            t[i, Q_NUM] = buf.count
            t[i, Q_DEPTH] = buf.depth
        return t


def buffer_ids(buffers: Sequence[str], *names: str, also: Sequence[Sequence[str]] = ()) -> tuple[int, ...]:
    """The ids the queue calls (AllocTensor, EnQue, TBuf::Get, ...) take for the buffers `names`: a buffer's id is
    its place in the PipePhase's `buffers` tuple, the order of its InitBuffer calls. A kernel derives its id
    constants with it (`IN_QUEUE_X, OUT_QUEUE_Z = buffer_ids(BUFFERS, "inQueueX", "outQueueZ")`), so an id names
    the buffer it says. `also`: other buffer tuples the same ids serve (TPipes of sibling kernels sharing code),
    where each name must stand at the same place. A name missing from a tuple, a different place, or a tuple
    naming a buffer twice is a ValueError."""
    ids: tuple[int, ...] | None = None
    for tup in (buffers, *also):
        if len(set(tup)) != len(tup):
            raise ValueError(f"buffers {tuple(tup)} name a buffer twice")
        missing = [n for n in names if n not in tup]
        if missing:
            raise ValueError(f"{missing} not among the buffers {tuple(tup)}")
        here = tuple(list(tup).index(n) for n in names)
        if ids is not None and here != ids:
            raise ValueError(f"{names} stand at places {here} of {tuple(tup)} but {ids} of {tuple(buffers)}")
        ids = here
    assert ids is not None          # `buffers` itself was checked
    return ids


def format_table(rows, capacity_bytes: int, marker_row: int | None = None) -> str:
    lines = [f"  {'buffer':<32} {'kind@position':<26} {'num':>4} {'bytes':>9} {'offset':>9} {'end':>9}"]
    for i, (name, kind, num, each, off, end) in enumerate(rows):
        mark = "  <-- exceeds UB" if marker_row is not None and i >= marker_row else ""
        lines.append(f"  {name:<32} {kind:<26} {num:>4} {each:>9} {off:>9} {end:>9}{mark}")
    lines.append(f"  UB capacity {capacity_bytes} bytes")
    return "\n".join(lines)


def plan_pipe(buffers: Sequence[UbBuffer], capacity_bytes: int, *, op: str | None = None,
              tiling_key: int | None = None, pipe: str | None = None, advice: str = "") -> PipePlan:
    """Lay out InitBuffer calls in order; raise UBOverflowError if the plan exceeds the UB.

    `pipe` names the TPipe in messages; `advice` (the operator's knobs that shrink the plan) ends the
    UBOverflowError's detail.
    """
    offsets, cursor = [], 0
    for buf in buffers:
        if buf.kind not in _KINDS:
            raise ValueError(f"buffer {buf.name!r}: unknown kind {buf.kind!r}")
        if buf.count < 1 or buf.bytes < 0:
            raise QueueError(f"InitBuffer({buf.name}, num={buf.count}, len={buf.bytes}) needs num >= 1, len >= 0",
                             op=op, tiling_key=tiling_key, call="TPipe::InitBuffer")
        offsets.append(cursor)
        cursor += buf.count * align32(buf.bytes)
    plan = PipePlan(tuple(buffers), tuple(offsets), capacity_bytes)
    if cursor > capacity_bytes:
        rows = plan.table()
        first_bad = next(i for i, r in enumerate(rows) if r[5] > capacity_bytes)
        which = f"TPipe '{pipe}'" if pipe else "the kernel's TPipe"
        detail = format_table(rows, capacity_bytes, first_bad)
        if advice:
            detail += "\n" + advice
        raise UBOverflowError(
            f"{which} needs {cursor} bytes of UB for its {len(rows)} InitBuffer calls but the core has "
            f"{capacity_bytes} ({cursor - capacity_bytes} bytes over; '{rows[first_bad][0]}' ends at byte "
            f"{rows[first_bad][5]})",
            table=rows, capacity_bytes=capacity_bytes, needed_bytes=cursor, pipe=pipe, op=op, tiling_key=tiling_key,
            call="TPipe::InitBuffer", detail=detail)
    total = sum(b.count for b in buffers)
    if total > MAX_PIPE_BUFFERS:
        raise QueueError(f"{total} buffers exceed the {MAX_PIPE_BUFFERS} one TPipe can manage",
                         op=op, tiling_key=tiling_key, call="TPipe::InitBuffer")
    per_position: dict[str, int] = {}
    for buf in buffers:
        if buf.kind != "TBuf":
            per_position[buf.position] = per_position.get(buf.position, 0) + buf.count
    for pos, n in per_position.items():
        if n > MAX_BUFFERS_PER_POSITION:
            raise QueueError(f"{n} queue buffers at {pos} exceed the {MAX_BUFFERS_PER_POSITION} event ids "
                             "one position has (the NPU would hang)", op=op, tiling_key=tiling_key,
                             call="TPipe::InitBuffer")
    return plan
