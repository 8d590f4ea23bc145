"""The disk cache follows the sources: editing a machine-model file in a copy of the package recompiles the
kernels that depend on it (stage entries, and the outlined variants the stage calls by address) instead of
loading stale code.

The copy and its cache directory are private to the test; the runs are subprocesses, so nothing this process
compiled can answer for them. Marked slow: three cold-ish compiles of the ExampleAdd kernel.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _copy_package(dst: Path) -> None:
    for name in ("ascend_sim", "ops", "tiling"):
        shutil.copytree(REPO / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))


def _mte2_bytes(root: Path, cache: Path) -> dict:
    """Run ExampleAdd on 64 float32 elements in the copy at `root`: its MTE2 bytes and copies, and z[0], z[63]."""
    code = (
        "import json, numpy as np, ops.example_add as ea\n"
        "x = np.arange(64, dtype=np.float32); y = np.ones(64, dtype=np.float32); z = np.empty_like(x)\n"
        "size, executor = ea.get_workspace_size(x, y, z)\n"
        "report = ea.run(None, size, executor)\n"
        "print(json.dumps({'mte2': int(report.total.mte2_bytes), 'copies': int(report.total.mte2_instr), "
        "'z': [float(z[0]), float(z[63])]}))\n")
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(cache))
    env.pop("ASCEND_SIM_CHECK", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name} no longer has exactly one {old!r}: update this test"
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_editing_machine_model_sources_recompiles(tmp_path):
    root, cache = tmp_path / "pkg", tmp_path / "cache"
    _copy_package(root)
    first = _mte2_bytes(root, cache)
    assert first["mte2"] == 2 * 64 * 4 and first["z"] == [1.0, 64.0]
    assert _mte2_bytes(root, cache) == first                        # warm: loaded from the cache, same answer

    # an outlined call's own body (DataCopyPad GM -> UB, compiled once as a variant): count 1000 bytes more per copy
    _edit(root / "ascend_sim" / "datacopy.py",
          "            _poison(c, tail_start, row + foot)\n    note_ub_write(c, ub0 + ub_need)\n"
          "    c.state[CNT_MTE2_BYTES] += n * blen\n",
          "            _poison(c, tail_start, row + foot)\n    note_ub_write(c, ub0 + ub_need)\n"
          "    c.state[CNT_MTE2_BYTES] += n * blen + 1000\n")
    edited = _mte2_bytes(root, cache)
    assert edited == dict(first, mte2=first["mte2"] + 1000 * first["copies"])

    # a second machine-model module, the vector Add's variant: z = x + y + 1
    _edit(root / "ascend_sim" / "vector.py", "            dst[i] = src0[i] + src1[i]\n",
          "            dst[i] = src0[i] + src1[i] + 1\n")
    assert _mte2_bytes(root, cache)["z"] == [2.0, 65.0]
