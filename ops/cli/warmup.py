"""`ascend-sim warmup`: compile ahead of use the kernel stages the quick tour and the operators' demo cases run,
for the chosen operators and chips, in N processes, with a progress bar and an ETA on stderr.

numba keeps what it compiles in its disk cache, so every later process (a demo, a `run`, a friendly call with
the same dtypes and modes) loads the stages in well under a second instead of compiling them. The work comes in
the demo's compile tickets (one per stage function, all its signatures together: two processes saving entries of
one function into numba's cache index could drop one); N forked processes take them from one shared counter.
Then the tour's small cases run once here, so the host steps numba compiles too (casts, roundings) are cached.
"""
from __future__ import annotations

import os
import sys
import time

from ascend_sim import cache_state, ensure_compiled, stage_signature
from tiling import get_soc

from .common import CliError, positive, print_json
from .demo import _compile_tickets, _prepared_executors, demo_cases, tour_cases
from .operators import OPS, op_spec

DEFAULT_SOCS = ("ascend910b", "ascend950")
WORKER_TIMEOUT_S = 1800


def add_parser(sub) -> None:
    p = sub.add_parser("warmup", help="compile the kernels ahead of use (the demo's and the tour's stages), with a "
                                      "progress bar; later runs load them from numba's disk cache")
    p.add_argument("--op", action="append", metavar="OP", help=f"an operator to warm up (repeatable; default: "
                   f"all): {', '.join(OPS)}")
    p.add_argument("--soc", action="append", metavar="S",
                   help="a chip to warm up for (repeatable; default: ascend910b and ascend950): ascend910b, "
                        "ascend910_93, ascend950 (or 910b, 910_93, 950)")
    p.add_argument("--jobs", type=positive, default=2, metavar="N", help="compiling processes (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the closing line")


def selected_cases(op_names, soc_names) -> tuple[list, list]:
    """(tour cases, demo cases) of these operators whose chip is one of these (a case pinned to the 950 counts
    for the 950 only)."""
    socs = [get_soc(s) for s in soc_names]
    wanted = {s.name for s in socs}
    tour: list = []
    demo: list = []
    seen: set = set()
    for soc in socs:
        for out, cases in ((tour, [t.case for t in tour_cases(soc)]), (demo, demo_cases(soc, values=False))):
            for case in cases:
                key = (case.op, case.label, case.soc.name, case.shape)
                if case.op in op_names and case.soc.name in wanted and key not in seen:
                    seen.add(key)
                    out.append(case)
    return tour, demo


def cold_tickets(executors) -> list[list]:
    """The compile tickets of these executors with the signatures numba's disk cache does not hold yet."""
    out = []
    for ticket in _compile_tickets(executors):
        left = [(stage, args) for stage, args in ticket if cache_state(stage, stage_signature(stage, args)) == "cold"]
        if left:
            out.append(left)
    return out


def cache_location() -> tuple[str, list[str]]:
    """Where numba keeps the compiled kernels: (what to tell the user, the directories to measure)."""
    from numba.core import config
    # numba's config sets its attributes from the environment at import: mypy sees none of them
    cache_dir = config.CACHE_DIR  # type: ignore[attr-defined]
    if cache_dir:
        return cache_dir, [cache_dir]
    import ascend_sim
    import ops
    import tiling
    roots = [os.path.dirname(path) for path in (ascend_sim.__file__, ops.__file__, tiling.__file__) if path]
    return "__pycache__ beside the sources in " + ", ".join(roots), roots


def cache_bytes(roots) -> tuple[int, int]:
    """(bytes, files) of numba's cache files (*.nbi index, *.nbc code) under these directories."""
    total = files = 0
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                if name.endswith((".nbi", ".nbc")):
                    try:
                        total += os.path.getsize(os.path.join(folder, name))
                        files += 1
                    except OSError:
                        pass
    return total, files


class Bar:
    """A one-line progress bar with an ETA on stderr (redrawn in place on a terminal, a line per step else)."""

    def __init__(self, total: int, first_guess_s: float):
        self.total, self.guess, self.start = total, first_guess_s, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def draw(self, done: int, final: bool = False) -> None:
        took = time.perf_counter() - self.start
        left = (took / done * (self.total - done)) if done else max(self.guess - took, 0.0)
        filled = int(30 * done / max(self.total, 1))
        line = f"  [{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} stage functions, {took:.0f} s" + \
            ("" if final else f", about {left:.0f} s left")
        print(("\r" if self.tty else "") + line, end="\n" if final or not self.tty else "", file=sys.stderr,
              flush=True)


def _worker(tickets, counter, done) -> None:
    try:
        while True:
            with counter.get_lock():
                k = counter.value
                counter.value += 1
            if k >= len(tickets):
                return
            ensure_compiled(tickets[k])
            with done.get_lock():
                done.value += 1
    except BaseException:       # noqa: BLE001 - the parent compiles whatever is left; never a traceback here
        os._exit(1)


def compile_tickets(tickets, jobs: int) -> None:
    """Compile every ticket in `jobs` forked processes (here when fork is unavailable or jobs is 1), drawing the
    bar; what a failed process left is compiled here at the end."""
    from .common import SECONDS_PER_COLD_MODULE, SECONDS_PER_COLD_STAGE
    modules = {stage.py_func.__module__ for t in tickets for stage, _ in t}
    guess = (len(modules) * SECONDS_PER_COLD_MODULE + sum(len(t) for t in tickets) * SECONDS_PER_COLD_STAGE) / \
        max(min(jobs, len(tickets)), 1)
    bar = Bar(len(tickets), guess)
    bar.draw(0)
    import multiprocessing
    try:
        ctx = multiprocessing.get_context("fork") if jobs > 1 else None
    except ValueError:
        ctx = None
    if ctx is None:
        for k, ticket in enumerate(tickets):
            ensure_compiled(ticket)
            bar.draw(k + 1, final=k + 1 == len(tickets))
        return
    counter, done = ctx.Value("i", 0), ctx.Value("i", 0)
    workers = [ctx.Process(target=_worker, args=(tickets, counter, done), daemon=True)
               for _ in range(min(jobs, len(tickets)))]
    for w in workers:
        w.start()
    shown = 0
    deadline = time.perf_counter() + WORKER_TIMEOUT_S
    while any(w.is_alive() for w in workers) and time.perf_counter() < deadline:
        time.sleep(0.5)
        if (done.value != shown or sys.stderr.isatty()) and done.value < len(tickets):
            shown = done.value
            bar.draw(shown)
    for w in workers:
        if w.is_alive():        # never seen; what it held compiles here below
            w.terminate()
        w.join()
    for ticket in tickets:      # a ticket a failed or stopped process left: loaded from disk if it got saved
        ensure_compiled(ticket)
    bar.draw(len(tickets), final=True)


def _warm_host_steps(cases) -> None:
    """Run the tour's small cases once, checked: the host steps and golden helpers numba compiles on first use get
    cached too."""
    from .common import run_op
    for case in cases:
        try:
            run_op(OPS[case.op], case.args, case.soc)     # the golden check too: it has jitted helpers
        except Exception:   # noqa: BLE001 - a case the chip refuses says so in the demo, not here
            pass


def command(a) -> int:
    op_names = [op_spec(name).name for name in (a.op or OPS)]
    soc_names = a.soc or list(DEFAULT_SOCS)
    try:
        socs = [get_soc(s).name for s in soc_names]
    except Exception as e:  # noqa: BLE001 - an unknown chip name is a flag error
        raise CliError(str(e).splitlines()[0]) from None
    start = time.perf_counter()
    tour, demo = selected_cases(set(op_names), socs)
    cases = tour + demo
    if not cases:
        raise CliError(f"no demo case of {', '.join(op_names)} runs on {', '.join(socs)}")
    executors = list(_prepared_executors(cases).values())
    tickets = cold_tickets(executors)
    where, roots = cache_location()
    signatures = sum(len(t) for t in tickets)
    if tickets:
        print(f"Compiling {signatures} kernel stage signatures ({len(tickets)} stage functions) of "
              f"{len(set(op_names))} operator(s) on {', '.join(socs)} in {min(a.jobs, len(tickets))} process(es); "
              "each is compiled once and cached on disk.", file=sys.stderr, flush=True)
        compile_tickets(tickets, a.jobs)
    else:
        print(f"Every kernel stage of {len(set(op_names))} operator(s) on {', '.join(socs)} is in the cache already.",
              file=sys.stderr, flush=True)
    _warm_host_steps(tour)
    size, files = cache_bytes(roots)
    if a.json:
        print_json(dict(operators=list(dict.fromkeys(op_names)), socs=list(socs), cases=len(cases),
                        compiled=dict(signatures=signatures, stage_functions=len(tickets),
                                      processes=min(a.jobs, len(tickets))),
                        seconds=time.perf_counter() - start, cache=dict(where=where, bytes=size, files=files)))
        return 0
    print(f"warm in {time.perf_counter() - start:.1f} s: {len(cases)} cases of {len(set(op_names))} operator(s) on "
          f"{', '.join(socs)}; numba's cache: {where} ({size / 2**20:.1f} MiB in {files} files)")
    return 0
