"""Processes sharing numba's disk cache compile a function and signature once between them
(ascend_sim._cache_lock): the second waits for the first, then loads its entry.

Each process imports ascend_sim (which installs the locks), defines the same cached functions in a module of a
private directory, waits for a common start instant and compiles them; each reports how many compilations it
ran (numba's compile events) and the results. The cache directory is private to the test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MODULE = textwrap.dedent('''
    import numpy as np
    from numba import cfunc, njit, types

    @njit(cache=True)
    def poly(x):
        s = 0.0
        for k in range(x.size):
            s += x[k] * x[k] - 3.0 * x[k] + np.sqrt(abs(x[k]))
        return s

    @cfunc(types.float64(types.float64), cache=True)
    def twice(x):
        return 2.0 * x
''')

RUNNER = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    import ascend_sim  # noqa: F401  (installs the compile locks)
    from numba.core import event
    compiles = []
    class Count(event.Listener):
        def on_start(self, ev):
            pass
        def on_end(self, ev):
            compiles.append(ev.data["dispatcher"].py_func.__name__)
    event.register("numba:compile", Count())
    start = float(sys.argv[1])
    while time.time() < start:
        time.sleep(0.001)
    import lockmod
    s = lockmod.poly(np.arange(8, dtype=np.float64))       # compiles (or loads) poly for float64 arrays
    s32 = lockmod.poly(np.arange(8, dtype=np.float32))     # a second signature of the same function
    print(json.dumps({"compiles": compiles, "cfunc_hits": lockmod.twice._cache_hits,
                      "poly_hits": sum(lockmod.poly._cache_hits.values()), "s": s, "s32": s32,
                      "twice": lockmod.twice.ctypes(4.0)}))
''')


def test_two_processes_compile_each_signature_once(tmp_path):
    (tmp_path / "lockmod.py").write_text(MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]),
               NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    start = time.time() + 8.0           # after both interpreters have imported numba and ascend_sim
    procs = [subprocess.Popen([sys.executable, "-c", RUNNER, str(start)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["s"] for o in outs] == [outs[0]["s"]] * 2 and outs[0]["twice"] == 8.0
    # two signatures of poly and the cfunc: each compiled by one process and loaded from disk by the other
    assert sorted(name for o in outs for name in o["compiles"]) == ["poly", "poly"]
    assert sum(o["poly_hits"] for o in outs) == 2
    assert sum(o["cfunc_hits"] for o in outs) == 1
    index = tmp_path / "cache"
    assert len(list(index.rglob("*.nbc"))) == 3      # no entry lost or overwritten by a concurrent save
