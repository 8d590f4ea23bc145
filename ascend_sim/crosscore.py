"""Checked mode across cores (host side): GM races between cores, and GM bytes written by two cores.

Each core appends its GM accesses to a log of its own while it runs (shadow._log: rows of first byte, end byte,
call, pipe and kind; a strided DMA copy logs each row, so cores that write interleaved column slices of one
tensor do not meet). No core reads another's log, so the threads the cores run on share nothing and take no lock.
The launcher hands the logs to CrossCore.phase_end at every SyncAll and at the end of the launch:

* Races. Within one phase nothing orders two cores. Rows that touch no byte any core wrote drop out first
  (reads of inputs). Per core the rest is folded into four sorted lists of disjoint intervals: everything it
  touched (U), its plain writes (W), its atomic updates (A), its reads (R). Counting, over the boundaries of
  all of them, how many cores' intervals of each list cover each stretch of bytes finds in O(n log n) every
  stretch where two different cores conflict: at least two cores touch it and one of them writes it plainly,
  or one updates it atomically while another reads it plainly (atomic updates among themselves do not
  conflict). Only inside such a stretch are the rows, folded per (core, pipe, kind, call), paired (sorted by
  start, so the work is the pairs that meet), to name the two cores and calls and to apply the kernel's
  cross-core RaceWaivers. The log tables are reused from launch to launch.
* Overlapping writes. Each phase's plain writes, folded per (core, call), are kept for the whole launch; at its
  end a stretch two cores' writes cover is an overlap (SyncAll between them or not). Atomic updates are not
  overlaps: several cores accumulating into one output is what SetAtomicAdd is for (a plain write by one core
  and an atomic update by another in one phase is a race above; across a SyncAll, e.g. a zero fill then atomic
  adds, it is fine).

A full log drops further accesses and counts them (RunReport.extra["gm_log_lost"]); checks are then partial.
"""
from __future__ import annotations

import threading

import numpy as np

from .check import OverlapWaiver, RaceWaiver
from .errors import OverlapError, PipeRaceError
from .layout import (
    CALL_NAMES,
    CHECK_OVERLAP,
    CHK_GLOG,
    CHK_GLOG_CAP,
    CHK_GLOG_LOST,
    CHK_GLOG_N,
    GLOG_ATOMIC,
    GLOG_COLS,
    GLOG_READ,
    GLOG_WRITE,
    PIPE_NAMES,
)

LOG_ROWS = 1 << 15          # log rows per core (1 MiB each; pages nobody writes cost nothing)
MAX_LISTED = 64             # overlaps listed in the report (the total bytes count them all)
_PIPES = tuple(f"PIPE_{p}" for p in PIPE_NAMES)


def _uniq(x):
    """np.unique of an int64 array by sorting (numpy's hash path is slow on scattered 64-bit values)."""
    x = np.sort(x)
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = x[1:] != x[:-1]
    return x[keep]


def _ranks(keys):
    """(the distinct keys sorted, each key's index among them)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.ones(len(sk), dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.cumsum(new) - 1
    return sk[new], rank


def _fold(keys, starts, ends, codes=None):
    """Per key, the union of the intervals [starts, ends) as sorted disjoint intervals (touching ones joined).
    Returns keys, starts, ends (and the code of each folded interval's first row when `codes` is given), sorted by
    key, then address."""
    if not len(keys):
        out = (keys, starts, ends)
        return out + (codes,) if codes is not None else out
    uniq, rank = _ranks(keys)
    base = int(starts.min())
    span = int(ends.max()) - base + 1
    if (len(uniq) - 1) * span >= 1 << 62:           # too far apart to lay the groups end to end: one at a time
        parts = [_fold(keys[rank == g], starts[rank == g], ends[rank == g],
                       None if codes is None else codes[rank == g]) for g in range(len(uniq))]
        return tuple(np.concatenate(col) for col in zip(*parts, strict=True))
    off = rank.astype(np.int64) * span - base       # each group's bytes laid out after the previous group's
    s2, e2 = starts + off, ends + off
    order = np.argsort(s2, kind="stable")
    s2, e2 = s2[order], e2[order]
    reach = np.maximum.accumulate(e2)
    new = np.ones(len(s2), dtype=bool)
    new[1:] = s2[1:] > reach[:-1]
    first = np.flatnonzero(new)
    g = rank[order][first]
    back = g.astype(np.int64) * span - base
    out = (uniq[g], s2[first] - back, np.maximum.reduceat(e2, first) - back)
    return out + (codes[order][first],) if codes is not None else out


def _cover(points, starts, ends):
    """How many of the intervals cover each stretch [points[i], points[i + 1])."""
    n = len(points)
    return np.cumsum(np.bincount(np.searchsorted(points, starts), minlength=n)
                     - np.bincount(np.searchsorted(points, ends), minlength=n))


def _stretches(flags, points):
    """The maximal runs of stretches where `flags` holds, as (first byte, end byte) pairs."""
    idx = np.flatnonzero(flags[:-1])
    if not len(idx):
        return []
    breaks = np.flatnonzero(np.diff(idx) > 1)
    firsts = np.concatenate(([idx[0]], idx[breaks + 1]))
    lasts = np.concatenate((idx[breaks], [idx[-1]]))
    return list(zip(points[firsts].tolist(), points[lasts + 1].tolist(), strict=True))


def _pairs(core, starts, ends, budget: int = 1 << 21):
    """Index arrays (I, J) of the pairs of intervals of different cores that share bytes, each pair once, at most
    about `budget` candidate pairs at a time. Sorted by start, interval i meets exactly the later intervals that
    start before it ends, so the work is the number of meeting pairs, not the square of the intervals."""
    n = len(core)
    order = np.argsort(starts, kind="stable")
    ss, se = starts[order], ends[order]
    count = np.maximum(np.searchsorted(ss, se, side="left") - np.arange(n) - 1, 0)
    bounds = np.searchsorted(np.cumsum(count), np.arange(budget, int(count.sum()) + budget, budget), side="right")
    x0 = 0
    for x1 in list(bounds) + [n]:
        x1 = max(int(x1), x0 + 1) if x0 < n else n
        c = count[x0:x1]
        total = int(c.sum())
        if total:
            i = np.repeat(np.arange(x0, x1), c)
            j = i + 1 + np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            oi, oj = order[i], order[j]
            keep = core[oi] != core[oj]
            if keep.any():
                yield oi[keep], oj[keep]
        x0 = x1
        if x0 >= n:
            break


def gm_tensors(args, gm_names) -> list:
    """The GM tensors among a launch's arguments (GlobalTensors, also inside tuples), as (first address, end
    address, name) sorted by address, to name the bytes of a finding."""
    found = {}

    def visit(a, depth):
        if hasattr(a, "_fields") and a._fields == ("data", "id", "offset") and isinstance(a.data, np.ndarray):
            start = a.data.ctypes.data
            name = gm_names[a.id] if 0 <= a.id < len(gm_names) else f"GM tensor {a.id}"
            found.setdefault(start, (start, start + a.data.nbytes, name))
        elif isinstance(a, (tuple, list)) and depth < 3:
            for b in a:
                visit(b, depth + 1)

    visit(args, 0)
    return sorted(found.values())


_FREE_LOGS: list = []          # log tables of finished launches, reused: fresh pages cost more than the logging
_FREE_LOCK = threading.Lock()


def _take_logs(n: int, width: int) -> np.ndarray:
    with _FREE_LOCK:
        for k, logs in enumerate(_FREE_LOGS):
            if logs.shape[1] == width and logs.shape[0] >= n:
                return _FREE_LOGS.pop(k)      # rows past n stay unused
    return np.empty((n, width), dtype=np.int64)


def _give_logs(logs: np.ndarray) -> None:
    with _FREE_LOCK:
        if len(_FREE_LOGS) < 4:
            _FREE_LOGS.append(logs)


class CrossCore:
    """The cross-core checks of one checked launch; see the module docstring. `states`: the cores' state rows;
    `mode`: the launch's mode bits; `waivers`: the kernel's waivers (cross-core RaceWaivers and OverlapWaivers
    are used here); `tensors`: gm_tensors(); `where`: op / tiling_key for the errors."""

    def __init__(self, states: np.ndarray, mode: int, waivers, tensors, where: dict, rows: int = LOG_ROWS):
        self.states = states
        self.mode = mode
        self.race_waivers = [w for w in waivers if isinstance(w, RaceWaiver) and w.cross_core]
        self.overlap_waivers = [w for w in waivers if isinstance(w, OverlapWaiver)]
        self.tensors = tensors
        self.where = where
        n = len(states)
        self.logs = _take_logs(n, rows * GLOG_COLS)
        states[:, CHK_GLOG] = self.logs.ctypes.data + np.arange(n, dtype=np.int64) * (rows * GLOG_COLS * 8)
        states[:, CHK_GLOG_CAP] = rows
        states[:, CHK_GLOG_N] = 0
        states[:, CHK_GLOG_LOST] = 0
        self.phase = 0
        self.waived = 0
        self.writes = []        # per phase: (core, call id, first, end, code) of plain writes folded per (core, call)

    # --- naming -----------------------------------------------------------------------------------
    def _place(self, lo: int, hi: int):
        """(tensor name, first, end) of the host address range, relative to its tensor (None if unknown)."""
        for start, end, name in self.tensors:
            if start <= lo < end:
                return name, lo - start, min(hi, end) - start
        return None, lo, hi

    def _bytes(self, lo: int, hi: int) -> str:
        name, a, b = self._place(lo, hi)
        return f"bytes [{a}, {b}) of '{name}'" if name is not None else f"GM bytes at 0x{lo:x} (+{hi - lo})"

    # --- per phase --------------------------------------------------------------------------------
    def _rows(self):
        """This phase's log rows of every core: core, first, end, code, pipe, kind; the logs are emptied."""
        ns = self.states[:, CHK_GLOG_N].astype(np.int64)
        self.states[:, CHK_GLOG_N] = 0
        if not ns.any():
            return None
        table = np.concatenate([self.logs[i, :k * GLOG_COLS].reshape(k, GLOG_COLS) for i, k in enumerate(ns) if k])
        core = np.repeat(np.arange(len(ns), dtype=np.int64), ns)
        return core, table[:, 0], table[:, 1], table[:, 2], table[:, 3] & 15, table[:, 3] >> 4

    def phase_end(self) -> None:
        """A SyncAll (or the end of the launch): check this phase's accesses of all cores against each other and
        keep its plain writes for the overlap check. Raises PipeRaceError for an unwaived cross-core race."""
        rows = self._rows()
        self.phase += 1
        if rows is None:
            return
        core, s, e, code, pipe, kind = rows
        written = kind != GLOG_READ
        if written.any() and (core != core[0]).any():
            # only rows that touch bytes some core wrote or updated can conflict: reads of inputs nobody writes
            # (most of a kernel's reads) drop out before the per-core folding
            _, ws, we = _fold(np.zeros(int(written.sum()), dtype=np.int64), s[written], e[written])
            k = np.maximum(np.searchsorted(ws, e, side="left") - 1, 0)
            near = (ws[k] < e) & (we[k] > s)
            if near.any() and (core[near] != core[near][0]).any():
                self._races(core[near], s[near], e[near], code[near], pipe[near], kind[near])
        w = kind == GLOG_WRITE
        if w.any():
            key, fs, fe, fc = _fold(core[w] * 64 + code[w] % 64, s[w], e[w], code[w])
            self.writes.append((key >> 6, key & 63, fs, fe, fc))

    def _races(self, core, s, e, code, pipe, kind) -> None:
        fam = {}
        for name, sel in (("U", None), ("W", kind == GLOG_WRITE), ("A", kind == GLOG_ATOMIC),
                          ("R", kind == GLOG_READ)):
            fam[name] = _fold(core, s, e) if sel is None else _fold(core[sel], s[sel], e[sel])
        points = _uniq(np.concatenate([fam["U"][1], fam["U"][2]]))
        n = {name: _cover(points, f[1], f[2]) for name, f in fam.items()}
        bad = (n["U"] >= 2) & ((n["W"] >= 1) | ((n["A"] >= 1) & (n["R"] >= 1)))
        if not bad.any():
            return
        # the rows folded per (core, pipe, kind, call id): few enough to compare pairwise inside a stretch
        key = ((core * 4 + pipe) * 4 + kind) * 64 + code % 64
        gk, gs, ge, gc = _fold(key, s, e, code)
        groups = (gk >> 10, gs, ge, gc, (gk >> 8) & 3, (gk >> 6) & 3)
        for lo, hi in _stretches(bad, points):
            self._name_race(lo, hi, *groups)

    def _name_race(self, lo, hi, core, s, e, code, pipe, kind) -> None:
        """The conflicting pairs of (folded) rows in [lo, hi): raise for the first unwaived one, count waived
        ones."""
        m = np.flatnonzero((s < hi) & (e > lo))
        c, a, b, k, cd, p = core[m], np.maximum(s[m], lo), np.minimum(e[m], hi), kind[m], code[m], pipe[m]
        wi, ai, ri = k == GLOG_WRITE, k == GLOG_ATOMIC, k == GLOG_READ
        call = cd % 64
        waived_any = False
        for ii, jj in _pairs(c, a, b):
            sel = wi[ii] | wi[jj] | (ai[ii] & ri[jj]) | (ri[ii] & ai[jj])
            ii, jj = ii[sel], jj[sel]
            waived = np.zeros(len(ii), dtype=bool)
            for w in self.race_waivers:
                fp, fc, sp, sc = w.codes()
                waived |= (p[ii] == fp) & (call[ii] == fc) & (p[jj] == sp) & (call[jj] == sc)
                waived |= (p[jj] == fp) & (call[jj] == fc) & (p[ii] == sp) & (call[ii] == sc)
            waived_any |= bool(waived.any())
            bad = np.flatnonzero(~waived)
            if len(bad):
                i, j = int(ii[bad[0]]), int(jj[bad[0]])
                if c[i] > c[j] or (k[i] == GLOG_READ and k[j] != GLOG_READ):
                    i, j = j, i
                raise self._race_error(lo, hi, (c[i], cd[i], p[i], k[i]), (c[j], cd[j], p[j], k[j]),
                                       max(a[i], a[j]), min(b[i], b[j]))
        self.waived += waived_any

    def _race_error(self, lo, hi, one, two, first_byte, end_byte) -> PipeRaceError:
        verbs = {GLOG_READ: "reads", GLOG_WRITE: "writes", GLOG_ATOMIC: "atomically updates"}
        kinds = (one[3] != GLOG_READ, two[3] != GLOG_READ)
        kind = "WAW" if all(kinds) else "RAW"
        first, second = ({"core": int(x[0]), "call_index": int(x[1] // 64),
                          "call": CALL_NAMES.get(int(x[1] % 64), f"call {x[1] % 64}"), "pipe": _PIPES[int(x[2])]}
                         for x in (one, two))
        name, t0, t1 = self._place(int(first_byte), int(end_byte))
        summary = (f"cross-core {kind} race on {self._bytes(int(first_byte), int(end_byte))}: core {first['core']} "
                   f"{first['call']} (call #{first['call_index']}) {verbs[int(one[3])]} them and core "
                   f"{second['core']} {second['call']} (call #{second['call_index']}) {verbs[int(two[3])]} them "
                   f"in the same SyncAll phase (#{self.phase}); nothing orders two cores but SyncAll() (add one "
                   "between them, give each core its own bytes, or make both updates atomic)")
        err = PipeRaceError(summary, kind=kind, memory="GM", byte_range=(int(first_byte), int(end_byte)),
                            first=first, second=second, core=second["core"],
                            call=f"{second['call']} (call #{second['call_index']})", **self.where)
        err.tensor, err.tensor_bytes = name, (t0, t1)
        return err

    # --- the end of the launch ---------------------------------------------------------------------
    def finish(self) -> dict:
        """The last phase's check, then the overlapping writes of the launch. Returns the report's extra entries;
        raises OverlapError in mode "all" for an unwaived overlap."""
        self.phase_end()
        _give_logs(self.logs)
        lost = int(self.states[:, CHK_GLOG_LOST].sum())
        listed, total, first_bad = self._overlaps()
        extra = dict(waived_cross_core=self.waived, overlapping_writes=listed, overlapping_write_bytes=total)
        if lost:
            extra["gm_log_lost"] = lost
        if first_bad is not None and self.mode & CHECK_OVERLAP:
            raise first_bad
        return extra

    def _overlaps(self):
        """(the listed overlaps, their total bytes, the first unwaived one's error or None). One entry per pair of
        (core, call) that write common bytes, at the first bytes they share, in address order. All pairs of
        intervals of different cores that meet come from one sweep (_pairs over every write of the launch): a
        scatter whose elements land in another core's fill meets it thousands of times, and a loop over the
        doubly covered stretches cost more than the kernel."""
        if not self.writes:
            return [], 0, None
        core, call, s, e, code = (np.concatenate(col) for col in zip(*self.writes, strict=True))
        _, fs, fe = _fold(core, s, e)
        points = _uniq(np.concatenate([fs, fe]))
        two = _cover(points, fs, fe) >= 2
        total = int(np.diff(points)[two[:-1]].sum())
        if not total:
            return [], 0, None
        found = list(_pairs(core, s, e))
        ii, jj = (np.concatenate(col) for col in zip(*found, strict=True))
        swap = core[ii] > core[jj]
        ii, jj = np.where(swap, jj, ii), np.where(swap, ii, jj)
        a, b = np.maximum(s[ii], s[jj]), np.minimum(e[ii], e[jj])
        ci, cj, li, lj = core[ii], core[jj], call[ii], call[jj]
        order = np.lexsort((lj, cj, li, ci, a))                 # by first shared byte, then cores and calls
        key = ((ci * 64 + li) * (int(core.max()) + 1) + cj) * 64 + lj
        _, first = np.unique(key[order], return_index=True)
        listed, first_bad = [], None
        for f in order[np.sort(first)].tolist():
            i, j = int(ii[f]), int(jj[f])
            pair = (int(core[i]), int(core[j]), int(call[i]), int(call[j]))
            waived = any(w.covers(pair[2], pair[3]) for w in self.overlap_waivers)
            name, t0, t1 = self._place(int(a[f]), int(b[f]))
            entry = dict(tensor=name, bytes=(int(t0), int(t1)), cores=pair[:2],
                         calls=(CALL_NAMES.get(pair[2], ""), CALL_NAMES.get(pair[3], "")),
                         call_index=(int(code[i] // 64), int(code[j] // 64)), waived=waived)
            if len(listed) < MAX_LISTED:
                listed.append(entry)
            if not waived and first_bad is None:
                first_bad = self._overlap_error(entry, int(a[f]), int(b[f]))
            if len(listed) >= MAX_LISTED and first_bad is not None:
                break
        return listed, total, first_bad

    def _overlap_error(self, entry, lo, hi) -> OverlapError:
        (ca, cb), (na, nb), (ia, ib) = entry["cores"], entry["calls"], entry["call_index"]
        first = dict(core=ca, call_index=ia, call=na)
        second = dict(core=cb, call_index=ib, call=nb)
        summary = (f"overlapping writes to {self._bytes(lo, hi)}: core {ca} {na} (call #{ia}) and core {cb} {nb} "
                   f"(call #{ib}) both write them in one launch (SyncAll or not, the later write replaces the "
                   "earlier, msSanitizer's multi-core corruption); give each core its own bytes, use atomic "
                   "updates, or declare it with OverlapWaiver if the real kernel does it")
        return OverlapError(summary, tensor=entry["tensor"], byte_range=entry["bytes"], first=first, second=second,
                            core=cb, call=f"{nb} (call #{ib})", **self.where)
