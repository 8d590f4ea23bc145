"""First-run cost: a fresh process with an empty numba cache directory runs one small friendly call (compiling what
it needs), then the same with the cache warm; beside them, the same process doing only
`import numpy` (the floor of any Python start), all in this run. Subprocesses, so nothing this process compiled
counts. The summary prints seconds and the ratios to the numpy-only start."""
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
    # a kernel-G operator: the machine model's common variants and one stage (about a minute cold on 2 cores)
    "unpermute 8x64 topK 2": (
        "import numpy as np, ml_dtypes, ops\n"
        "x = np.ones((16, 64), dtype=ml_dtypes.bfloat16); s = np.arange(16, dtype=np.int32)\n"
        "p = np.full((8, 2), 0.5, dtype=ml_dtypes.bfloat16)\n"
        "ops.moe_token_unpermute(x, s, p)\n"),
}
BASELINE = "import numpy\n"


def _run(code: str, cache: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(REPO))
    env.pop("ASCEND_SIM_CHECK", None)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=900)
    took = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-2000:]
    return took


@pytest.mark.parametrize("case", list(CASES))
def test_cold_then_warm_start(case, benchmark):
    cache = tempfile.mkdtemp(prefix="ascend-sim-cold-")
    try:
        cold = _run(CASES[case], cache)
        warm = sorted(_run(CASES[case], cache) for _ in range(3))[1]
        floor = sorted(_run(BASELINE, cache) for _ in range(3))[1]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    benchmark.extra_info.update(cold_s=round(cold, 2), warm_s=round(warm, 2), numpy_import_s=round(floor, 3))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)     # the numbers above are the measurement
    COLD[case] = dict(cold=cold, warm=warm, floor=floor)
