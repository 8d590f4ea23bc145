"""The numbers every part of the simulator agrees on: the layout of a core's state array, of the queue
table inside it and of a fault record, the AscendC call ids, fault codes and checked-mode codes.

Everything in ascend_sim imports these from here, and this module imports nothing of ours, so no two of
the simulator's modules need each other for a constant (the numba kernels bake these values in at compile
time; _jit.source_stamp therefore stamps every kernel with this file).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

# The Unified Buffer's block (GetUbBlockSize): UB addresses and DataCopy lengths come in whole blocks, and
# InitBuffer rounds buffer lengths up to them. The one definition: host tilings, the simulator and kernels
# all read it from here.
BLOCK_BYTES = 32


def align32(nbytes):
    """`nbytes` rounded up to whole UB blocks (bytes). Plain Python for the host; datacopy.py registers it as a
    device function too, so kernels and the host round with the same code."""
    return (nbytes + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES


# --- a core's state array (core.py) ----------------------------------------------------------
# Pipes of a vector core (PipeBarrier<PIPE_X> and the timeline's lanes).
PIPE_S = 0
PIPE_V = 1
PIPE_MTE2 = 2
PIPE_MTE3 = 3
PIPE_ALL = 4
N_PIPES = 4
PIPE_NAMES = ("S", "V", "MTE2", "MTE3")   # timeline lanes, in pipe order

# Per-core counters, state[0:N_COUNTERS]. Bytes are GM-side bytes moved by the DMA pipes.
CNT_MTE2_BYTES = 0      # GM -> UB bytes (DataCopy / DataCopyPad in)
CNT_MTE2_INSTR = 1
CNT_MTE3_BYTES = 2      # UB -> GM bytes (DataCopy / DataCopyPad out, InitOutput)
CNT_MTE3_INSTR = 3
CNT_V_ELEMS = 4         # vector element-operations (elements each vector instruction processes)
CNT_V_INSTR = 5
CNT_S_GM_READS = 6      # scalar GlobalTensor::GetValue
CNT_S_GM_WRITES = 7     # scalar GlobalTensor::SetValue
CNT_S_UB_OPS = 8        # scalar LocalTensor::GetValue / SetValue
CNT_EVENTS = 9          # SetFlag + WaitFlag, explicit and the ones TQue inserts
CNT_PIPE_BARRIERS = 10
CNT_SYNC_ALL = 11
CNT_UB_HWM = 12         # one past the highest UB byte written
CNT_CALLS = 13          # AscendC calls issued; locates a fault ("call #n")
N_COUNTERS = 14

COUNTER_NAMES = (
    "mte2_bytes", "mte2_instr", "mte3_bytes", "mte3_instr", "vec_elem_ops", "vec_instr",
    "scalar_gm_reads", "scalar_gm_writes", "scalar_ub_ops", "events", "pipe_barriers",
    "sync_all", "ub_hwm_bytes", "calls",
)

FAULT_CALL_INDEX = 14   # CNT_CALLS when the first fault happened
PIPE_QUEUES = 15        # rows of the live TPipe's queue table (queue ids a kernel may use)
ERR_BASE = 16           # state[ERR_BASE:ERR_BASE + ERR_COLS]: fault code (0 = none), call id, six arguments
ERR_COLS = 8
CAP_BASE = 24           # chip limits
CAP_MAX_BLOCK_COUNT = CAP_BASE + 0   # DataCopy(Pad) blockCount upper bound
CAP_NPU_ARCH = CAP_BASE + 1          # 2201 (910B / 910_93) or 3510 (950)
# 0 after SetAtomicNone(), else 1 + the ge dtype code of T, + ATOMIC_OP_MAX for SetAtomicMax<T>()
ATOMIC_TYPE = CAP_BASE + 2
ATOMIC_LOCK_TABLE = CAP_BASE + 3     # address of ATOMIC_LOCKS (shared by every core of every launch)
UB_POISONED = CAP_BASE + 4           # 1 once start_pipe has poisoned the whole UB
UB_DIRTY = CAP_BASE + 5              # bytes a pooled UB's previous launch may have written (see core.CoreSet)
OUTLINE_TABLE = CAP_BASE + 6         # address of the outlined calls' table (_outline.py)
OUTLINE_RESOLVER = CAP_BASE + 7      # address of its resolver callback
EVENT_IDS = 8
N_HARD_EVENTS = 13
# HardEvent values (events.py): SRC_DST, the DST pipe waits for the SRC pipe
HARD_EVENT_NAMES = ("MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "V_V", "MTE3_MTE2", "MTE2_MTE3",
                    "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S")
FLAG_BASE = 32          # state[FLAG_BASE + event * EVENT_IDS + id] is 1 while a SetFlag awaits its WaitFlag
MEMBER_BASE = FLAG_BASE + N_HARD_EVENTS * EVENT_IDS   # kernel member variables that live across SyncAll()
N_MEMBERS = 64
# The timeline (timeline.py): per-pipe clocks, the cost model's figures, flag times and the scalar data cache.
TL_BASE = MEMBER_BASE + N_MEMBERS
TL_END = TL_BASE                 # TL_END + pipe: cycle the pipe can start its next instruction (PIPE_S: the scalar
                                 # unit's time)
TL_BUSY = TL_BASE + 4            # TL_BUSY + pipe: cycles the pipe was busy
TL_ON = TL_BASE + 8              # 1 while the cost model runs
TL_TRACE_N = TL_BASE + 9         # calls offered to the trace (rows past its end are dropped and counted)
TL_RATE = TL_BASE + 10           # TL_RATE + pipe: DMA bytes per RATE_SCALE cycles (MTE2, MTE3 slots used)
RATE_SCALE = 1024                # rates go into the kernels as bytes per RATE_SCALE cycles, so they stay integers
TL_LATENCY = TL_BASE + 14        # TL_LATENCY + pipe: fixed cycles of one DMA instruction
TL_BURST = TL_BASE + 18           # per-row DMA cycles, in 1/RATE_SCALE cycles
TL_VEC_ISSUE = TL_BASE + 19
TL_CALL = TL_BASE + 20           # scalar cycles to issue a call
TL_SCALAR_UB = TL_BASE + 21
TL_GM_HIT = TL_BASE + 22
TL_GM_MISS = TL_BASE + 23
TL_GM_WRITE = TL_BASE + 24
TL_EVENT = TL_BASE + 25
TL_BARRIER = TL_BASE + 26
TL_DCACHE_SHIFT = TL_BASE + 27   # log2 of the data cache's line bytes
TL_DCACHE_MASK = TL_BASE + 28    # lines - 1
TL_DMA_ISSUE = TL_BASE + 29      # fixed pipe cycles of one DMA instruction
TL_DONE = TL_BASE + 30           # TL_DONE + pipe: cycle the pipe's work so far is complete (DMA: landed in memory)
TL_TRACE_ADDR = TL_BASE + 34     # address of the core's trace rows (int64, TRACE_COLS each)
TL_TRACE_CAP = TL_BASE + 35      # rows the trace holds (0: no trace)
TL_LAUNCH = TL_BASE + 36         # fixed cycles of a kernel launch (the estimate adds them once; kept for the report)
TL_VEC_WIDTH = TL_BASE + 37      # vector repeats the V pipe retires per cycle-per-repeat (950: dual issue)
TL_L2_RATE = TL_BASE + 38        # MTE2 bytes per RATE_SCALE cycles for bytes that hit in L2
TL_L2_HIT_BYTES = TL_BASE + 39   # GM -> UB bytes this core read from L2 in this launch
TL_L2_SHIFT = TL_BASE + 40       # log2 of the L2 line bytes
TL_L2_MASK = TL_BASE + 41        # lines of the core's L2 table - 1 (-1: no L2)
TL_L2_ADDR = TL_BASE + 42        # address of the core's L2 tag table (int64; set per launch by the launcher)
TL_L2_TAG = TL_BASE + 43         # this launch's tag bits (launch epoch << L2_EPOCH_SHIFT): older tags never match
L2_EPOCH_SHIFT = 40              # a tag is epoch << 40 | (line + 1); lines of host addresses fit in 40 bits
TL_L2_CLOCK = TL_BASE + 44       # lines this core has entered in its L2 table in this launch (a line's age clock)
TL_SAME_WINDOW = TL_BASE + 45    # cycles of one time bucket of the same-address log (0: no log)
TL_SAME_ADDR = TL_BASE + 46      # address of the core's same-address log (int64 pairs: key, bytes)
TL_SAME_CAP = TL_BASE + 47       # entries the log holds
TL_SAME_N = TL_BASE + 48         # entries used (reads past the end are not logged)
SAME_REGION_SHIFT = 9            # the log's regions: 512 B of GM (the 910B's L2 line): cores contend on the same lines
SAME_BUCKET_BITS = 24            # a log key is region << 24 | time bucket (mod 2**24)
N_CALL_IDS = 64
TL_CPR = TL_BASE + 49            # TL_CPR + call id: vector cycles per 256-byte repeat
TL_FLAG_T = TL_CPR + N_CALL_IDS  # TL_FLAG_T + event * EVENT_IDS + id: cycle the flag rises
TL_FLAG_CALL = TL_FLAG_T + N_HARD_EVENTS * EVENT_IDS   # call number of the SetFlag that raised it (trace flows)
DCACHE_MAX_LINES = 256
TL_DCACHE = TL_FLAG_CALL + N_HARD_EVENTS * EVENT_IDS   # tags of the scalar data cache (line address + 1; 0 = empty)
TL_SIZE = TL_DCACHE + DCACHE_MAX_LINES - TL_BASE
# Checked mode (check.py): pipe epochs and known-epoch vectors, flag vectors, the GM write ring, the shadow's address.
CHK_BASE = TL_BASE + TL_SIZE
CHK_MODE = CHK_BASE              # the mode's bits (MODE_RACE / MODE_STRICT / MODE_INIT / MODE_SYNC); 0 off
CHK_SHADOW_ADDR = CHK_BASE + 1
CHK_SHADOW_BLOCKS = CHK_BASE + 2
CHK_GM_N = CHK_BASE + 3          # GM writes recorded so far (the ring keeps the last CHK_GM_ENTRIES)
CHK_E = CHK_BASE + 4             # CHK_E + pipe: the pipe's release epoch
CHK_K = CHK_BASE + 8             # CHK_K + pipe * 4 + other: epochs of `other` the pipe is known to come after
CHK_FLAG_V = CHK_BASE + 24       # CHK_FLAG_V + (event * EVENT_IDS + id) * 4: the vector a SetFlag released
CHK_GM_ENTRIES = 32
CHK_GM = CHK_FLAG_V + N_HARD_EVENTS * EVENT_IDS * 4    # ring rows: start, end, pipe, stamp, call number * 64 + call
CHK_WAIVERS = 8
CHK_WAIVE_N = CHK_GM + CHK_GM_ENTRIES * 5          # waivers in use
CHK_WAIVED = CHK_WAIVE_N + 1                        # races a waiver let pass
CHK_WAIVE = CHK_WAIVE_N + 2                         # rows: first pipe, first call id, second pipe, second call id
CHK_OWN_WAIVE = CHK_WAIVE + CHK_WAIVERS * 4          # bit q: the live TPipe's queue q may be used after FreeTensor
CHK_FN = CHK_OWN_WAIVE + 1                          # addresses of the checker's compiled entries (_check_entries)
CHK_FN_UB, CHK_FN_VECTOR, CHK_FN_GM_READ, CHK_FN_GM_WRITE = range(CHK_FN, CHK_FN + 4)
# the core's GM access log for the cross-core check (check.CrossCore): address of its rows (GLOG_COLS int64 words
# each; 0: no log), rows it holds, rows used in this SyncAll phase, accesses dropped because it was full
CHK_GLOG = CHK_FN + 4
CHK_GLOG_CAP = CHK_GLOG + 1
CHK_GLOG_N = CHK_GLOG + 2
CHK_GLOG_LOST = CHK_GLOG + 3
# mode "init" (uninitialised reads): the workspace's written-byte map (one byte per workspace byte, 1 = some core
# wrote it in this launch) and the workspace's GM address range; the live TPipe's queues whose never-written bytes
# the kernel reads on purpose (bit q), and how many such reads were let pass
CHK_WS_MAP = CHK_GLOG_LOST + 1
CHK_WS_LO = CHK_WS_MAP + 1
CHK_WS_HI = CHK_WS_MAP + 2
CHK_INIT_WAIVE = CHK_WS_MAP + 3
CHK_INIT_WAIVED = CHK_WS_MAP + 4
CHK_WS_TAIL = CHK_WS_MAP + 5       # a workspace read may end in at most this many unwritten bytes (a waiver; 0: none)
# mode "sync": the call number of the SetFlag that raised flag (event, id) and of the WaitFlag that last lowered it
CHK_FLAG_SET_CALL = CHK_WS_MAP + 6
CHK_FLAG_WAIT_CALL = CHK_FLAG_SET_CALL + N_HARD_EVENTS * EVENT_IDS
CHK_SIZE = CHK_FLAG_WAIT_CALL + N_HARD_EVENTS * EVENT_IDS - CHK_BASE
# The arch35 register file (regbase.py): vector registers (RegTensor, 256 bytes = 32 words each), mask registers
# (MaskReg, one byte per byte lane), the open VF's instruction count and the per-kind counts of every VF so far.
REG_BASE = CHK_BASE + CHK_SIZE
N_VREGS = 32
N_MREGS = 8
VREG_WORDS = 32
MREG_BASE = REG_BASE + N_VREGS * VREG_WORDS
VF_OPEN = MREG_BASE + N_MREGS * VREG_WORDS     # 1 inside vec_scope_begin .. vec_scope_end
VF_INSTR = VF_OPEN + 1                         # register instructions of the open VF
N_VF_KINDS = 8
VF_KIND_BASE = VF_INSTR + 1                    # VF_KIND_BASE + kind: instructions of that kind in all VFs
VF_KIND_NAMES = ("mask", "load", "store", "arith", "cast", "compare_select", "reduce", "move")
# UnalignReg u (0..N_UREGS-1): the bytes an unaligned store stream holds back until their 32-byte UB block is
# complete or DataCopyUnAlignPost flushes them (4 words of data, then the UB byte address of the first held byte
# and how many bytes are held; -1 / 0 when the stream is empty). Then a scratch of two registers for the
# in-place register permutations (Interleave(a, b, a, b), MaskDeInterleave(a, b, a, b)).
N_UREGS = 4
UREG_WORDS = 6
UREG_BASE = VF_KIND_BASE + N_VF_KINDS
VTMP_BASE = UREG_BASE + N_UREGS * UREG_WORDS
REG_SIZE = VTMP_BASE + 2 * VREG_WORDS - REG_BASE
QUE_BASE = REG_BASE + REG_SIZE                        # queue table rows of the live TPipe, QUE_COLS each

# Trace rows: call number, AscendC call id, pipe, start cycle, end cycle, two arguments, and the call number of
# the SetFlag / EnQue / FreeTensor whose event this call waited for (-1: none).
TRACE_COLS = 8
TRACE_L2_SHIFT = 20     # a GM -> UB copy's trace row: rows | L2-hit bytes << 20 in its second argument

# Two-byte poison pattern for memory nobody wrote: reads as NaN in fp32, fp16 and bf16,
# and as a huge positive int32, so a kernel that consumes it fails loudly.
POISON = np.array([0xBF, 0x7F], dtype=np.uint8)
POISON_EVEN = 0xBF
POISON_ODD = 0x7F
POISON_PAIR = np.uint16(POISON_ODD << 8 | POISON_EVEN)    # the two bytes as one little-endian uint16

# --- the queue table of the live TPipe (state[QUE_BASE:], one row per InitBuffer; pipe.py) ---------
MAX_BUFFERS_PER_POSITION = 8     # event ids per hardware event: buffers alive at one TPosition

# Kinds and positions as stored in the queue table.
KIND_TQUE = 0
KIND_TQUEBIND = 1
KIND_TBUF = 2
POS_VECIN = 1
POS_VECOUT = 2
POS_VECCALC = 3

# Queue table columns (int64).
Q_KIND = 0
Q_SRC_POS = 1
Q_DST_POS = 2
Q_BASE = 3        # UB byte offset of buffer 0
Q_LEN = 4         # bytes per buffer, rounded up to 32
Q_NUM = 5         # buffers (InitBuffer num)
Q_DEPTH = 6       # TQue depth (EnQue-without-DeQue limit)
Q_CURSOR = 7      # next buffer AllocTensor tries
Q_USED = 8        # tensors currently enqueued
Q_SEQ = 9         # EnQue sequence counter (DeQue is FIFO)
Q_STATE = 10      # Q_STATE + i: state of buffer i (FREE/OCCUPIED/ENQUE/DEQUE)
Q_ENQ_SEQ = Q_STATE + MAX_BUFFERS_PER_POSITION   # Q_ENQ_SEQ + i: EnQue order of buffer i
# timeline (timeline.py): when buffer i's EnQue event and its FreeTensor event fire, and which call set them
Q_READY_T = Q_ENQ_SEQ + MAX_BUFFERS_PER_POSITION
Q_FREE_T = Q_READY_T + MAX_BUFFERS_PER_POSITION
Q_READY_CALL = Q_FREE_T + MAX_BUFFERS_PER_POSITION
Q_FREE_CALL = Q_READY_CALL + MAX_BUFFERS_PER_POSITION
# checked mode (check.py): the happens-before vector (4 words) released by buffer i's EnQue and by its FreeTensor
Q_READY_V = Q_FREE_CALL + MAX_BUFFERS_PER_POSITION
Q_FREE_V = Q_READY_V + 4 * MAX_BUFFERS_PER_POSITION
QUE_COLS = Q_FREE_V + 4 * MAX_BUFFERS_PER_POSITION

# --- AscendC calls: one declaration each ----------------------------------------------------
# `CALL_X = _call(id, AscendC name, trace arguments)` is the only place a call is declared: CALL_NAMES (fault
# messages, checked-mode waivers, the cost model's per-call figures, the trace) and CALL_TRACE_ARGS derive from it.
# The id goes into word 1 of a fault record, the trace rows and (below 64) the per-call cost table; the trace
# arguments name the two words a trace row holds besides the call ("bytes", "rows" for a DMA; "repeats" for most
# vector calls). tests/ascend_sim/test_declarations.py checks that every call is declared once and issued somewhere.


class CallSpec(NamedTuple):
    """One AscendC call the simulator models."""
    id: int
    name: str                   # as fault messages and traces show it, e.g. "DataCopyPad(GM->UB)"
    trace_args: tuple           # names of the trace row's argument words


CALLS: dict[int, CallSpec] = {}


def _call(call_id: int, name: str, trace_args: tuple = ("repeats",)) -> int:
    if call_id in CALLS or any(c.name == name for c in CALLS.values()):
        raise ValueError(f"AscendC call {call_id} ({name}) declared twice")
    CALLS[call_id] = CallSpec(call_id, name, tuple(trace_args))
    return call_id


CALL_DATA_COPY_PAD_IN = _call(1, "DataCopyPad(GM->UB)", ("bytes", "rows"))
CALL_DATA_COPY_PAD_OUT = _call(2, "DataCopyPad(UB->GM)", ("bytes", "rows"))
CALL_DATA_COPY_IN = _call(3, "DataCopy(GM->UB)", ("bytes", "rows"))
CALL_DATA_COPY_OUT = _call(4, "DataCopy(UB->GM)", ("bytes", "rows"))
CALL_ALLOC_TENSOR = _call(5, "AllocTensor", ("queue", "buffer"))
CALL_ENQUE = _call(6, "EnQue", ("queue", "buffer"))
CALL_DEQUE = _call(7, "DeQue", ("queue", "buffer"))
CALL_FREE_TENSOR = _call(8, "FreeTensor", ("queue", "buffer"))
CALL_TBUF_GET = _call(9, "TBuf::Get", ("arg",))
CALL_SET_FLAG = _call(10, "SetFlag", ("event", "id"))
CALL_WAIT_FLAG = _call(11, "WaitFlag", ("event", "id"))
CALL_PIPE_BARRIER = _call(12, "PipeBarrier", ("pipe",))
CALL_CAST = _call(13, "Cast")
CALL_MULS = _call(14, "Muls")
CALL_MUL = _call(15, "Mul")
CALL_ADD = _call(16, "Add")
CALL_DUPLICATE = _call(17, "Duplicate")
CALL_COPY = _call(18, "Copy")
CALL_BLOCK_REDUCE_SUM = _call(19, "BlockReduceSum")
CALL_WHOLE_REDUCE_SUM = _call(20, "WholeReduceSum")
CALL_GM_GET_VALUE = _call(21, "GlobalTensor::GetValue", ("arg",))
CALL_GM_SET_VALUE = _call(22, "GlobalTensor::SetValue", ("arg",))
CALL_UB_GET_VALUE = _call(23, "LocalTensor::GetValue", ("arg",))
CALL_UB_SET_VALUE = _call(24, "LocalTensor::SetValue", ("arg",))
CALL_INIT_OUTPUT = _call(25, "InitOutput", ("bytes", "rows"))
CALL_REINTERPRET_CAST = _call(26, "ReinterpretCast")
CALL_SCALAR_ARRAY = _call(27, "scalar array access")
CALL_ADDS = _call(28, "Adds")
CALL_DATA_COPY_UB = _call(29, "DataCopy(UB->UB)")
CALL_ARITH_PROGRESSION = _call(40, "ArithProgression")
CALL_SORT = _call(41, "Sort")
CALL_EXTRACT = _call(42, "Extract")
CALL_MRG_SORT = _call(43, "MrgSort")
CALL_CONCAT = _call(44, "Concat")
CALL_DUPLICATE_MASK = _call(45, "Duplicate(mask)")
CALL_VF = _call(46, "vector function (__VEC_SCOPE__)")
CALL_FETCH_EVENT_ID = _call(47, "TPipe::FetchEventID")
# MicroAPI register instructions (regbase.py); a VF is one CALL_VF in the timeline and checked mode, these ids
# only name the instruction in a fault record
CALL_R_MASK_AND = _call(30, "MicroAPI::MaskAnd")
CALL_R_VEC_SCOPE = _call(48, "__VEC_SCOPE__")
CALL_R_CREATE_MASK = _call(49, "MicroAPI::CreateMask")
CALL_R_UPDATE_MASK = _call(50, "MicroAPI::UpdateMask")
CALL_R_LOAD = _call(51, "MicroAPI::DataCopy(UB->RegTensor)")
CALL_R_STORE = _call(52, "MicroAPI::DataCopy(RegTensor->UB)")
CALL_R_ADD = _call(53, "MicroAPI::Add")
CALL_R_DUPLICATE = _call(54, "MicroAPI::Duplicate")
CALL_R_ARANGE = _call(55, "MicroAPI::Arange")
CALL_R_CAST = _call(56, "MicroAPI::Cast")
CALL_R_COMPARE = _call(57, "MicroAPI::Compare")
CALL_R_SELECT = _call(58, "MicroAPI::Select")
CALL_R_REDUCE_SUM = _call(59, "MicroAPI::ReduceSum")
CALL_R_GATHER_MASK = _call(62, "MicroAPI::GatherMask")
CALL_R_INTERLEAVE = _call(63, "MicroAPI::Interleave")
# Each register instruction names its own AscendC call. Ids from 64 on are past the per-call cost table (N_CALL_IDS)
# and the 6 bits the checked-mode shadow keeps of a call id: neither ever sees a register instruction.
CALL_R_MASK_OR = _call(64, "MicroAPI::MaskOr")
CALL_R_MASK_DEINTERLEAVE = _call(65, "MicroAPI::MaskDeInterleave")
CALL_R_COPY = _call(66, "MicroAPI::Copy")
CALL_R_PACK = _call(67, "MicroAPI::Pack")
CALL_R_UNPACK = _call(68, "MicroAPI::UnPack")
CALL_R_DEINTERLEAVE = _call(69, "MicroAPI::DeInterleave")
CALL_R_TRUNCATE = _call(70, "MicroAPI::Truncate")
CALL_R_COMPARE_SCALAR = _call(71, "MicroAPI::CompareScalar")
CALL_R_LOAD_UNALIGN = _call(72, "MicroAPI::DataCopyUnAlign(UB->RegTensor)")
CALL_R_LOAD_ALIGN = _call(73, "MicroAPI::LoadAlign")
CALL_R_GATHER = _call(74, "MicroAPI::DataCopyGather")
CALL_R_STORE_UNALIGN = _call(75, "MicroAPI::DataCopyUnAlign(RegTensor->UB)")
CALL_R_STORE_UNALIGN_POST = _call(76, "MicroAPI::DataCopyUnAlignPost")
CALL_R_SUB = _call(77, "MicroAPI::Sub")
CALL_R_MUL = _call(78, "MicroAPI::Mul")
CALL_R_DIV = _call(79, "MicroAPI::Div")
CALL_R_MAX = _call(80, "MicroAPI::Max")
CALL_R_MIN = _call(81, "MicroAPI::Min")
CALL_R_ABS = _call(82, "MicroAPI::Abs")
CALL_R_ADDS = _call(83, "MicroAPI::Adds")
CALL_R_MULS = _call(84, "MicroAPI::Muls")
CALL_R_MAXS = _call(85, "MicroAPI::Maxs")
CALL_R_AND = _call(86, "MicroAPI::And")
CALL_R_SHIFT_LEFTS = _call(87, "MicroAPI::ShiftLefts")
CALL_R_SHIFT_RIGHTS = _call(88, "MicroAPI::ShiftRights")
CALL_R_REDUCE_MAX = _call(89, "MicroAPI::ReduceMax")
CALL_R_REDUCE_MIN = _call(90, "MicroAPI::ReduceMin")
CALL_R_REDUCE_MAX_WITH_DATABLOCK = _call(91, "MicroAPI::ReduceMaxWithDataBlock")
CALL_COMPARE_SCALAR = _call(60, "CompareScalar")   # masked-select instructions (mask.py)
CALL_GATHER_MASK = _call(61, "GatherMask")
CALL_SIMT = _call(31, "asc_vf_call (SIMT)")             # Simt::VF_CALL / asc_vf_call (simt.py)
SLOT_SIMT_GM_LATENCY = 32  # not calls: TL_CPR + these hold SIMT cost figures (timeline.cost_words)
SLOT_SIMT_LAUNCH = 33
CALL_DCCI = _call(34, "DataCacheCleanAndInvalid")             # DataCacheCleanAndInvalid (cache.py)
CALL_GM_ATOMIC_ADD = _call(35, "AtomicAdd")    # AscendC::AtomicAdd(__gm__ T*, T): scalar GM atomics (scalar.py)
CALL_GM_ATOMIC_EXCH = _call(36, "AtomicExch")   # AscendC::AtomicExch(__gm__ T*, T)


CALL_NAMES = {c.id: c.name for c in CALLS.values()}
CALL_TRACE_ARGS = {c.id: c.trace_args for c in CALLS.values()}

# --- faults: one declaration each ------------------------------------------------------------
# `F_X = _fault(code, arguments, error class, message)` is the only place a fault is declared. A fault record is
# (code, call id, six argument words); `arguments` names those words in order. "name:kind" says how the message
# shows the word: gm (a GM tensor's name), queue (a queue / TBuf name), event (a HardEvent name), dtype (a ge
# dtype name), param (PARAM_NAMES), state (STATE_NAMES), qkind (TQue / TQueBind / TBuf), call (CALL_NAMES).
# `message` is a str.format template over the argument names (and the few derived values faults.py adds for a
# fault, listed in faults.DERIVED); "" means faults.py builds the whole error (faults.BUILDERS). `fields` name the
# error's attributes: an argument name, or a tuple of names for a tuple. The error class is the name of a class
# in errors.py (this module imports nothing of ours). faults.to_error derives every SimulatorError from here, and
# tests/ascend_sim/test_declarations.py checks that each fault is declared once, raised somewhere and translated.


class FaultSpec(NamedTuple):
    """One fault a kernel can record."""
    code: int
    args: tuple                 # the record's argument words: "name" or "name:kind"
    error: str                  # the errors.py class it becomes
    message: str                # str.format template ("" when faults.BUILDERS builds the error)
    fields: tuple               # (attribute, argument name or tuple of names) of the error

    @property
    def arg_names(self) -> tuple:
        return tuple(a.split(":")[0] for a in self.args)


FAULTS: dict[int, FaultSpec] = {}


def _fault(code: int, args: tuple, error: str, message: str = "", **fields) -> int:
    if code in FAULTS or not 0 < code or len(args) > ERR_COLS - 2:
        raise ValueError(f"fault {code} declared twice, out of range or with more than {ERR_COLS - 2} arguments")
    FAULTS[code] = FaultSpec(code, tuple(args), error, message, tuple(fields.items()))
    return code


F_GM_OOB = _fault(1, ("tensor:gm", "first", "end", "tensor_bytes"), "OutOfBoundsError",
                  "GM access to bytes [{first}, {end}) of '{tensor}' is outside the tensor's {tensor_bytes} bytes",
                  tensor="tensor", byte_range=("first", "end"))
F_UB_OOB = _fault(2, ("ub_offset", "nbytes", "tensor_bytes"), "OutOfBoundsError",
                  "UB access of {nbytes} bytes from the LocalTensor at UB offset {ub_offset} exceeds the tensor's "
                  "{tensor_bytes} bytes")
F_UB_NOT_IN_UB = _fault(3, ("offset", "nbytes"), "OutOfBoundsError",   # offset: relative to the UB's start
                        "LocalTensor at byte {offset} (+{nbytes} bytes) does not lie inside this core's Unified "
                        "Buffer")
F_UB_ALIGN = _fault(4, ("address", "alignment"), "AlignmentError",
                    "UB address {address} is not {alignment}-byte aligned")
F_PARAM = _fault(5, ("param:param", "value", "low", "high"), "ParamRangeError",
                 "{param} = {value} is outside [{low}, {high}]")
F_LEN_MULTIPLE = _fault(6, ("block_len", "elem_bytes"), "AlignmentError",
                        "blockLen {block_len} bytes is not a multiple of sizeof(T) = {elem_bytes}")
F_DATACOPY_TRUNC = _fault(7, ("nbytes",), "AlignmentError",     # moved: derived (nbytes rounded down to 32)
                          "DataCopy of {nbytes} bytes is not a multiple of 32 bytes; the hardware would silently move "
                          "only {moved} bytes (use DataCopyPad)")
F_QUE_STATE = _fault(8, ("queue:queue", "buffer", "state:state"), "QueueError",
                     "buffer {buffer} of '{queue}' is {state}, which this call does not accept")
F_QUE_DEPTH = _fault(9, ("queue:queue", "used", "depth"), "QueueError",
                     "EnQue on '{queue}' with {used} tensors already queued exceeds its depth {depth}")
F_QUE_EMPTY = _fault(10, ("queue:queue",), "QueueError",
                     "DeQue on '{queue}' with nothing enqueued (would hang on the NPU)")
F_QUE_FOREIGN = _fault(11, ("queue:queue", "ub_offset"), "QueueError",
                       "the tensor at UB offset {ub_offset} does not belong to '{queue}'")
F_QUE_NO_FREE = _fault(12, ("queue:queue", "buffers"), "QueueError",
                       "AllocTensor on '{queue}': all {buffers} buffers are in use (would hang on the NPU)")
F_EVT_ID = _fault(13, ("event:event", "id"), "SyncError", "event id {id} of {event} is outside [0, 8)")
F_EVT_DOUBLE_SET = _fault(14, ("event:event", "id"), "SyncError",
                          "SetFlag<{event}>({id}) while the flag is already set (undefined on the NPU)")
# ids_up: bit i set while SetFlag<event>(i) is up; last_wait_call: call number of the WaitFlag that took this flag
# down last (0: none)
F_EVT_WAIT_UNSET = _fault(15, ("event:event", "id", "ids_up", "last_wait_call"), "UnpairedFlagError")
F_BARRIER_S = _fault(16, (), "SyncError", "PipeBarrier<PIPE_S> is not allowed")
F_CAST_PAIR = _fault(17, ("dst:dtype", "src:dtype", "round_mode"), "ParamRangeError",
                     "Cast from {src} to {dst} does not support round mode {round_mode}")
F_SCALAR_OOB = _fault(18, ("array", "index", "size"), "OutOfBoundsError",   # array: an id the kernel chose
                      "index {index} of a {size}-element scalar array (#{array}) is out of range")
F_QUE_KIND = _fault(20, ("queue:queue", "kind:qkind"), "QueueError",
                    "'{queue}' is a {kind}, which this call does not accept")
F_QUE_INDEX = _fault(21, ("queue", "buffers"), "QueueError",     # buffers: of the live TPipe
                     "queue/TBuf index {queue} is not one of the {buffers} buffers this TPipe's InitBuffer calls "
                     "created")
F_ELEM_TYPE = _fault(22, ("dst_bytes", "src_bytes"), "ElementTypeError",
                     "different element types, or ones this call does not take: {dst_bytes}-byte destination and "
                     "{src_bytes}-byte source elements (DataCopy, DataCopyPad and Copy take one T for both sides)")
F_EVT_EXHAUSTED = _fault(23, ("event:event", "ids"), "SyncError",
                         "FetchEventID<{event}>: all {ids} event ids have a SetFlag awaiting its WaitFlag, so no id "
                         "is free (on the NPU a SetFlag on a reused id is undefined and can hang); wait for a flag "
                         "before fetching another id")
F_COUNT_BYTES = _fault(40, ("nbytes", "multiple"), "AlignmentError",    # rest: derived (nbytes % multiple)
                       "count covers {nbytes} bytes, not a multiple of {multiple}: the hardware would silently skip "
                       "the elements of the last {rest} bytes (round the count up to whole {multiple}-byte repeats)")
F_UNSUPPORTED = _fault(41, ("dtype:dtype", "mode", "arch"), "ElementTypeError",   # a dtype / mode this chip lacks
                       "{dtype} data with mode {mode} is not supported by this instruction on NPU arch {arch}")
F_PATTERN_TYPE = _fault(42, ("pattern_bytes", "data_bytes"), "ElementTypeError",
                        "the gather pattern has {pattern_bytes}-byte elements but the data {data_bytes}-byte ones; "
                        "GatherMask takes a uint16 pattern for 2-byte data, uint32 for 4-byte data")
# packed: the earlier call's pipe | this call's pipe << 4 | kind (RAW / WAR / WAW) << 8 | memory (MEM_UB / MEM_GM)
# << 12; first, end: UB offsets or GM addresses
F_PIPE_RACE = _fault(43, ("first_call_number", "first_call:call", "packed", "first", "end"), "PipeRaceError")
# state: the buffer's; freed_at: call number of its last FreeTensor (0: never freed); how: derived from both
F_QUE_OWNER = _fault(44, ("queue:queue", "buffer", "state", "freed_at"), "QueueError",
                     "buffer {buffer} of '{queue}' is used {how}")
F_OUTLINE = _fault(45, (), "SimulatorError",       # an outlined machine-model call whose compiled variant is missing
                   "internal: the compiled machine-model code of this call could not be loaded (see the warnings "
                   "above; clearing the __pycache__ directories recompiles it)")
# memory: MEM_UB / MEM_GM; first, end: UB offsets / GM addresses; queue: the UB bytes' queue (-1: none)
F_UNINIT_READ = _fault(46, ("memory", "first", "end", "queue"), "UninitializedReadError")
F_SIMT_ARCH = _fault(50, ("arch",), "SimulatorError",     # chip: derived from the arch
                     "SIMT (asc_vf_call / Simt::VF_CALL) exists only on Ascend 950 (NPU arch 3510); this chip is "
                     "{chip} (NPU arch {arch})")
F_SIMT_THREADS = _fault(51, ("dim_x", "dim_y", "dim_z", "limit"), "ParamRangeError",
                        "threadNums dim3{{{dim_x}, {dim_y}, {dim_z}}}: every dimension must be >= 1 and "
                        "dimx * dimy * dimz at most {limit}")
# memory: 0 UB, 1 GM; where: the GM tensor id or the LocalTensor's UB offset
F_SIMT_OOB = _fault(52, ("memory", "where", "first", "end", "tensor_bytes", "thread"), "OutOfBoundsError")
F_SIMT_RACE = _fault(53, ("first_thread", "second_thread", "address", "nbytes"), "PipeRaceError")

P_BLOCK_COUNT = 1
P_BLOCK_LEN = 2
P_STRIDE = 3
P_LEFT_PADDING = 4
P_RIGHT_PADDING = 5
P_REPEAT = 6
P_MASK = 7
P_COUNT = 8
P_BLK_STRIDE = 10
P_CACHE_LINE = 20
P_DCCI_DST = 21
PARAM_NAMES = {
    P_BLOCK_COUNT: "blockCount", P_BLOCK_LEN: "blockLen", P_STRIDE: "stride",
    P_LEFT_PADDING: "leftPadding", P_RIGHT_PADDING: "rightPadding", P_REPEAT: "repeatTime",
    P_MASK: "mask", P_COUNT: "count", P_BLK_STRIDE: "blkStride",
    P_CACHE_LINE: "CacheLine", P_DCCI_DST: "DcciDst",
}

# --- checked mode (check.py, shadow.py) ------------------------------------------------------
# state[CHK_MODE] is a set of bits, one per kind of check the cores run (a launch may run several); a launch's mode
# (check.resolve) may also hold bits of checks of the whole launch that only the launcher runs (16 and up)
MODE_OFF = 0
MODE_RACE = 1            # pipe races, production ordering (check.py)
MODE_STRICT = 2          # pipe races, the documentation's ordering
MODE_INIT = 4            # reads of UB / workspace bytes nothing wrote
MODE_SYNC = 8            # unpaired SetFlag / WaitFlag, named with their calls
MODE_RACES = MODE_RACE | MODE_STRICT     # the pipe model of the race checks
CORE_MODE_MASK = MODE_RACES | MODE_INIT | MODE_SYNC      # what state[CHK_MODE] holds
CHECK_OVERLAP = 16       # output / workspace bytes written by two cores in one launch are an OverlapError
MODES = {"race": MODE_RACE, "strict": MODE_STRICT, "init": MODE_INIT, "sync": MODE_SYNC,
         "all": MODE_RACE | MODE_INIT | MODE_SYNC | CHECK_OVERLAP}
# GM access log rows (CHK_GLOG): first byte, end byte (host addresses), call number * 64 + call id, pipe | kind << 4
GLOG_COLS = 4
GLOG_READ, GLOG_WRITE, GLOG_ATOMIC = 0, 1, 2      # kinds: a read, a plain write, an atomic update (read + write)
RAW, WAR, WAW = 0, 1, 2  # the race kind in a F_PIPE_RACE fault record
KIND_NAMES = ("RAW", "WAR", "WAW")
MEM_UB, MEM_GM = 0, 1    # the memory of a race
SHADOW_COLS = 11         # UB shadow words per block: write pipe + 1, write stamp, write call, read stamp + 1 and
                         # read call per pipe
SHADOW_BLOCK = 32        # UB bytes one shadow record covers

# --- queue buffer states (state[row + Q_STATE + i]; AscendC's TBufState) ----------------------
FREE = 0
OCCUPIED = 1
ENQUE = 2
DEQUE = 3
STATE_NAMES = ("FREE", "OCCUPIED", "ENQUE", "DEQUE")

ATOMIC_DT_MASK = 0xFF                # ATOMIC_TYPE's low byte: 1 + T's ge dtype code
ATOMIC_OP_MAX = 0x100                # ATOMIC_TYPE's operation: SetAtomicMax (0: SetAtomicAdd)
# Atomic spinlocks (atomic.py): stripes of GM addresses, one lock word each (core.ATOMIC_LOCKS).
ATOMIC_LOCK_COUNT = 4096
