"""What the cost model knows of GM beyond bandwidth: where a byte sits on the device, each core's share of the L2,
and the log of which GM regions each core read when (same-address contention). Numba side (entered by the
timeline's DMA and scalar costs) and host side (the launcher's per-launch set-up and the after-launch sum).

Device addresses, not host ones, key all three: how the host allocator places an array (a large one may start
16 bytes into a 32-byte block) would otherwise move line boundaries from one process to the next, and the estimate
with them. Every GM tensor starts line aligned, as device buffers do.
"""
from __future__ import annotations

import numpy as np

from ._jit import aicore
from ._memory import load_i64, store_i64
from .layout import (
    L2_EPOCH_SHIFT,
    SAME_BUCKET_BITS,
    SAME_REGION_SHIFT,
    TL_L2_ADDR,
    TL_L2_CLOCK,
    TL_L2_MASK,
    TL_L2_SHIFT,
    TL_L2_TAG,
    TL_SAME_ADDR,
    TL_SAME_CAP,
    TL_SAME_N,
    TL_SAME_WINDOW,
)

DEVICE_TENSOR_SHIFT = 36       # a GM tensor's device addresses: (id + 1) << 36 | byte offset (64 GiB each)


@aicore
def device_address(g, byte_offset):
    """Where byte `byte_offset` of GM tensor g (offset from g.data's first byte) sits on the device."""
    return ((g.id + 1) << DEVICE_TENSOR_SHIFT) + byte_offset


# --- host side: per-launch set-up and the after-launch sum -------------------------------
def attach_l2(states: np.ndarray, tables: np.ndarray, epoch: int) -> None:
    """Give every core of a launch its L2 tag table (host side): row i of `tables` (C-contiguous int64, kept alive
    by the caller until the launch has ended) for core i, and the launch's `epoch`, so tags an earlier launch left
    in the table never match."""
    assert tables.dtype == np.int64 and tables.flags.c_contiguous and len(tables) >= len(states)
    states[:, TL_L2_ADDR] = tables.ctypes.data + np.arange(len(states), dtype=np.int64) * tables.strides[0]
    states[:, TL_L2_TAG] = epoch << L2_EPOCH_SHIFT


def attach_same_address_log(states: np.ndarray, logs: np.ndarray) -> None:
    """Give every core of a launch its same-address log (host side): row i of `logs` (C-contiguous int64, two words
    an entry, kept alive by the caller until the launch has ended) for core i."""
    assert logs.dtype == np.int64 and logs.flags.c_contiguous and len(logs) >= len(states)
    states[:, TL_SAME_ADDR] = logs.ctypes.data + np.arange(len(states), dtype=np.int64) * logs.strides[0]
    states[:, TL_SAME_CAP] = logs.shape[1] // 2


def same_address_bytes(logs: np.ndarray, used: np.ndarray, aiv_num: int) -> int:
    """Bytes read from a 512-byte GM region (a line) in one time bucket by other cores than the one that read most
    of it there (what the chip serialises when many cores read the same lines at once). `logs` are the blocks'
    logs, `used` how many entries each filled; blocks of different rounds (block // aiv_num) never run at once.
    Depends on no host-thread order: each block's log is its own timeline's."""
    counts = used.tolist()
    if sum(counts) == 0:
        return 0
    keys = np.concatenate([logs[i, 0:2 * n:2] for i, n in enumerate(counts)])
    nbytes = np.concatenate([logs[i, 1:2 * n:2] for i, n in enumerate(counts)])
    core = np.repeat(np.arange(len(used), dtype=np.int64), used)
    rounds = core // max(1, aiv_num)
    order = np.lexsort((core, keys, rounds))
    keys, nbytes, core, rounds = keys[order], nbytes[order], core[order], rounds[order]
    # bytes per (key, core), then per key: the total and the largest single core's share
    starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]) | (core[1:] != core[:-1])])
    per_core = np.add.reduceat(nbytes, starts)
    per_key, per_round = keys[starts], rounds[starts]
    key_starts = np.flatnonzero(np.r_[True, (per_key[1:] != per_key[:-1]) | (per_round[1:] != per_round[:-1])])
    total = np.add.reduceat(per_core, key_starts)
    largest = np.maximum.reduceat(per_core, key_starts)
    return int((total - largest).sum())



# --- numba side: the L2 share ---------------------------------------------------------
@aicore
def _popcount(x):
    x = x - ((x >> 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
    return (x * 0x0101010101010101) >> 56 & 0xFF


@aicore
def l2_hits(c, address, rows, row_bytes, pitch):
    """Bytes of a GM read (`rows` rows of `row_bytes` at device `address`, `pitch` bytes apart) that this core read
    earlier in the launch and that its share of the L2 still holds; the 32-byte blocks read are entered.

    The core's table is direct mapped, two words a line: its tag (launch epoch | line + 1), and the clock of its
    last use (TL_L2_CLOCK: lines entered so far) above a mask of the line's 32-byte blocks the core has read.
    A line is still held while fewer lines than the table has have been entered since its last use (what an
    LRU cache of that many lines does: a sweep over more bytes than the share keeps nothing). A hit is a block
    read before: a byte that only shares a line with bytes read before still comes from HBM, as the copy
    benchmark's 128-byte tiles show (their neighbours in the line cost HBM time, not L2 time)."""
    mask = c.state[TL_L2_MASK]
    if mask < 0:
        return 0
    table = c.state[TL_L2_ADDR]
    tag_bits = c.state[TL_L2_TAG]
    shift = c.state[TL_L2_SHIFT]
    last_block_of_line = (1 << (shift - 5)) - 1
    line_bits = (1 << L2_EPOCH_SHIFT) - 1
    # rows back to back in whole blocks are one range: the same lines and blocks, in the same order
    if pitch == row_bytes and row_bytes % 32 == 0:
        row_bytes, rows = rows * row_bytes, 1
    clock = c.state[TL_L2_CLOCK]            # a local: the table stores below could alias the state array
    hits = 0
    for r in range(rows):
        start = address + r * pitch
        first_line = start >> shift
        last_line = (start + row_bytes - 1) >> shift
        first_block = (start >> 5) & last_block_of_line
        last_block = ((start + row_bytes - 1) >> 5) & last_block_of_line
        for line in range(first_line, last_line + 1):
            lo = first_block if line == first_line else 0
            hi = last_block if line == last_line else last_block_of_line
            blocks = ((1 << (hi - lo + 1)) - 1) << lo
            tag = tag_bits | ((line + 1) & line_bits)
            slot = 2 * (line & mask)
            word = load_i64(table, slot + 1)
            if load_i64(table, slot) == tag and clock - (word >> 32) <= mask:
                seen = word & 0xFFFFFFFF
                if seen & blocks:
                    hits += _popcount(seen & blocks) * 32
                store_i64(table, slot + 1, (clock << 32) | seen | blocks)
            else:
                clock += 1
                store_i64(table, slot, tag)
                store_i64(table, slot + 1, (clock << 32) | blocks)
    c.state[TL_L2_CLOCK] = clock
    return hits



# --- numba side: the same-address log ---------------------------------------------------
@aicore
def log_same_address(c, address, nbytes, start):
    """Enter a DMA's HBM bytes in the core's same-address log under (512-byte region of its first byte, time bucket
    of its start); a read in the same region and bucket as the entry before adds to it."""
    key = ((address >> SAME_REGION_SHIFT) << SAME_BUCKET_BITS) \
        | ((start // c.state[TL_SAME_WINDOW]) & ((1 << SAME_BUCKET_BITS) - 1))
    log = c.state[TL_SAME_ADDR]
    n = c.state[TL_SAME_N]
    if n > 0 and load_i64(log, 2 * (n - 1)) == key:
        store_i64(log, 2 * (n - 1) + 1, load_i64(log, 2 * (n - 1) + 1) + nbytes)
    elif n < c.state[TL_SAME_CAP]:
        store_i64(log, 2 * n, key)
        store_i64(log, 2 * n + 1, nbytes)
        c.state[TL_SAME_N] = n + 1
