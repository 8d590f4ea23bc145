"""`ascend-sim sweep` and ops.sweep: one row per point in grid order, the same rows locally and on Dask, a
resumed sweep runs only what is missing, bad axes are one-line errors, Parquet / grid files / plots."""
from __future__ import annotations

import csv
import importlib.util

import pytest

from ops.cli import main
from ops.sweep import SweepError, columns, plot, read_table, sweep

OP = "moe_token_permute"
GRID = {"tokens": [1024, 4096], "hidden": [4096, 7168], "topk": [8], "experts": [256]}
GRID_FLAGS = ["--grid", "tokens=1024,4096", "--grid", "hidden=4096,7168", "--grid", "topk=8", "--grid", "experts=256"]
SOCS = ["ascend910b", "ascend950"]

needs = {name: pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{name} is not installed")
         for name, module in (("dask", "distributed"), ("pyarrow", "pyarrow"), ("pyyaml", "yaml"),
                              ("matplotlib", "matplotlib"))}


def _csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_tiling_sweep_writes_one_row_per_point_in_grid_order(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main(["sweep", "tiling", OP, *GRID_FLAGS, "--soc", "910b,950", "--out", str(out), "--quiet"]) == 0
    assert "8 points" in capsys.readouterr().out
    rows = _csv(out)
    assert list(rows[0]) == columns(["tokens", "hidden", "topk", "experts"], "tiling")
    assert [(r["tokens"], r["hidden"], r["soc"]) for r in rows] == [
        (t, h, s) for t in ("1024", "4096") for h in ("4096", "7168") for s in SOCS]
    # the same figures as `ascend-sim tiling` for the first point
    assert main(["tiling", OP, "--tokens", "1024", "--hidden", "4096", "--topk", "8", "--experts", "256",
                 "--json"]) == 0
    import json
    want = json.loads(capsys.readouterr().out)
    first = rows[0]
    assert (int(first["tiling_key"]), int(first["block_dim"]), int(first["ub_plan_bytes"])) == \
        (want["tiling_key"], want["block_dim"], want["ub_plan_bytes"])
    assert first["status"] == "ok" and first["fits"] == "True" and first["estimate_us"] == ""
    # the inputs' digest follows the shape, not the chip
    assert rows[0]["inputs_hash"] == rows[1]["inputs_hash"] != rows[2]["inputs_hash"]


def test_points_the_operator_refuses_are_rows_not_the_end_of_the_sweep(tmp_path):
    rows = sweep("tiling", "moe_token_unpermute", {"tokens": [64], "hidden": [64], "experts": [4, 16], "topk": [8]},
                 out=str(tmp_path / "r.csv"))
    assert [r["status"] for r in rows] == ["invalid", "ok"]
    assert "--topk must be in [1, --experts=4] to route tokens" in rows[0]["error"]


def test_an_interrupted_sweep_resumes_with_the_points_it_had_not_written(tmp_path):
    out = str(tmp_path / "r.csv")
    whole = sweep("tiling", OP, GRID, SOCS, out=str(tmp_path / "whole.csv"))

    class Killed(Exception):
        pass

    def kill_after_three(row, seen=[]):     # noqa: B006 - the counter of this one sweep
        seen.append(row)
        if len(seen) == 3:
            raise Killed
    with pytest.raises(Killed):
        sweep("tiling", OP, GRID, SOCS, out=out, on_row=kill_after_three)
    assert len(_csv(out)) == 3
    with open(out, "a") as f:       # killed again while writing a fourth row: half a line, no newline
        f.write("moe_token_permute,4096,40")
    ran = []
    sweep("tiling", OP, GRID, SOCS, out=out, on_row=ran.append)
    assert len(ran) == 5
    assert _csv(out) == _csv(tmp_path / "whole.csv") and len(whole) == 8
    ran.clear()
    sweep("tiling", OP, GRID, SOCS, out=out, on_row=ran.append)        # complete: nothing runs again
    assert ran == []


def test_a_sweep_with_other_axes_does_not_resume_into_the_same_file(tmp_path):
    out = str(tmp_path / "r.csv")
    sweep("tiling", OP, {"tokens": [64], "hidden": [64], "topk": [2], "experts": [8]}, out=out)
    with pytest.raises(SweepError, match="another sweep's table"):
        sweep("tiling", OP, {"tokens": [64], "hidden": [64], "topk": [2], "experts": [8], "dtype": ["fp16"]},
              out=out)


SMALL_GRID = {"tokens": [1024, 4096], "hidden": [4096], "topk": [8], "experts": [256]}


def test_a_process_pool_gives_the_table_of_one_process(tmp_path):
    sweep("tiling", OP, SMALL_GRID, SOCS, out=str(tmp_path / "here.csv"))
    sweep("tiling", OP, SMALL_GRID, SOCS, jobs=2, out=str(tmp_path / "pool.csv"))
    assert (tmp_path / "pool.csv").read_bytes() == (tmp_path / "here.csv").read_bytes()
    assert len(_csv(tmp_path / "pool.csv")) == 4


@needs["dask"]
def test_a_dask_local_cluster_gives_the_table_of_one_process(tmp_path):
    """Two worker processes of a dask.distributed LocalCluster (about 20 s on 2 cores, most of it starting them)."""
    sweep("tiling", OP, SMALL_GRID, SOCS, out=str(tmp_path / "here.csv"))
    sweep("tiling", OP, SMALL_GRID, SOCS, jobs=2, dask="local", out=str(tmp_path / "dask.csv"))
    assert (tmp_path / "dask.csv").read_bytes() == (tmp_path / "here.csv").read_bytes()


@pytest.mark.parametrize("argv,fragment", [
    (["--grid", "tokns=1,2"], "unknown axis 'tokns'"),
    (["--grid", "tokens=1,x"], "axis tokens: expected a whole number, got 'x'"),
    (["--grid", "tokens"], "--grid takes AXIS=V1,V2"),
    (["--grid", "tokens=0"], "--tokens: expected a positive integer"),
    (["--grid", "dtype=bf8"], "--dtype: invalid choice: 'bf8'"),
    (["--grid", "tokens=8,8"], "axis tokens: a value is repeated"),
    (["--grid", "routing=zipf:1"], "`sweep tiling` does not take the routing axis"),
    (["--grid", "indices_dtype=int64"], "--indices-dtype does not apply to moe_token_unpermute_with_routing_map"),
    (["--grid", "capacity=2"], "--capacity applies with --drop-and-pad only"),
    (["--grid", "soc=910b"], "give it as --soc"),
    (["--soc", "ascend9000"], "ascend9000"),
    (["--vary", "hidden"], "--vary applies to `sweep limits` only"),
], ids=["unknown-axis", "not-a-number", "no-values", "not-positive", "bad-choice", "repeated", "routing-on-tiling",
        "stray-flag", "capacity-without-pad", "soc-as-axis", "unknown-chip", "vary-without-limits"])
def test_bad_axes_are_one_line_errors(argv, fragment, tmp_path, capsys):
    given = {a.partition("=")[0] for a in argv if "=" in a}
    held = {"tokens": "8", "hidden": "8", "experts": "4", "topk": "2"}
    base = [f"--grid={k}={v}" for k, v in held.items() if k not in given and not (k == "topk" and "capacity" in given)]
    out = str(tmp_path / "x.csv")
    rc = main(["sweep", "tiling", "moe_token_unpermute_with_routing_map", *base, *argv, "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.csv").exists()


def test_a_flag_the_chip_would_ignore_is_refused_before_any_point_runs(tmp_path, capsys):
    rc = main(["sweep", "tiling", OP, "--grid", "tokens=8", "--grid", "hidden=64", "--grid", "topk=2", "--grid",
               "experts=8", "--grid", "quant_mode=3", "--soc", "950,910b", "--out", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "soc=ascend910b" in err and "--quant-mode 3 quantises on ascend950 only" in err


def test_a_limits_sweep_finds_the_limit_the_limits_command_finds(tmp_path):
    rows = sweep("limits", "moe_token_unpermute_with_routing_map_grad",
                 {"tokens": [15000], "topk": [2], "experts": [8], "probs_dtype": ["fp32"]}, ["910b"], vary="hidden")
    (row,) = rows
    # the README's example: key 101 fits up to hidden 8,048 on 910B, its plan overflows the UB from 8,049
    assert (row["limit"], row["tiling_key"], row["status"]) == (8048, 101, "ub_overflow")
    assert row["next_outcome"] == "tilingKey 101 DOES NOT FIT"


def test_a_profile_sweep_carries_the_estimate_and_a_digest_of_the_drawn_inputs(tmp_path):
    grid = {"tokens": [64], "hidden": [256], "topk": [2], "experts": [16], "routing": ["uniform", "zipf:1.5"],
            "seed": [0, 1]}
    rows = sweep("profile", "moe_token_unpermute_with_routing_map_grad", grid, out=str(tmp_path / "p.csv"))
    assert [(r["routing"], r["seed"]) for r in rows] == [("uniform", 0), ("uniform", 1), ("zipf:1.5", 0),
                                                         ("zipf:1.5", 1)]
    assert all(r["status"] == "ok" and r["estimate_us"] > 0 and r["bound"] and r["gm_bytes"] > 0 for r in rows)
    assert len({r["inputs_hash"] for r in rows}) == 4          # seed and routing both change the inputs
    again = sweep("profile", "moe_token_unpermute_with_routing_map_grad", grid)
    assert again == rows                                      # same seed, same inputs, same rows


@needs["pyarrow"]
def test_parquet_holds_the_csv_s_rows_typed(tmp_path):
    sweep("tiling", OP, GRID, SOCS, out=str(tmp_path / "t.csv"))
    sweep("tiling", OP, GRID, SOCS, out=str(tmp_path / "t.parquet"))
    assert read_table(str(tmp_path / "t.parquet")) == read_table(str(tmp_path / "t.csv"))
    import pyarrow.parquet as pq
    schema = pq.read_table(tmp_path / "t.parquet").schema
    assert str(schema.field("tokens").type) == "int64" and str(schema.field("fits").type) == "bool"
    assert str(schema.field("estimate_us").type) == "double"
    assert not (tmp_path / "t.parquet.partial.csv").exists()


def test_a_toml_grid_file_is_the_same_sweep_as_the_flags(tmp_path, capsys):
    (tmp_path / "g.toml").write_text('soc = ["910b", "950"]\n[grid]\ntokens = [1024, 4096]\nhidden = [4096, 7168]\n'
                                     'topk = 8\nexperts = 256\n')
    assert main(["sweep", "tiling", OP, "--grid-file", str(tmp_path / "g.toml"), "--out", str(tmp_path / "f.csv"),
                 "--quiet"]) == 0
    assert main(["sweep", "tiling", OP, *GRID_FLAGS, "--soc", "910b,950", "--out", str(tmp_path / "g.csv"),
                 "--quiet"]) == 0
    assert (tmp_path / "f.csv").read_bytes() == (tmp_path / "g.csv").read_bytes()


@needs["pyyaml"]
def test_a_yaml_grid_file(tmp_path):
    (tmp_path / "g.yaml").write_text("grid:\n  tokens: [64, 128]\n  hidden: 64\n  topk: 2\n  experts: 8\n")
    assert main(["sweep", "tiling", OP, "--grid-file", str(tmp_path / "g.yaml"), "--out", str(tmp_path / "y.csv"),
                 "--quiet"]) == 0
    assert [r["tokens"] for r in _csv(tmp_path / "y.csv")] == ["64", "128"]


@needs["matplotlib"]
def test_the_plot_draws_one_line_per_value_of_the_line_axis(tmp_path, capsys):
    png = tmp_path / "p.png"
    assert main(["sweep", "tiling", OP, *GRID_FLAGS, "--out", str(tmp_path / "t.csv"), "--plot", str(png),
                 "--x", "tokens", "--line", "hidden", "--quiet"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SweepError, match="the table's axes are"):
        plot(read_table(str(tmp_path / "t.csv")), str(png), "experts_per_token", y="ub_plan_bytes")


def test_a_sweep_killed_by_a_signal_resumes_where_it_stopped(tmp_path):
    """SIGKILL (no clean-up at all) once a few rows are on disk; the rerun writes the table of an uninterrupted
    sweep and runs only the points that were missing."""
    import os
    import signal
    import subprocess
    import sys
    import time
    # 640 points, a few ms each: the kill lands long before the end even on a fast machine (80 points once
    # finished within one 50 ms poll)
    grid = {"tokens": [64, 128, 256, 512, 1024], "hidden": [256, 1024, 4096, 7168], "topk": [2, 8],
            "experts": [64, 256], "cores": [8, 16, 24, 32, 40, 48, 56, 64]}
    total = 640
    out = tmp_path / "k.csv"
    argv = [sys.executable, "-m", "ops.cli", "sweep", "tiling", OP, "--out", str(out), "--quiet",
            *(f"--grid={k}={','.join(map(str, v))}" for k, v in grid.items())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 6:       # the header and five rows
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    written = len(_csv(out))
    assert 5 <= written < total
    ran = []
    rows = sweep("tiling", OP, grid, out=str(out), on_row=ran.append)
    assert len(ran) == total - written and len(rows) == total
    sweep("tiling", OP, grid, out=str(tmp_path / "whole.csv"))
    assert _csv(out) == _csv(tmp_path / "whole.csv")
