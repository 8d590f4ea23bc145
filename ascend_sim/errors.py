"""Errors raised when a simulated kernel breaks a rule of the AscendC machine model.

Every error names where it happened (core, operator, tilingKey, AscendC call) so a
user can find the offending line in the kernel, the way CPU twin-debug and
msSanitizer reports do.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A simulator setting outside what it supports: a thread count, an environment variable, a chip
    profile's UB size or core count. Raised before anything is compiled or launched.

    Attributes:
        setting: the argument or setting at fault (e.g. "check", "cores"), or None when the message alone
            names it.
    """

    def __init__(self, message: str, *, setting: str | None = None):
        super().__init__(message)
        self.setting = setting


class UnsupportedDtypeError(ValueError):
    """A dtype that is no ge::DataType the simulator knows (dtypes.dt_of). A ValueError, as the argument checks
    that turn it into an AclnnError catch it.

    Attributes:
        dtype: the dtype (or whatever was passed as one) at fault.
    """

    def __init__(self, message: str, *, dtype=None):
        super().__init__(message)
        self.dtype = dtype


class BufferPlanError(ConfigError):
    """A launch's UB plan whose buffers of one TPipe are not the kernel's (names or order). Raised before anything
    is compiled or launched.

    Attributes:
        kernel: the kernel's name.
        pipe: the TPipe the rows belong to.
        plan_buffers: the buffer names the plan gives that TPipe, in order.
        kernel_buffers: the buffer names the kernel declares for it.
    """

    def __init__(self, message: str, *, kernel: str, pipe: str, plan_buffers: tuple, kernel_buffers: tuple):
        super().__init__(message, setting="plan")
        self.kernel = kernel
        self.pipe = pipe
        self.plan_buffers = tuple(plan_buffers)
        self.kernel_buffers = tuple(kernel_buffers)


def whole_number(name: str, value, low: int, high: int, unit: str, error=ConfigError) -> int:
    """`value` as an int if it is a whole number (Python or NumPy integer, not a bool) in [low, high];
    otherwise `error` with a message naming the setting, the range and the unit."""
    def fail(message: str):
        return error(message, setting=name) if error is ConfigError else error(message)

    if isinstance(value, bool) or not hasattr(value, "__index__") or hasattr(value, "dtype") and \
            value.dtype.kind == "b":
        raise fail(f"{name} must be a whole number of {unit}, got {value!r} ({type(value).__name__})")
    value = value.__index__()
    if not low <= value <= high:
        raise fail(f"{name} must be between {low:,} and {high:,} {unit}, got {value:,}")
    return value


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
        needed_bytes: UB bytes the plan asks for.
        pipe: the TPipe whose InitBuffer calls do not fit.
    """

    def __init__(self, summary: str, *, table=(), capacity_bytes: int = 0, needed_bytes: int = 0,
                 pipe: str | None = None, **kw):
        self.table = tuple(table)
        self.pipe = pipe
        self.capacity_bytes = capacity_bytes
        self.needed_bytes = needed_bytes
        super().__init__(summary, **kw)


class OutOfBoundsError(SimulatorError):
    """A GM, UB or scalar-array access outside its tensor.

    Attributes (GM accesses; None otherwise):
        tensor: the GM tensor's name.
        byte_range: (first, end) bytes of the access relative to the tensor's start.
        index_tensor, index_element, index_value: where the bad address came from, when the operator
            can tell (an index the kernel read from GM, e.g. out_index[37] = 99999).
    """

    def __init__(self, summary: str, *, tensor: str | None = None, byte_range: tuple | None = None, **kw):
        self.tensor = tensor
        self.byte_range = byte_range
        # set by with_index_source
        self.index_tensor: str | None = None
        self.index_element: int | None = None
        self.index_value: int | None = None
        super().__init__(summary, **kw)

    def with_index_source(self, index_tensor: str, element: int, value: int, valid: str) -> "OutOfBoundsError":
        """The same error, its message extended by the index value that produced the address."""
        summary = f"{self.summary}; the address comes from {index_tensor}[{element}] = {value}, outside {valid}"
        err = OutOfBoundsError(summary, tensor=self.tensor, byte_range=self.byte_range, core=self.core, op=self.op,
                               tiling_key=self.tiling_key, call=self.call, detail=self.detail)
        err.index_tensor, err.index_element, err.index_value = index_tensor, element, value
        return err


class AlignmentError(SimulatorError):
    """A UB address or a DataCopy length that breaks the 32-byte rules."""


class ParamRangeError(SimulatorError):
    """An instruction parameter outside its documented range (blockCount, repeatTime, cast mode...)."""


class ElementTypeError(SimulatorError):
    """Operands of one instruction whose element types may not differ (DataCopy's GM and UB sides)."""


class QueueError(SimulatorError):
    """AllocTensor / EnQue / DeQue / FreeTensor used against the TQue state machine."""


class PipeRaceError(SimulatorError):
    """Checked mode: two accesses to the same bytes from different pipes (or a pipe that does not order its own
    work), at least one a write, with no event, PipeBarrier or SyncAll between them: on the chip the result
    would depend on timing.

    Attributes:
        kind: "RAW", "WAR" or "WAW".
        memory: "UB" or "GM".
        byte_range: (first, end) bytes of the conflict (UB offsets, or GM addresses of this process).
        first, second: the two calls, each a dict with call_index, call (AscendC name) and pipe.
    """

    def __init__(self, summary: str, *, kind: str = "", memory: str = "UB", byte_range=None, first=None, second=None,
                 **kw):
        self.kind = kind
        self.memory = memory
        self.byte_range = byte_range
        self.first = first or {}
        self.second = second or {}
        super().__init__(summary, **kw)


class OverlapError(SimulatorError):
    """Checked mode "all": GM bytes written (not atomically) by two different cores of one launch, SyncAll
    between them or not (msSanitizer's multi-core corruption): the later write silently replaces the earlier
    one, so the result depends on which core owns which bytes. A kernel that does it on purpose declares it
    (check.OverlapWaiver in Kernel(..., waivers=...)).

    Attributes:
        tensor: the GM tensor's name; byte_range: (first, end) bytes of the overlap relative to its start.
        first, second: the two writes, each a dict with core, call_index and call (AscendC name).
    """

    def __init__(self, summary: str, *, tensor: str | None = None, byte_range=None, first=None, second=None,
                 **kw):
        self.tensor = tensor
        self.byte_range = byte_range
        self.first = first or {}
        self.second = second or {}
        super().__init__(summary, **kw)


class SyncError(SimulatorError):
    """SetFlag / WaitFlag / PipeBarrier / SyncAll misuse that would hang or leak state on hardware."""


class UninitializedReadError(SimulatorError):
    """Checked mode "init": a read of bytes nothing wrote. UB: bytes of a buffer that no call of this core wrote
    since its TPipe was built (InitBuffer does not initialise the UB). GM: workspace bytes no core wrote in this
    launch (the aclnn workspace comes uninitialised; inputs count as written).

    Attributes:
        memory: "UB" or "GM".
        buffer: the queue / TBuf holding the bytes (UB; None outside every buffer), or "workspace" (GM).
        byte_range: (first, end): UB offsets, or bytes from the workspace's start.
    """

    def __init__(self, summary: str, *, memory: str = "UB", buffer: str | None = None, byte_range=None, **kw):
        self.memory = memory
        self.buffer = buffer
        self.byte_range = byte_range
        super().__init__(summary, **kw)


class UnpairedFlagError(SyncError):
    """A SetFlag nothing waits for by the end of the kernel (the flag leaks into the next operator on the chip), or
    a WaitFlag with no SetFlag of its event and id before it (the pipe would wait forever).

    Attributes:
        event: the HardEvent name (e.g. "MTE2_V"); event_id: 0..7.
        src_pipe, dst_pipe: the pipe that sets the flag and the pipe that waits for it ("PIPE_MTE2", "PIPE_V").
        set_call: the call number of the unpaired SetFlag (None: unknown, i.e. not in checked mode "sync").
        wait_call: the call number of the WaitFlag that found no flag; last_wait_call: of the WaitFlag that took
            the flag down before it (None when unknown or none).
    """

    def __init__(self, summary: str, *, event: str = "", event_id: int = 0, src_pipe: str = "", dst_pipe: str = "",
                 set_call: int | None = None, wait_call: int | None = None, last_wait_call: int | None = None, **kw):
        self.event = event
        self.event_id = event_id
        self.src_pipe = src_pipe
        self.dst_pipe = dst_pipe
        self.set_call = set_call
        self.wait_call = wait_call
        self.last_wait_call = last_wait_call
        super().__init__(summary, **kw)
