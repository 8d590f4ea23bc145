"""Per-call traces of the timeline, and their Chrome / Perfetto JSON (the occupancy plot: occupancy.py).

Tracing is asked for around the calls to trace:

    with ascend_sim.trace.tracing(cores=(0, 1), max_events=200_000) as request:
        ops.moe_token_unpermute(...)
    ascend_sim.trace.write_json(request.runs, "out.json")

Every launch inside the block (on this thread: the request is a context variable) gives the
selected cores a trace buffer; together the launches keep at most `max_events` calls in all, what is
left shared evenly by the traced cores of each launch (with fewer calls left than cores, the first ones). Calls past a
core's share are counted, not kept, and the JSON says how many were left out. Without a request no core has a buffer and
the timeline writes nothing but its clocks.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError, whole_number
from .layout import (
    CALL_NAMES,
    CALL_TRACE_ARGS,
    HARD_EVENT_NAMES,
    PIPE_NAMES,
    TRACE_L2_SHIFT,
)
from .occupancy import plot_occupancy  # noqa: F401   (the occupancy plot: occupancy.py)

DEFAULT_MAX_EVENTS = 1_000_000
MAX_EVENTS_LIMIT = 50_000_000


@dataclass(frozen=True)
class CoreTrace:
    """One traced block: its rows (see layout.TRACE_COLS) and how many calls it made in all (`offered`)."""
    block_idx: int
    rows: np.ndarray
    offered: int

    @property
    def dropped(self) -> int:
        return self.offered - len(self.rows)


@dataclass(frozen=True)
class KernelTrace:
    """The traced blocks of one launch, and the cycles at which its SyncAll() barriers released the cores."""
    cores: tuple[CoreTrace, ...]
    sync_marks: tuple[int, ...] = ()

    @property
    def dropped(self) -> int:
        return sum(c.dropped for c in self.cores)

    @property
    def events(self) -> int:
        return sum(len(c.rows) for c in self.cores)


@dataclass
class TraceRequest:
    """What `tracing` asked for, and the RunReports of the launches it traced (in order)."""
    cores: tuple[int, ...] | None
    max_events: int
    remaining: int
    runs: list = field(default_factory=list)

    def rows_for(self, block_dim: int) -> dict[int, int]:
        """Trace rows for each traced block of a launch of `block_dim` blocks: what is left of `max_events`,
        split evenly (the lower blocks take the remainder), never more in total. With fewer rows left than
        traced blocks the higher blocks get none and are not traced."""
        chosen = [b for b in (range(block_dim) if self.cores is None else self.cores) if 0 <= b < block_dim]
        if not chosen or self.remaining <= 0:
            return {}
        share, extra = divmod(self.remaining, len(chosen))
        rows = {b: share + (k < extra) for k, b in enumerate(chosen)}
        return {b: n for b, n in rows.items() if n > 0}

    def took(self, report) -> None:
        """Book a traced launch."""
        if report.trace is not None:
            self.remaining -= report.trace.events
            self.runs.append(report)


_REQUEST: ContextVar[TraceRequest | None] = ContextVar("ascend_sim_trace_request", default=None)


def current_request() -> TraceRequest | None:
    return _REQUEST.get()


@contextmanager
def tracing(cores=None, max_events: int = DEFAULT_MAX_EVENTS):
    """Trace the launches made inside the block (this thread only). `cores`: block indices to trace
    (default all); `max_events`: calls kept over all launches. Yields the TraceRequest (`.runs`)."""
    max_events = whole_number("max_events", max_events, 1, MAX_EVENTS_LIMIT, "events")
    if cores is not None:
        if isinstance(cores, (str, bytes)) or not hasattr(cores, "__iter__") or getattr(cores, "ndim", 1) != 1:
            raise ConfigError(f"cores must be a sequence of block indices (e.g. (0, 1)) or None for all, got "
                              f"{cores!r} ({type(cores).__name__})", setting="cores")
        cores = tuple(whole_number("cores", c, 0, 1 << 20, "block index") for c in cores)
        if not cores:
            raise ConfigError("cores: give at least one block index to trace, or None for all", setting="cores")
    request = TraceRequest(cores, max_events, max_events)
    token = _REQUEST.set(request)
    try:
        yield request
    finally:
        _REQUEST.reset(token)


def _args(call: int, a0: int, a1: int, number: int) -> str:
    """A trace row's arguments as JSON, named as the call's declaration (layout._call) names them."""
    names = CALL_TRACE_ARGS.get(call, ("repeats",))
    if names == ("bytes", "rows"):       # a DMA: its second word also carries the bytes that hit in L2
        rows, l2_hits = a1 & ((1 << TRACE_L2_SHIFT) - 1), a1 >> TRACE_L2_SHIFT
        extra = f'"bytes":{a0},"rows":{rows}' + (f',"l2_hit_bytes":{l2_hits}' if l2_hits else "")
    elif names == ("event", "id"):
        name = HARD_EVENT_NAMES[a0] if 0 <= a0 < len(HARD_EVENT_NAMES) else a0
        extra = f'"event":"{name}","id":{a1}'
    elif names == ("pipe",):
        extra = f'"pipe":"{PIPE_NAMES[a0] if 0 <= a0 < 4 else "ALL"}"'
    else:
        extra = ",".join(f'"{name}":{word}' for name, word in zip(names, (a0, a1), strict=False))
    return f'{{"call":{number},{extra}}}'


def write_json(runs, path, *, note: str = "") -> dict:
    """Write the traces of `runs` (RunReports with a trace, in launch order) as a Chrome / Perfetto JSON object:
    one process per block, one thread per pipe, one slice per call, flow arrows from each SetFlag / EnQue /
    FreeTensor to the call that waited for it, SyncAll() marks. Launches follow each other in time. Returns a
    summary: events written, calls left out, kernels."""
    traced = [r for r in runs if r.trace is not None]
    offset_us = 0.0
    events = flows = dropped = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        first = True

        def put(text: str) -> None:
            nonlocal first
            f.write(text if first else ",\n" + text)
            first = False

        named = set()
        for k, run in enumerate(traced):
            cost = run.estimate.cost
            to_us = 1.0 / cost.clock_mhz
            label = f"{run.op} / {run.kernel} (tilingKey {run.tiling_key})"
            put(json.dumps({"name": label, "ph": "i", "s": "g", "ts": round(offset_us, 6), "pid": 0, "tid": 0,
                            "args": {"block_dim": run.block_dim, "soc": run.soc,
                                     "estimate_us": round(run.estimate.time_us, 3)}}))
            for ct in run.trace.cores:
                pid = ct.block_idx
                if pid not in named:
                    named.add(pid)
                    put(json.dumps({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"core {pid}"}}))
                    put(json.dumps({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}))
                    for tid, pipe in enumerate(PIPE_NAMES):
                        put(json.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                                        "args": {"name": pipe}}))
                rows = ct.rows
                # the row of the call each waiting call waited for (-1: none, or not in the trace)
                setter = np.full(len(rows), -1, dtype=np.int64)
                waiting = np.nonzero(rows[:, 7] >= 0)[0]
                at = np.searchsorted(rows[:, 0], rows[waiting, 7])
                hit = at < len(rows)
                hit[hit] = rows[at[hit], 0] == rows[waiting[hit], 7]
                setter[waiting[hit]] = at[hit]
                for first_row in range(0, len(rows), _CHUNK_ROWS):
                    flows += _write_rows(put, rows, setter, first_row, k, pid, offset_us, to_us)
                events += len(rows)
                dropped += ct.dropped
            for n, mark in enumerate(run.trace.sync_marks, 1):
                put(json.dumps({"name": f"SyncAll #{n}", "ph": "i", "s": "g", "ts": round(offset_us + mark * to_us, 6),
                                "pid": 0, "tid": 0}))
            offset_us += run.estimate.time_us
        summary = {"events": events, "flows": flows, "dropped_calls": dropped, "kernels": len(traced)}
        if note or dropped:
            summary["note"] = (note + " " if note else "") + (
                f"{dropped:,d} calls were left out (trace budget or core selection)" if dropped else "")
        f.write('\n],"otherData":' + json.dumps(summary) + "}\n")
    return summary


_CHUNK_ROWS = 65536     # rows turned into Python values at a time: bounds the writer's memory


def _write_rows(put, rows, setter, first_row, kernel, pid, offset_us, to_us) -> int:
    """Slices (and flow arrows) of rows[first_row : first_row + _CHUNK_ROWS]; returns the flows written."""
    flows = 0
    batch = []
    for r, (number, call, pipe, start, end, a0, a1, _) in enumerate(rows[first_row:first_row + _CHUNK_ROWS].tolist(),
                                                                   first_row):
        ts = offset_us + start * to_us
        dur = (end - start) * to_us
        batch.append(f'{{"name":"{CALL_NAMES.get(call) or f"call {call}"}","cat":"{PIPE_NAMES[pipe]}","ph":"X",'
                     f'"ts":{ts:.6f},"dur":{dur:.6f},"pid":{pid},"tid":{pipe},"args":{_args(call, a0, a1, number)}}}')
        j = setter[r]
        if j >= 0:
            src_number, _, src_pipe, src_start = (int(v) for v in rows[j, :4])
            fid = f"{kernel}.{pid}.{src_number}"
            batch.append(f'{{"name":"event","cat":"sync","ph":"s","id":"{fid}","pid":{pid},"tid":{src_pipe},'
                         f'"ts":{offset_us + src_start * to_us:.6f}}}')
            batch.append(f'{{"name":"event","cat":"sync","ph":"f","bp":"e","id":"{fid}","pid":{pid},"tid":{pipe},'
                         f'"ts":{ts + dur:.6f}}}')
            flows += 1
    if batch:
        put(",\n".join(batch))
    return flows
