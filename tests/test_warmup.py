"""`ascend-sim warmup`: it compiles the stages of the chosen operators and chips into numba's disk cache, so a
following process compiles nothing; and the quick tour that `ascend-sim demo` runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli import main

REPO = Path(__file__).resolve().parents[1]
TOUR_OPS = ("moe_token_permute", "moe_token_permute_with_routing_map", "moe_token_unpermute",
            "moe_token_unpermute_with_routing_map", "moe_token_permute_grad", "moe_token_permute_with_routing_map_grad",
            "moe_token_unpermute_grad", "moe_token_unpermute_with_routing_map_grad")


def _cli(args, cache: Path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    env.pop("ASCEND_SIM_CHECK", None)
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1200)


def _cache_files(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*.nbi")}


# slow: the one test that compiles a kernel into a cache of its own (the warmup must find it cold), so a cold default
# run paid this compilation (about 40 s of one worker, plus warmup's second compile process) on top of the shared
# cache's; the kernel itself stays covered bit for bit by the permute-grad tests, the command by the test below
@pytest.mark.slow
def test_warmup_compiles_what_a_following_call_needs(tmp_path):
    """One operator on one chip (kernel G, one signature): warmup compiles it with a bar and says where the
    cache is; a `run` of the tour's case in a new process then writes no cache entry and announces no compile."""
    done = _cli(["warmup", "--op", "moe_token_permute_grad", "--soc", "910b", "--jobs", "2"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Compiling 1 kernel stage signatures" in done.stderr and "1/1 stage functions" in done.stderr
    assert f"numba's cache: {tmp_path}" in done.stdout and "MiB in" in done.stdout
    warm = _cache_files(tmp_path)
    assert any("unpermute_gather" in f for f in warm)
    again = _cli(["warmup", "--op", "moe_token_permute_grad", "--soc", "910b"], tmp_path)
    assert again.returncode == 0 and "in the cache already" in again.stderr
    run = _cli(["run", "moe_token_permute_grad", "--tokens", "64", "--hidden", "256", "--experts", "16", "--topk",
                "4"], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "bit-exact vs golden" in run.stdout and "compiling" not in run.stderr
    assert _cache_files(tmp_path) == warm


def test_warmup_refuses_an_unknown_operator_or_chip(capsys):
    assert main(["warmup", "--op", "moe_token_frobnicate"]) == 2
    assert "unknown operator" in capsys.readouterr().err
    assert main(["warmup", "--soc", "ascend310"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_quick_tour_runs_every_operator_and_the_950_mx_cases(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for op in TOUR_OPS:
        assert f". {op} on ascend910b, 64x256" in out, op
    assert out.count("moe_token_permute on ascend950") == 2
    assert "tilingKey 10030000" in out and "tilingKey 10100000" in out          # MXFP8 and MXFP4 gathers
    assert out.count("bit-exact vs golden") == 10 and "estimated" in out
    assert "MISMATCH" not in out and "every case matches its golden" in out and "demo --all" in out
