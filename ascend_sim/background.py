"""Compile kernel stages in a background process while this one interprets them (tier "auto", see tier.py).

The parent hands over (module, stage name, numba signature) triples in a job file; a child process
(`main([JOB])` of this module) at low priority imports each stage's module and compiles the stage for
that signature into numba's disk cache, outlined variants included, exactly as the launcher's ensure_compiled
would. One child per parent runs at a time; stages that arrive meanwhile wait for the next, and those left when
the parent exits go to a last child that outlives it (a short-lived command's first run still fills the cache).
Processes sharing the cache compile each function once between them (_cache_lock), so a child and a test
worker, or two children, never compile the same entry twice.

Job files live in `job_dir()` (beside the cache): `*.job` while waiting, renamed `*.running-<pid>` while a child
works on it, removed when done; `busy()` tells whether any is left, `wait()` waits for them (benchmarks measure a
warm run after the cold one's background compile is done). $ASCEND_SIM_BACKGROUND_COMPILE=0 turns it off.
"""
from __future__ import annotations

import atexit
import importlib
import itertools
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import ConfigError

_LOCK = threading.Lock()
_SUBMITTED: set = set()
_PENDING: list = []
_CHILD: subprocess.Popen | None = None
_SEQUENCE = itertools.count()
LOG_MAX_BYTES = 1 << 20         # background.log is moved to background.log.1 beyond this
CHILD_CODE = "import sys; from ascend_sim.background import main; sys.exit(main(sys.argv[1:]))"


_SWITCH = {"1": True, "on": True, "yes": True, "true": True, "0": False, "off": False, "no": False, "false": False}


def enabled() -> bool:
    """$ASCEND_SIM_BACKGROUND_COMPILE: whether tier "auto" compiles cold stages in a background process (default on;
    a value other than 1 / on / yes / true or 0 / off / no / false is a ConfigError)."""
    raw = os.environ.get("ASCEND_SIM_BACKGROUND_COMPILE", "1")
    value = _SWITCH.get(raw.strip().lower())
    if value is None:
        raise ConfigError(f"ASCEND_SIM_BACKGROUND_COMPILE = {raw!r}: expected 1 / on / yes or 0 / off / no")
    return value


def job_dir() -> Path:
    from ._jit import cache_root
    return cache_root() / "ascend_sim_background"


def submit(calls) -> None:
    """Queue (stage, signature) pairs for the background compiler (each once per process) and start it if idle."""
    if not enabled():
        return
    with _LOCK:
        for stage, sig in calls:
            body = getattr(stage, "stage_body", None) or stage.py_func     # a stage, or a host_jit helper
            key = (body.__module__, body.__name__, sig)
            if key not in _SUBMITTED:
                _SUBMITTED.add(key)
                _PENDING.append(key)
        _start_if_idle()


def _start_if_idle(force: bool = False) -> None:
    global _CHILD
    if not _PENDING or (not force and _CHILD is not None and _CHILD.poll() is None):
        return
    folder = job_dir()
    job = folder / f"{os.getpid()}-{next(_SEQUENCE)}-{time.time_ns()}.job"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log_path = folder / "background.log"
        if log_path.exists() and log_path.stat().st_size > LOG_MAX_BYTES:
            os.replace(log_path, log_path.with_suffix(".log.1"))
        tmp = job.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(list(_PENDING)))
        os.replace(tmp, job)
        with open(log_path, "ab") as log:      # the child writes to its own copy of the descriptor
            # not `-m`: runpy would run a second copy of this module if anything had imported it first
            _CHILD = subprocess.Popen([sys.executable, "-c", CHILD_CODE, str(job)],
                                      stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                      env=dict(os.environ, ASCEND_SIM_BACKGROUND_COMPILE="0"))
    except OSError:
        # a read-only cache location, or no process to be had: the stages compile on their first compiled run
        job.unlink(missing_ok=True)
        return
    _PENDING.clear()


@atexit.register
def _hand_over_the_rest() -> None:
    with _LOCK:
        _start_if_idle(force=True)


def busy() -> bool:
    """Whether a background compile (of any process sharing this cache) is waiting or running."""
    folder = job_dir()
    if not folder.is_dir():
        return False
    for path in folder.iterdir():
        if path.suffix == ".job":
            return True
        if ".running-" in path.name:
            try:
                os.kill(int(path.name.rsplit("-", 1)[1]), 0)
                return True
            except (OSError, ValueError):
                continue            # its child died: nothing will finish it
    return False


def wait(timeout_s: float = 1800.0, poll_s: float = 0.2) -> bool:
    """Wait until no background compile is waiting or running (True), or timeout_s passed (False)."""
    deadline = time.monotonic() + timeout_s
    while busy():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def _compile_job(job: Path) -> int:
    running = job.with_name(f"{job.stem}.running-{os.getpid()}")
    try:
        os.replace(job, running)
    except OSError:
        return 0
    failed = 0
    try:
        from ._jit import compile_signature
        for module, name, sig in pickle.loads(running.read_bytes()):
            try:
                compile_signature(getattr(importlib.import_module(module), name), sig)
            except Exception as e:  # noqa: BLE001 - one stage failing must not stop the others
                failed += 1
                print(f"ascend-sim background compile: {module}.{name}{sig}: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
    finally:
        running.unlink(missing_ok=True)
    return failed


def main(argv: list[str]) -> int:
    try:
        os.nice(10)         # the interpreting parent comes first
    except (AttributeError, OSError):
        pass
    return 1 if any(_compile_job(Path(p)) for p in argv) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
