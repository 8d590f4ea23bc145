"""Errors raised when a simulated kernel breaks a rule of the AscendC machine model.

Every error names where it happened (core, operator, tilingKey, AscendC call) so a
user can find the offending line in the kernel, the way CPU twin-debug and
msSanitizer reports do.
"""
from __future__ import annotations


class SimulatorError(Exception):
    """A kernel broke a rule of the machine model.

    Attributes:
        core: block index of the simulated vector core, or None for launch-level errors.
        op: operator name (e.g. "MoeTokenUnpermuteWithRoutingMapGrad").
        tiling_key: tilingKey of the kernel that ran.
        call: the AscendC call that failed (e.g. "DataCopyPad(GM->UB)").
        detail: extra lines (allocation table, queue state, ...).
    """

    def __init__(self, summary: str, *, core: int | None = None, op: str | None = None,
                 tiling_key: int | None = None, call: str | None = None, detail: str = ""):
        self.summary = summary
        self.core = core
        self.op = op
        self.tiling_key = tiling_key
        self.call = call
        self.detail = detail
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.op is not None:
            where.append(self.op if self.tiling_key is None else f"{self.op} tilingKey {self.tiling_key}")
        if self.core is not None:
            where.append(f"core {self.core}")
        if self.call:
            where.append(self.call)
        head = f"[{', '.join(where)}] {self.summary}" if where else self.summary
        return head if not self.detail else f"{head}\n{self.detail}"


class UBOverflowError(SimulatorError):
    """TPipe::InitBuffer requests more Unified Buffer than the core has.

    Attributes:
        table: the whole allocation table as rows (name, kind, num, bytes_each, offset, end).
        capacity_bytes: UB bytes the TPipe may allocate.
    """

    def __init__(self, summary: str, *, table=(), capacity_bytes: int = 0, **kw):
        self.table = tuple(table)
        self.capacity_bytes = capacity_bytes
        super().__init__(summary, **kw)


class OutOfBoundsError(SimulatorError):
    """A GM, UB or scalar-array access outside its tensor."""


class AlignmentError(SimulatorError):
    """A UB address or a DataCopy length that breaks the 32-byte rules."""


class ParamRangeError(SimulatorError):
    """An instruction parameter outside its documented range (blockCount, repeatTime, cast mode...)."""


class ElementTypeError(SimulatorError):
    """Operands of one instruction whose element types may not differ (DataCopy's GM and UB sides)."""


class QueueError(SimulatorError):
    """AllocTensor / EnQue / DeQue / FreeTensor used against the TQue state machine."""


class SyncError(SimulatorError):
    """SetFlag / WaitFlag / PipeBarrier / SyncAll misuse that would hang or leak state on hardware."""
