"""Faults detected inside kernels, and their translation to SimulatorError.

Kernel code never raises (see _jit.py). An AscendC call that detects a broken rule
records a fault (fault code, call id, six integers) in `Core.state` and returns at once;
every later call on that core sees the fault and does nothing, so no byte moves after the
first fault and the core runs out its loops quickly. When the stage returns, the launcher
turns the first fault into the structured SimulatorError, names filled in (tensor, queue,
event, dtype): to_error follows the fault's declaration in layout.FAULTS (argument names, error
class, message template, fields); DERIVED and BUILDERS below hold what a template cannot say.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from . import errors
from ._jit import aicore
from .layout import (
    BLOCK_BYTES,
    CALL_NAMES,
    CNT_CALLS,
    ENQUE,
    ERR_BASE,
    F_COUNT_BYTES,
    F_DATACOPY_TRUNC,
    F_EVT_WAIT_UNSET,
    F_PIPE_RACE,
    F_QUE_OWNER,
    F_SIMT_ARCH,
    F_SIMT_OOB,
    F_SIMT_RACE,
    F_UNINIT_READ,
    FAULT_CALL_INDEX,
    FAULTS,
    KIND_TBUF,
    KIND_TQUE,
    KIND_TQUEBIND,
    MEM_GM,
    PARAM_NAMES,
    STATE_NAMES,
    FaultSpec,
)


@aicore
def fault(c, code, call, a0=0, a1=0, a2=0, a3=0, a4=0, a5=0):
    """Record a fault (the first one on this core wins); the caller must return at once."""
    if c.state[ERR_BASE] != 0:
        return
    c.state[ERR_BASE] = code
    c.state[ERR_BASE + 1] = call
    c.state[ERR_BASE + 2] = a0
    c.state[ERR_BASE + 3] = a1
    c.state[ERR_BASE + 4] = a2
    c.state[ERR_BASE + 5] = a3
    c.state[ERR_BASE + 6] = a4
    c.state[ERR_BASE + 7] = a5
    c.state[FAULT_CALL_INDEX] = c.state[CNT_CALLS]


@aicore
def issue(c, call):
    """Count one AscendC call; False once the core has faulted (the call must then do nothing)."""
    if c.state[ERR_BASE] != 0:
        return False
    c.state[CNT_CALLS] += 1
    return True


@aicore
def faulted(c):
    return c.state[ERR_BASE] != 0


# How a "name:kind" argument word of a fault (layout.FaultSpec) is shown; `names` holds the launch's name lists.
_SHOW = {
    "gm": lambda v, names: names.gm[v] if 0 <= v < len(names.gm) else f"GM tensor {v}",
    "queue": lambda v, names: names.queue[v] if 0 <= v < len(names.queue) else f"queue {v}",
    "event": lambda v, names: names.event[v] if 0 <= v < len(names.event) else f"event {v}",
    "dtype": lambda v, names: names.dtype(v),
    "param": lambda v, names: PARAM_NAMES.get(v, f"parameter {v}"),
    "state": lambda v, names: STATE_NAMES[v] if 0 <= v < len(STATE_NAMES) else str(v),
    "qkind": lambda v, names: _QUEUE_KINDS.get(v, str(v)),
    "call": lambda v, names: CALL_NAMES.get(v, f"call {v}"),
}
_QUEUE_KINDS = {KIND_TQUE: "TQue", KIND_TQUEBIND: "TQueBind", KIND_TBUF: "TBuf"}


class _Names(NamedTuple):
    gm: Sequence[str]
    queue: Sequence[str]
    event: Sequence[str]
    dtype: Callable[[int], str]


def fault_values(spec: FaultSpec, words, names: _Names) -> dict:
    """A fault record's argument words by their declared names, "name:kind" words shown as names."""
    values = {}
    for arg, word in zip(spec.args, words, strict=False):
        name, _, kind = arg.partition(":")
        values[name] = _SHOW[kind](word, names) if kind else word
    return values


def to_error(err: np.ndarray, *, core: int, op: str, tiling_key: int | None, call_index: int,
             gm_names, queue_names, event_names, dtype_names) -> errors.SimulatorError:
    """Build the SimulatorError a fault record describes, as its declaration in layout.FAULTS says."""
    code, call = int(err[0]), int(err[1])
    words = [int(v) for v in err[2:]]
    where = dict(core=core, op=op, tiling_key=tiling_key,
                 call=f"{CALL_NAMES.get(call, f'call {call}')} (call #{call_index})")
    spec = FAULTS.get(code)
    if spec is None:
        return errors.SimulatorError(f"fault code {code} with arguments {words}", **where)
    names = _Names(gm_names, queue_names, event_names, dtype_names)
    values = fault_values(spec, words, names)
    if code in BUILDERS:
        return BUILDERS[code](values, names, call, call_index, where)
    if code in DERIVED:
        values.update(DERIVED[code](values))
    fields = {attr: tuple(values[n] for n in arg) if isinstance(arg, tuple) else values[arg]
              for attr, arg in spec.fields}
    return getattr(errors, spec.error)(spec.message.format(**values), **fields, **where)


def _que_owner_how(v) -> dict:
    if v["state"] == ENQUE:
        how = "while it is enqueued (after EnQue, before DeQue): the consumer pipe may be reading it"
    elif v["freed_at"] > 0:
        how = f"after its FreeTensor (call #{v['freed_at']}): the producer may already be refilling it"
    else:
        how = "before any AllocTensor handed it out"
    return {"how": how}


# Values a fault's message template uses beyond its argument words, computed from them.
DERIVED: dict[int, Callable[[dict], dict]] = {
    F_DATACOPY_TRUNC: lambda v: {"moved": v["nbytes"] - v["nbytes"] % BLOCK_BYTES},
    F_COUNT_BYTES: lambda v: {"rest": v["nbytes"] % v["multiple"]},
    F_QUE_OWNER: _que_owner_how,
    F_SIMT_ARCH: lambda v: {"chip": "Ascend 910B / 910_93" if v["arch"] == 2201 else f"NPU arch {v['arch']}"},
}


_PIPES = ("PIPE_S", "PIPE_V", "PIPE_MTE2", "PIPE_MTE3")
_RACE_VERBS = {0: ("wrote", "reads"), 1: ("read", "writes"), 2: ("wrote", "writes")}


def _race_error(v, names, call, call_index, where):
    packed = v["packed"]
    other_pipe, pipe, kind, mem = packed & 15, (packed >> 4) & 15, (packed >> 8) & 15, (packed >> 12) & 15
    kind_name = ("RAW", "WAR", "WAW")[kind]
    memory = "UB" if mem == 0 else "GM"
    lo, hi = v["first"], v["end"]
    first = dict(call_index=v["first_call_number"], call=v["first_call"], pipe=_PIPES[other_pipe])
    second = dict(call_index=call_index, call=CALL_NAMES.get(call, f"call {call}"), pipe=_PIPES[pipe])
    did, does = _RACE_VERBS[kind]
    where_bytes = f"UB bytes [{lo}, {hi})" if mem == 0 else f"GM bytes at 0x{lo:x} (+{hi - lo})"
    same = other_pipe == pipe
    fix = ("a PipeBarrier<" + _PIPES[pipe] + "> between them" if same else
           f"SetFlag<{_PIPES[other_pipe][5:]}_{_PIPES[pipe][5:]}> / WaitFlag (or the queue's EnQue / DeQue) between "
           "them")
    return errors.PipeRaceError(
        f"{kind_name} race on {where_bytes}: {first['pipe']} {first['call']} (call #{v['first_call_number']}) {did} "
        f"them and {second['pipe']} {second['call']} (call #{call_index}) {does} them with nothing ordering the two "
        f"(add {fix})", kind=kind_name, memory=memory, byte_range=(lo, hi), first=first, second=second,
        **where)


def flag_pipes(event: str) -> tuple[str, str]:
    """The (src, dst) pipes of a HardEvent name "SRC_DST": the dst pipe waits for the src pipe."""
    src, dst = event.split("_")
    return f"PIPE_{src}", f"PIPE_{dst}"


def _wait_unset_error(v, names, call, call_index, where):
    event, event_id, last_wait = v["event"], v["id"], v["last_wait_call"]
    src, dst = flag_pipes(event)
    up = [i for i in range(8) if (v["ids_up"] >> i) & 1]
    hints = []
    if up:
        hints.append(f"SetFlag<{event}> is up for id(s) {', '.join(map(str, up))}: a WaitFlag on the wrong id?")
    if last_wait > 0:
        hints.append(f"WaitFlag<{event}>({event_id}) at call #{last_wait} already took this flag down: one WaitFlag "
                     "per SetFlag")
    hint = (" " + " ".join(hints)) if hints else ""
    return errors.UnpairedFlagError(
        f"WaitFlag<{event}>({event_id}): {dst} waits for {src} but no SetFlag<{event}>({event_id}) is up before it, "
        f"so the pipe would wait forever on the NPU (set the flag before waiting for it).{hint}",
        event=event, event_id=event_id, src_pipe=src, dst_pipe=dst, wait_call=call_index,
        last_wait_call=last_wait if last_wait > 0 else None, **where)


def _uninit_error(v, names, call, call_index, where):
    lo, hi, q = v["first"], v["end"], v["queue"]
    if v["memory"] == MEM_GM:
        return errors.UninitializedReadError(
            f"read of workspace bytes [{lo}, {hi}) that no core wrote in this launch (the workspace comes "
            "uninitialised: write or zero it first, e.g. InitOutput, before reading it)", memory="GM",
            buffer="workspace", byte_range=(lo, hi), **where)
    name = _SHOW["queue"](q, names) if q >= 0 else None
    inside = f" of '{name}'" if name else " outside every buffer"
    return errors.UninitializedReadError(
        f"read of UB bytes [{lo}, {hi}){inside} that no call wrote since the TPipe was built (InitBuffer does not "
        "initialise the UB: copy in, Duplicate or compute them first)", memory="UB", buffer=name, byte_range=(lo, hi),
        **where)


def _simt_oob_error(v, names, call, call_index, where):
    lo, hi, size, thread = v["first"], v["end"], v["tensor_bytes"], v["thread"]
    if v["memory"] == 1:
        tensor = _SHOW["gm"](v["where"], names)
        return errors.OutOfBoundsError(
            f"SIMT thread {thread} accesses bytes [{lo}, {hi}) of '{tensor}', outside the tensor's {size} bytes",
            tensor=tensor, byte_range=(lo, hi), **where)
    return errors.OutOfBoundsError(
        f"SIMT thread {thread} accesses bytes [{lo}, {hi}) of the LocalTensor at UB offset {v['where']}, outside its "
        f"{size} bytes", **where)


def _simt_race_error(v, names, call, call_index, where):
    return errors.PipeRaceError(
        f"WAW race on GM bytes at 0x{v['address']:x} (+{v['nbytes']}): SIMT threads {v['first_thread']} and "
        f"{v['second_thread']} of one asc_vf_call both store there without an atomic; on the chip the result depends "
        "on warp scheduling (give each thread its own elements or use Simt::AtomicAdd)", kind="WAW", memory="GM",
        byte_range=(v["address"], v["address"] + v["nbytes"]),
        first=dict(thread=v["first_thread"], call=CALL_NAMES.get(call, "")),
        second=dict(thread=v["second_thread"], call=CALL_NAMES.get(call, "")), **where)


# The faults whose error is more than a message template: (values, names, call, call index, where) -> error.
BUILDERS = {
    F_PIPE_RACE: _race_error,
    F_EVT_WAIT_UNSET: _wait_unset_error,
    F_UNINIT_READ: _uninit_error,
    F_SIMT_OOB: _simt_oob_error,
    F_SIMT_RACE: _simt_race_error,
}
