"""First-run cost: a fresh process with an empty numba cache directory runs one small friendly call, or the quick
tour (`ascend-sim demo`), in the default tier "auto" (its cold kernels run interpreted while a background process
compiles them), then, once that background compile is done, the same with the cache warm (compiled kernels);
beside them, the same process doing only `import numpy` (the floor of any Python start), all in this run.
Subprocesses, so nothing this process compiled counts. extra_info also holds the functions compiled (numba cache
index files written, background included) and the import times of numpy, ml_dtypes, numba and `ops, tiling`.
No timing assertions: the numbers are the result.
The summary prints seconds and the ratios to the numpy-only start.

Marked slow: three cold compilations in subprocesses take about four minutes of a 2-core machine, which CI's
10-minute budget has no room for; `pytest tests/benchmarks -o addopts= --benchmark-only -m slow` runs them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import COLD

REPO = Path(__file__).resolve().parents[2]
CASES = {
    # the one-core sort and the index copy: what `import ops; ops.moe_token_permute(...)` compiles, nothing else
    "permute 16x64 topK 2": (
        "import numpy as np, ml_dtypes, ops\n"
        "x = np.ones((16, 64), dtype=ml_dtypes.bfloat16)\n"
        "idx = (np.arange(32, dtype=np.int32) % 8).reshape(16, 2)\n"
        "ops.moe_token_permute(x, idx, soc='ascend910b')\n"),
    # a kernel-G operator: the machine model's common variants and one stage (about a minute cold on 2 cores)
    "unpermute 8x64 topK 2": (
        "import numpy as np, ml_dtypes, ops\n"
        "x = np.ones((16, 64), dtype=ml_dtypes.bfloat16); s = np.arange(16, dtype=np.int32)\n"
        "p = np.full((8, 2), 0.5, dtype=ml_dtypes.bfloat16)\n"
        "ops.moe_token_unpermute(x, s, p)\n"),
}
TOUR = "quick tour (ascend-sim demo)"
COMMANDS = {TOUR: ["-m", "ops.cli", "demo"]}
BASELINE = "import numpy\n"
IMPORTS = ("numpy", "ml_dtypes", "numba", "ops, tiling")


def _argv(case: str) -> list[str]:
    return COMMANDS[case] if case in COMMANDS else ["-c", CASES[case]]


def _env(cache: str) -> dict:
    # the suite pins tier "compiled" without background compiles (tests/conftest.py); a user's process has neither
    return dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(REPO), ASCEND_SIM_TIER="auto",
                ASCEND_SIM_BACKGROUND_COMPILE="1")


def _wait_for_background(cache: str) -> float:
    """Seconds until the background compile the cold run left is done."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "import ascend_sim.background as b; print(b.wait(1800))"],
                         cwd=REPO, env=_env(cache), capture_output=True, text=True, timeout=1900)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    return time.perf_counter() - start


def _run(code, cache: str) -> float:
    """Seconds of one fresh process running `code` (source text, or an argv list for the interpreter)."""
    env = _env(cache)
    env.pop("ASCEND_SIM_CHECK", None)
    argv = code if isinstance(code, list) else ["-c", code]
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=1800)
    took = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-2000:]
    return took


def _import_seconds(module: str, cache: str) -> float:
    """Median of three fresh processes timing `import <module>` in the process (interpreter start left out)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = _env(cache)
    runs = [float(subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=300, check=True).stdout) for _ in range(3)]
    return sorted(runs)[1]


@pytest.mark.slow
@pytest.mark.parametrize("case", [*CASES, TOUR])
def test_cold_then_warm_start(case, benchmark):
    cache = tempfile.mkdtemp(prefix="ascend-sim-cold-")
    try:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        cold = _run(_argv(case), cache)
        background = _wait_for_background(cache)
        compiled = sum(1 for _ in Path(cache).rglob("*.nbi"))
        warm = sorted(_run(_argv(case), cache) for _ in range(3))[1]
        floor = sorted(_run(BASELINE, cache) for _ in range(3))[1]
        imports = {m: round(_import_seconds(m, cache), 3) for m in IMPORTS}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    benchmark.extra_info.update(cold_s=round(cold, 2), warm_s=round(warm, 2), numpy_import_s=round(floor, 3),
                                background_compile_after_s=round(background, 1),
                                functions_compiled=compiled, load_average=load,
                                import_s={m.replace(", ", "+"): s for m, s in imports.items()})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)     # the numbers above are the measurement
    COLD[case] = dict(cold=cold, warm=warm, floor=floor)
