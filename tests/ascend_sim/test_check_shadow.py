"""The run-length UB shadow of checked mode against a per-block model of the same rules.

check.ub keeps one record per run of 32-byte blocks that share their last accesses. The model below keeps one
record per block, as the rules in check.py's docstring are stated. Random access sequences (any pipe, any byte
range including ones that cross the UB's end, reads and writes, mixed with PipeBarriers and SetFlag / WaitFlag
pairs) must give the same record for every block after every access, and the same first race: same kind,
same earlier call, and a reported byte range that holds the first block the model finds in conflict.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

from ascend_sim import check as chk
from ascend_sim.core import Core
from ascend_sim.layout import (
    CHK_E,
    CHK_FLAG_V,
    CHK_K,
    CHK_SHADOW_BLOCKS,
    CNT_CALLS,
    ERR_BASE,
    F_PIPE_RACE,
    MODE_RACE,
    MODES,
    N_PIPES,
    PIPE_S,
    PIPE_V,
    QUE_BASE,
    RAW,
    SHADOW_COLS,
    WAR,
    WAW,
)

COLS = SHADOW_COLS
UB_BYTES = 6000                 # 188 blocks: the sentinel bit sits inside the third bitmap word


@numba.njit
def _access(c, call, pipe, off, nbytes, write):
    chk.ub(c, call, pipe, off, nbytes, write)


@numba.njit
def _barrier(c, pipe):
    chk.barrier(c, pipe)


@numba.njit
def _flag(c, src, dst):
    chk.release(c, src, CHK_FLAG_V)
    chk.acquire(c, dst, CHK_FLAG_V)


def _expand(shadow, blocks):
    """Per-block records of the run-length shadow: each block gets the record of the run it is in (a read's
    call is dropped where there is no read: a write leaves it stale, and nothing looks at it)."""
    bits = shadow[blocks * COLS:].view(np.uint64)
    rows = shadow[:blocks * COLS].reshape(blocks, COLS)
    out = np.empty_like(rows)
    head = -1
    for b in range(blocks):
        if (int(bits[b // 64]) >> (b % 64)) & 1:
            head = b
        out[b] = rows[head]
    out[:, 7:11][out[:, 3:7] == 0] = 0
    return out


class BlockModel:
    """The shadow rules, one record per block: last write (pipe + 1, stamp, call), and each pipe's last read
    (stamp + 1, call); scalar reads are not recorded."""

    def __init__(self, blocks, strict):
        self.rows = np.zeros((blocks, COLS), dtype=np.int64)
        self.strict = strict

    def access(self, state, call, pipe, off, nbytes, write):
        """None, or (kind, earlier pipe, earlier call, block) of the first race."""
        known = state[CHK_K:CHK_K + N_PIPES * N_PIPES].reshape(N_PIPES, N_PIPES)

        def before(q, stamp):
            return (q == PIPE_S and pipe == PIPE_S) or known[pipe, q] > stamp

        stamp = int(state[CHK_E + pipe])
        me = int(state[CNT_CALLS]) * 64 + call
        blocks = self.rows.shape[0]
        for b in range(off // 32, min((off + nbytes + 31) // 32, blocks)):
            row = self.rows[b]
            if write:
                for r in range(N_PIPES):
                    if r not in (pipe, PIPE_S) and row[3 + r] > 0 and not before(r, row[3 + r] - 1):
                        return WAR, r, int(row[7 + r]), b
            wp = int(row[0]) - 1
            if wp >= 0:
                same_ok = wp == pipe and (pipe == PIPE_S or (pipe == PIPE_V and (write or not self.strict))
                                          or (write and not self.strict))
                if not same_ok and not before(wp, row[1]):
                    return (WAW if write else RAW), wp, int(row[2]), b
            if write:
                row[:] = 0
                row[:3] = pipe + 1, stamp, me
            elif pipe != PIPE_S:
                row[3 + pipe], row[7 + pipe] = stamp + 1, me
        return None


def _random_steps(rng, n):
    for _ in range(n):
        roll = rng.random()
        if roll < 0.08:
            yield "barrier", int(rng.integers(0, 5))
        elif roll < 0.25:
            yield "flag", int(rng.integers(0, N_PIPES)), int(rng.integers(0, N_PIPES))
        else:
            off = int(rng.integers(0, UB_BYTES))
            span = int(rng.choice([1, 2, 32, 64, 256, 2048, UB_BYTES]))
            yield ("access", int(rng.integers(1, 40)), int(rng.integers(0, N_PIPES)), off,
                   int(rng.integers(1, span + 1)), bool(rng.random() < 0.45))


@pytest.mark.parametrize("mode", ["race", "strict"])
@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
def test_run_length_shadow_matches_the_per_block_rules(mode, seed):
    rng = np.random.default_rng(seed)
    races = steps = 0
    while steps < 600:
        state = np.zeros(QUE_BASE + 64, dtype=np.int64)
        core = Core(np.zeros(UB_BYTES, dtype=np.uint8), state, 0, 1)
        shadow = chk.attach(state, MODES[mode], UB_BYTES)
        blocks = int(state[CHK_SHADOW_BLOCKS])
        model = BlockModel(blocks, strict=mode == "strict")
        for step in _random_steps(rng, 200):
            steps += 1
            if step[0] == "barrier":
                _barrier(core, step[1])
                continue
            if step[0] == "flag":
                _flag(core, step[1], step[2])
                continue
            _, call, pipe, off, nbytes, write = step
            state[CNT_CALLS] += 1
            where = f"{mode} seed {seed} call #{state[CNT_CALLS]}: pipe {pipe} {'writes' if write else 'reads'} " \
                    f"[{off}, {off + nbytes})"
            expected = model.access(state, call, pipe, off, nbytes, write)
            _access(core, call, pipe, off, nbytes, write)
            err = state[ERR_BASE:ERR_BASE + 8]
            if expected is None:
                assert err[0] == 0, where
                got = _expand(shadow, blocks)
                bad = np.flatnonzero((got != model.rows).any(axis=1))
                assert bad.size == 0, f"{where}: blocks {bad[:4]}: {got[bad[:2]]} instead of {model.rows[bad[:2]]}"
                continue
            kind, other_pipe, other_call, block = expected
            assert err[0] == F_PIPE_RACE, f"{where}: expected a race at block {block}"
            assert (err[4] >> 8) & 15 == kind and err[4] & 15 == other_pipe, where
            assert err[2] * 64 + err[3] == other_call, where
            assert err[5] <= block * 32 < err[6] and err[5] % 32 == 0 and err[6] <= blocks * 32, where
            races += 1
            break
    assert races > 0                    # the sequences do reach races, not only clean runs


def test_a_race_names_the_whole_conflicting_range_only():
    """A write over a tile part of which another pipe still reads: the error covers exactly the part read."""
    state = np.zeros(QUE_BASE + 64, dtype=np.int64)
    core = Core(np.zeros(UB_BYTES, dtype=np.uint8), state, 0, 1)
    shadow = chk.attach(state, MODE_RACE, UB_BYTES)
    state[CNT_CALLS] = 1
    _access(core, 1, PIPE_V, 0, 4096, True)             # V writes the tile
    _barrier(core, 4)
    state[CNT_CALLS] = 2
    _access(core, 2, 3, 1024, 1024, False)              # MTE3 reads [1024, 2048)
    state[CNT_CALLS] = 3
    _access(core, 3, PIPE_V, 0, 1024, True)             # V rewrites [0, 1024): nobody reads it, fine
    assert state[ERR_BASE] == 0
    state[CNT_CALLS] = 4
    _access(core, 4, PIPE_V, 0, 4096, True)             # V rewrites the tile while MTE3 may still read
    err = state[ERR_BASE:ERR_BASE + 8]
    assert err[0] == F_PIPE_RACE and (err[5], err[6]) == (1024, 2048) and err[2] == 2
    del shadow
