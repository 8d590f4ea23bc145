"""Every AscendC call and every fault is declared once, in layout.py's tables (layout.CALLS, layout.FAULTS); every
declared one is issued somewhere; every fault translates into its declared error class with the message its
template gives.

The messages below are the ones the simulator printed before the faults were declared in a table (an
`if code == ...` chain built them): the table must reproduce them word for word, fields included.
"""
from __future__ import annotations

import re
import string
from pathlib import Path

import numpy as np
import pytest

import ascend_sim
import ops
from ascend_sim import errors, faults, layout
from ascend_sim.layout import (
    CALL_ADD,
    CALL_ALLOC_TENSOR,
    CALL_CAST,
    CALL_COMPARE_SCALAR,
    CALL_COPY,
    CALL_DATA_COPY_IN,
    CALL_DATA_COPY_OUT,
    CALL_DATA_COPY_PAD_IN,
    CALL_DATA_COPY_PAD_OUT,
    CALL_DEQUE,
    CALL_ENQUE,
    CALL_FETCH_EVENT_ID,
    CALL_FREE_TENSOR,
    CALL_GATHER_MASK,
    CALL_MUL,
    CALL_PIPE_BARRIER,
    CALL_R_CAST,
    CALL_SCALAR_ARRAY,
    CALL_SET_FLAG,
    CALL_SIMT,
    CALL_TBUF_GET,
    CALL_WAIT_FLAG,
)

PACKAGE = Path(ascend_sim.__file__).parent
SOURCES = {p: p.read_text() for root in (PACKAGE, Path(ops.__file__).parent) for p in sorted(root.rglob("*.py"))
           if p.name != "layout.py"}


def constants(prefix: str) -> dict[str, int]:
    return {k: v for k, v in vars(layout).items() if k.startswith(prefix) and isinstance(v, int)}


CALL_CONSTANTS = constants("CALL_")
FAULT_CONSTANTS = constants("F_")


def test_every_call_constant_is_declared_once():
    assert sorted(CALL_CONSTANTS.values()) == sorted(layout.CALLS), "a CALL_ constant not made by layout._call"
    assert len(set(CALL_CONSTANTS.values())) == len(CALL_CONSTANTS), "two CALL_ constants share an id"
    assert len({c.name for c in layout.CALLS.values()}) == len(layout.CALLS), "two calls share an AscendC name"
    assert layout.CALL_NAMES == {c.id: c.name for c in layout.CALLS.values()}


def test_every_fault_constant_is_declared_once():
    assert sorted(FAULT_CONSTANTS.values()) == sorted(layout.FAULTS), "an F_ constant not made by layout._fault"
    assert len(set(FAULT_CONSTANTS.values())) == len(FAULT_CONSTANTS), "two F_ constants share a code"


def test_a_call_or_fault_cannot_be_declared_twice():
    with pytest.raises(ValueError, match="declared twice"):
        layout._call(CALL_ADD, "SomethingElse")
    with pytest.raises(ValueError, match="declared twice"):
        layout._call(999, layout.CALL_NAMES[CALL_ADD])
    with pytest.raises(ValueError, match="declared twice"):
        layout._fault(layout.F_GM_OOB, (), "SimulatorError", "again")
    assert layout.CALLS[CALL_ADD].name == "Add" and 999 not in layout.CALLS


@pytest.mark.parametrize("name", sorted(CALL_CONSTANTS))
def test_every_call_is_issued_somewhere(name):
    """A declared call some simulator or kernel module names (a call nothing issues is dead weight in the table)."""
    assert any(re.search(rf"\b{name}\b", text) for text in SOURCES.values()), f"{name} is declared but never used"


@pytest.mark.parametrize("name", sorted(FAULT_CONSTANTS))
def test_every_fault_is_recorded_somewhere(name):
    """A declared fault some module other than faults.py (the translation) records."""
    users = [p for p, text in SOURCES.items() if p.name != "faults.py" and re.search(rf"\b{name}\b", text)]
    assert users, f"{name} is declared but no module records it"


@pytest.mark.parametrize("name", sorted(FAULT_CONSTANTS))
def test_every_fault_declaration_is_complete(name):
    spec = layout.FAULTS[FAULT_CONSTANTS[name]]
    error = getattr(errors, spec.error, None)
    assert isinstance(error, type) and issubclass(error, errors.SimulatorError), spec.error
    assert len(spec.args) <= layout.ERR_COLS - 2
    assert len(set(spec.arg_names)) == len(spec.arg_names)
    for arg in spec.args:
        kind = arg.partition(":")[2]
        assert not kind or kind in faults._SHOW, f"{name}: unknown argument kind {kind!r}"
    # a fault has either a message template or a builder, never both
    assert (spec.message == "") == (spec.code in faults.BUILDERS), name
    if spec.message:
        placeholders = {f for _, f, _, _ in string.Formatter().parse(spec.message) if f}
        derive = faults.DERIVED.get(spec.code)
        derived = set(derive({n: 1 for n in spec.arg_names})) if derive else set()
        assert placeholders <= set(spec.arg_names) | derived, f"{name}: {placeholders - set(spec.arg_names) - derived}"
        for attr, arg in spec.fields:
            assert set(arg if isinstance(arg, tuple) else (arg,)) <= set(spec.arg_names), (name, attr)


def test_builders_and_derived_values_belong_to_declared_faults():
    assert set(faults.BUILDERS) <= set(layout.FAULTS) and set(faults.DERIVED) <= set(layout.FAULTS)
    assert not set(faults.BUILDERS) & set(faults.DERIVED)


# (fault, call, argument words, error class, message, error attributes beyond the where-fields)
CASES = [
    ('F_GM_OOB', CALL_DATA_COPY_PAD_IN, [1, 96, 160, 128], 'OutOfBoundsError',
     "GM access to bytes [96, 160) of 'y' is outside the tensor's 128 bytes",
     {'tensor': 'y', 'byte_range': (96, 160)}),
    ('F_UB_OOB', CALL_ADD, [256, 512, 384], 'OutOfBoundsError',
     "UB access of 512 bytes from the LocalTensor at UB offset 256 exceeds the tensor's 384 bytes",
     {}),
    ('F_UB_NOT_IN_UB', CALL_MUL, [196600, 64], 'OutOfBoundsError',
     "LocalTensor at byte 196600 (+64 bytes) does not lie inside this core's Unified Buffer",
     {}),
    ('F_UB_ALIGN', CALL_DATA_COPY_IN, [40, 32], 'AlignmentError',
     'UB address 40 is not 32-byte aligned',
     {}),
    ('F_PARAM', CALL_DATA_COPY_PAD_OUT, [1, 5000, 1, 4095], 'ParamRangeError',
     'blockCount = 5000 is outside [1, 4095]',
     {}),
    ('F_LEN_MULTIPLE', CALL_DATA_COPY_PAD_IN, [6, 4], 'AlignmentError',
     'blockLen 6 bytes is not a multiple of sizeof(T) = 4',
     {}),
    ('F_DATACOPY_TRUNC', CALL_DATA_COPY_OUT, [70], 'AlignmentError',
     'DataCopy of 70 bytes is not a multiple of 32 bytes; the hardware would silently move only 64 bytes (use '
     'DataCopyPad)',
     {}),
    ('F_QUE_STATE', CALL_ENQUE, [1, 0, 0], 'QueueError',
     "buffer 0 of 'outQ' is FREE, which this call does not accept",
     {}),
    ('F_QUE_DEPTH', CALL_ENQUE, [0, 2, 2], 'QueueError',
     "EnQue on 'inQ' with 2 tensors already queued exceeds its depth 2",
     {}),
    ('F_QUE_EMPTY', CALL_DEQUE, [2], 'QueueError',
     "DeQue on 'tmpBuf' with nothing enqueued (would hang on the NPU)",
     {}),
    ('F_QUE_FOREIGN', CALL_FREE_TENSOR, [0, 1024], 'QueueError',
     "the tensor at UB offset 1024 does not belong to 'inQ'",
     {}),
    ('F_QUE_NO_FREE', CALL_ALLOC_TENSOR, [1, 2], 'QueueError',
     "AllocTensor on 'outQ': all 2 buffers are in use (would hang on the NPU)",
     {}),
    ('F_EVT_ID', CALL_SET_FLAG, [0, 9], 'SyncError',
     'event id 9 of MTE2_V is outside [0, 8)',
     {}),
    ('F_EVT_DOUBLE_SET', CALL_SET_FLAG, [3, 1], 'SyncError',
     'SetFlag<V_MTE3>(1) while the flag is already set (undefined on the NPU)',
     {}),
    ('F_EVT_WAIT_UNSET', CALL_WAIT_FLAG, [0, 2, 9, 17], 'UnpairedFlagError',
     'WaitFlag<MTE2_V>(2): PIPE_V waits for PIPE_MTE2 but no SetFlag<MTE2_V>(2) is up before it, so the pipe would '
     'wait forever on the NPU (set the flag before waiting for it). SetFlag<MTE2_V> is up for id(s) 0, 3: a WaitFlag '
     'on the wrong id? WaitFlag<MTE2_V>(2) at call #17 already took this flag down: one WaitFlag per SetFlag',
     {'event': 'MTE2_V', 'event_id': 2, 'src_pipe': 'PIPE_MTE2', 'dst_pipe': 'PIPE_V',
       'wait_call': 42, 'last_wait_call': 17}),
    ('F_EVT_WAIT_UNSET', CALL_WAIT_FLAG, [1, 0, 0, 0], 'UnpairedFlagError',
     'WaitFlag<V_MTE2>(0): PIPE_MTE2 waits for PIPE_V but no SetFlag<V_MTE2>(0) is up before it, so the pipe would '
     'wait forever on the NPU (set the flag before waiting for it).',
     {'event': 'V_MTE2', 'event_id': 0, 'src_pipe': 'PIPE_V', 'dst_pipe': 'PIPE_MTE2', 'wait_call': 42}),
    ('F_EVT_EXHAUSTED', CALL_FETCH_EVENT_ID, [4, 8], 'SyncError',
     'FetchEventID<V_V>: all 8 event ids have a SetFlag awaiting its WaitFlag, so no id is free (on the NPU a '
     'SetFlag on a reused id is undefined and can hang); wait for a flag before fetching another id',
     {}),
    ('F_BARRIER_S', CALL_PIPE_BARRIER, [], 'SyncError',
     'PipeBarrier<PIPE_S> is not allowed',
     {}),
    ('F_CAST_PAIR', CALL_CAST, [1, 0, 3], 'ParamRangeError',
     'Cast from dtype0 to dtype1 does not support round mode 3',
     {}),
    ('F_SCALAR_OOB', CALL_SCALAR_ARRAY, [2, 9, 8], 'OutOfBoundsError',
     'index 9 of a 8-element scalar array (#2) is out of range',
     {}),
    ('F_QUE_KIND', CALL_ENQUE, [2, 2], 'QueueError',
     "'tmpBuf' is a TBuf, which this call does not accept",
     {}),
    ('F_QUE_INDEX', CALL_TBUF_GET, [7, 3], 'QueueError',
     "queue/TBuf index 7 is not one of the 3 buffers this TPipe's InitBuffer calls created",
     {}),
    ('F_ELEM_TYPE', CALL_COPY, [2, 4], 'ElementTypeError',
     'different element types, or ones this call does not take: 2-byte destination and 4-byte source elements '
     '(DataCopy, DataCopyPad and Copy take one T for both sides)',
     {}),
    ('F_COUNT_BYTES', CALL_COMPARE_SCALAR, [200, 256], 'AlignmentError',
     'count covers 200 bytes, not a multiple of 256: the hardware would silently skip the elements of the last 200 '
     'bytes (round the count up to whole 256-byte repeats)',
     {}),
    ('F_UNSUPPORTED', CALL_R_CAST, [27, 1, 2201], 'ElementTypeError',
     'dtype27 data with mode 1 is not supported by this instruction on NPU arch 2201',
     {}),
    ('F_PATTERN_TYPE', CALL_GATHER_MASK, [4, 2], 'ElementTypeError',
     'the gather pattern has 4-byte elements but the data 2-byte ones; GatherMask takes a uint16 pattern for 2-byte '
     'data, uint32 for 4-byte data',
     {}),
    ('F_PIPE_RACE', CALL_ADD, [12, 1, 18, 64, 128], 'PipeRaceError',
     "RAW race on UB bytes [64, 128): PIPE_MTE2 DataCopyPad(GM->UB) (call #12) wrote them and PIPE_V Add (call #42) "
     "reads them with nothing ordering the two (add SetFlag<MTE2_V> / WaitFlag (or the queue's EnQue / DeQue) "
     "between them)",
     {'kind': 'RAW', 'memory': 'UB', 'byte_range': (64, 128),
       'first': {'call_index': 12, 'call': 'DataCopyPad(GM->UB)', 'pipe': 'PIPE_MTE2'},
       'second': {'call_index': 42, 'call': 'Add', 'pipe': 'PIPE_V'}}),
    ('F_PIPE_RACE', CALL_DATA_COPY_PAD_OUT, [5, 2, 4659, 4096, 4160], 'PipeRaceError',
     'WAW race on GM bytes at 0x1000 (+64): PIPE_MTE3 DataCopyPad(UB->GM) (call #5) wrote them and PIPE_MTE3 '
     'DataCopyPad(UB->GM) (call #42) writes them with nothing ordering the two (add a PipeBarrier<PIPE_MTE3> between '
     'them)',
     {'kind': 'WAW', 'memory': 'GM', 'byte_range': (4096, 4160),
       'first': {'call_index': 5, 'call': 'DataCopyPad(UB->GM)', 'pipe': 'PIPE_MTE3'},
       'second': {'call_index': 42, 'call': 'DataCopyPad(UB->GM)', 'pipe': 'PIPE_MTE3'}}),
    ('F_QUE_OWNER', CALL_ADD, [1, 0, 2, 0], 'QueueError',
     "buffer 0 of 'outQ' is used while it is enqueued (after EnQue, before DeQue): the consumer pipe may be reading it",
     {}),
    ('F_QUE_OWNER', CALL_ADD, [1, 1, 0, 33], 'QueueError',
     "buffer 1 of 'outQ' is used after its FreeTensor (call #33): the producer may already be refilling it",
     {}),
    ('F_QUE_OWNER', CALL_ADD, [0, 0, 0, 0], 'QueueError',
     "buffer 0 of 'inQ' is used before any AllocTensor handed it out",
     {}),
    ('F_OUTLINE', CALL_DATA_COPY_PAD_IN, [], 'SimulatorError',
     'internal: the compiled machine-model code of this call could not be loaded (see the warnings above; clearing '
     'the __pycache__ directories recompiles it)',
     {}),
    ('F_UNINIT_READ', CALL_ADD, [0, 64, 96, 1], 'UninitializedReadError',
     "read of UB bytes [64, 96) of 'outQ' that no call wrote since the TPipe was built (InitBuffer does not "
     "initialise the UB: copy in, Duplicate or compute them first)",
     {'memory': 'UB', 'buffer': 'outQ', 'byte_range': (64, 96)}),
    ('F_UNINIT_READ', CALL_ADD, [0, 64, 96, -1], 'UninitializedReadError',
     'read of UB bytes [64, 96) outside every buffer that no call wrote since the TPipe was built (InitBuffer does '
     'not initialise the UB: copy in, Duplicate or compute them first)',
     {'memory': 'UB', 'byte_range': (64, 96)}),
    ('F_UNINIT_READ', CALL_DATA_COPY_PAD_IN, [1, 0, 32, -1], 'UninitializedReadError',
     'read of workspace bytes [0, 32) that no core wrote in this launch (the workspace comes uninitialised: write or '
     'zero it first, e.g. InitOutput, before reading it)',
     {'memory': 'GM', 'buffer': 'workspace', 'byte_range': (0, 32)}),
    ('F_SIMT_ARCH', CALL_SIMT, [2201], 'SimulatorError',
     'SIMT (asc_vf_call / Simt::VF_CALL) exists only on Ascend 950 (NPU arch 3510); this chip is Ascend 910B / '
     '910_93 (NPU arch 2201)',
     {}),
    ('F_SIMT_THREADS', CALL_SIMT, [0, 4, 1, 2048], 'ParamRangeError',
     'threadNums dim3{0, 4, 1}: every dimension must be >= 1 and dimx * dimy * dimz at most 2048',
     {}),
    ('F_SIMT_OOB', CALL_SIMT, [1, 2, 400, 404, 400, 7], 'OutOfBoundsError',
     "SIMT thread 7 accesses bytes [400, 404) of 'out', outside the tensor's 400 bytes",
     {'tensor': 'out', 'byte_range': (400, 404)}),
    ('F_SIMT_OOB', CALL_SIMT, [0, 1024, 32, 36, 32, 3], 'OutOfBoundsError',
     'SIMT thread 3 accesses bytes [32, 36) of the LocalTensor at UB offset 1024, outside its 32 bytes',
     {}),
    ('F_SIMT_RACE', CALL_SIMT, [3, 5, 43968, 4], 'PipeRaceError',
     'WAW race on GM bytes at 0xabc0 (+4): SIMT threads 3 and 5 of one asc_vf_call both store there without an '
     'atomic; on the chip the result depends on warp scheduling (give each thread its own elements or use '
     'Simt::AtomicAdd)',
     {'kind': 'WAW', 'memory': 'GM', 'byte_range': (43968, 43972),
       'first': {'thread': 3, 'call': 'asc_vf_call (SIMT)'},
       'second': {'thread': 5, 'call': 'asc_vf_call (SIMT)'}}),
]


def _case_ids():
    seen: dict[str, int] = {}
    for name, *_ in CASES:
        seen[name] = seen.get(name, 0) + 1
        yield f"{name}-{seen[name]}"


NAMES = dict(gm_names=("x", "y", "out"), queue_names=("inQ", "outQ", "tmpBuf"), event_names=layout.HARD_EVENT_NAMES,
             dtype_names=lambda v: f"dtype{v}")


@pytest.mark.parametrize("name, call, words, error, message, attrs", CASES, ids=list(_case_ids()))
def test_fault_translates_to_its_declared_error(name, call, words, error, message, attrs):
    record = np.array([FAULT_CONSTANTS[name], call] + words + [0] * (6 - len(words)), dtype=np.int64)
    err = faults.to_error(record, core=1, op="Op", tiling_key=7, call_index=42, **NAMES)
    assert type(err).__name__ == error == layout.FAULTS[FAULT_CONSTANTS[name]].error
    assert err.summary == message
    assert (err.core, err.op, err.tiling_key) == (1, "Op", 7)
    assert err.call == f"{layout.CALL_NAMES[call]} (call #42)"
    for attr, value in attrs.items():
        assert getattr(err, attr) == value, attr


def test_every_fault_has_a_translation_case():
    assert {name for name, *_ in CASES} == set(FAULT_CONSTANTS)


def test_an_undeclared_fault_code_still_becomes_an_error():
    record = np.array([19, CALL_ADD, 1, 2, 3, 4, 5, 6], dtype=np.int64)
    err = faults.to_error(record, core=0, op="Op", tiling_key=None, call_index=3, **NAMES)
    assert type(err) is errors.SimulatorError
    assert err.summary == "fault code 19 with arguments [1, 2, 3, 4, 5, 6]"
