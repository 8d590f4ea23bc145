"""The ascend-sim command line: tiling figures, runs, the demo, and one-line errors."""
from __future__ import annotations

import pytest

from ops.cli import main

OP = "moe_token_unpermute_with_routing_map_grad"


def test_tiling_prints_the_real_figures(capsys):
    rc = main(["tiling", OP, "--tokens", "30", "--hidden", "8", "--experts", "8", "--topk", "1",
               "--probs-dtype", "fp32", "--cores", "40"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "tilingKey 101, block_dim 40, workspace 16777216 bytes" in out
    assert "indices_reserve_num_align    = 16" in out and "total_ub_size                = 196352" in out
    assert "UB plan" in out and "routingMapTBuf" in out


def test_run_checks_against_the_golden(capsys):
    rc = main(["run", OP, "--tokens", "40", "--hidden", "96", "--experts", "6", "--capacity", "8",
               "--drop-and-pad", "--soc", "950"])
    out = capsys.readouterr().out
    assert rc == 0 and "tilingKey 11, block_dim 64" in out and "bit-exact vs golden" in out


def test_demo_all_runs_every_mode(capsys):
    assert main(["demo", "--all"]) == 0
    out = capsys.readouterr().out
    for key in (0, 10, 1, 11, 101, 111):
        assert f"tilingKey {key}," in out
    for label in ("one-core sort", "multi-core sort", "numOutTokens drops rows", "split-D rows", "MXFP8 E5M2",
                  "MXFP8 E4M3FN", "MXFP4 E2M1"):
        assert label in out
    for label in ("non-topK rows (-1 slots", "key 9 dropAndPad", "key 1 probs (masked select + kernel G)",
                  "key 1000 dropAndPad (+ Sort, index add)", "key 0 + MaskedScatter of probs grads"):
        assert label in out
    assert "l0op::MoeInplaceIndexAddWithSorted [simulated kernel" in out and "l0op::Sort [host NumPy]" in out
    for op in ("moe_token_unpermute ", "moe_token_permute_grad ", "moe_token_unpermute_grad "):
        assert out.count(op) >= 2, op
    assert "key 25 bf16 tokens, fp32 probs" in out and "key 1 probs (ReduceSumFunc)" in out
    assert "MISMATCH" not in out and "all cases match their goldens" in out


def test_run_routing_map_ops_list_their_steps(capsys):
    rc = main(["run", "moe_token_permute_with_routing_map", "--tokens", "40", "--hidden", "96", "--experts", "6",
               "--topk", "2", "--non-topk", "--soc", "910_93"])
    out = capsys.readouterr().out
    assert rc == 0 and "l0op::Transpose [host NumPy]" in out and "bit-exact vs golden" in out
    rc = main(["tiling", "moe_token_unpermute_with_routing_map", "--tokens", "4096", "--hidden", "7168",
               "--experts", "256", "--topk", "8", "--json"])
    out = capsys.readouterr().out
    assert rc == 0 and '"tiling_key": 1' in out


@pytest.mark.parametrize("soc", ["910b", "950"])
@pytest.mark.parametrize("op,flags", [
    ("moe_token_unpermute", ["--topk", "3", "--probs-dtype", "fp32", "--num-out-tokens", "100"]),
    ("moe_token_unpermute", ["--no-probs", "--dtype", "fp16"]),
    ("moe_token_permute_grad", ["--topk", "3", "--num-out-tokens", "-20"]),
    ("moe_token_unpermute_grad", ["--topk", "3", "--dtype", "fp32", "--probs-dtype", "bf16"]),
    ("moe_token_unpermute_grad", ["--no-probs"]),
], ids=["unpermute-mixed-probs-dropped", "unpermute-no-probs", "permute-grad-dropped", "unpermute-grad-probs",
        "unpermute-grad-no-probs"])
def test_run_index_family(op, flags, soc, capsys):
    rc = main(["run", op, "--tokens", "40", "--hidden", "300", "--experts", "6", "--soc", soc, *flags])
    out = capsys.readouterr().out
    assert rc == 0 and "bit-exact vs golden" in out, out
    if soc == "950":      # the aclnn forwards to another l0 operator there, named in the steps
        assert "l0op::MoeFinalizeRoutingV2" in out or "l0op::MoeInitRoutingV2Grad" in out


def test_moe_layer_command(capsys):
    rc = main(["moe-layer", "--tokens", "24", "--hidden", "16", "--experts", "4", "--topk", "2", "--soc", "910_93"])
    out = capsys.readouterr().out
    assert rc == 0 and "3 of 3 styles passed on ascend910_93" in out
    for op in ("MoeTokenUnpermuteGrad", "MoeTokenPermuteWithRoutingMapGrad", "finite difference"):
        assert op in out


def test_run_permute_with_quantisation(capsys):
    rc = main(["run", "moe_token_permute", "--tokens", "40", "--hidden", "96", "--experts", "6", "--topk", "2",
               "--soc", "950", "--quant-mode", "3", "--num-out-tokens", "-7", "--mx-scale-rule", "round_scale"])
    out = capsys.readouterr().out
    assert rc == 0 and "tilingKey 10030000," in out and "xQuantOutQueue" in out and "bit-exact vs golden" in out


def test_tiling_permute_prints_every_tpipe(capsys):
    rc = main(["tiling", "moe_token_permute", "--tokens", "4096", "--hidden", "7168", "--experts", "256",
               "--topk", "8", "--indices-dtype", "int64"])
    out = capsys.readouterr().out
    assert rc == 0 and "tilingKey 2," in out
    for pipe in ("TPipe sortPipe ", "TPipe sortPipe2 ", "TPipe MoeindexCopyPipe "):
        assert pipe in out


@pytest.mark.parametrize("argv,status,fragment", [
    (["tiling", OP, "--tokens", "4096", "--hidden", "7168", "--experts", "256", "--topk", "600"], 1, "561002"),
    (["tiling", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--capacity", "9", "--drop-and-pad"], 1,
     "capacity"),
    (["run", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--capacity", "2"], 2,
     "--capacity does not apply to moe_token_permute"),
    (["run", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--soc", "950",
      "--quant-mode", "4"], 2, "invalid choice"),
    (["run", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4"], 2, "--topk"),
    (["tiling", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "513"], 1,
     "561002"),
    (["tiling", "moe_token_frobnicate", "--tokens", "1", "--hidden", "1", "--experts", "1"], 2, "unknown operator"),
    (["run", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--dtype", "fp9"], 2, "dtype"),
    (["tiling", OP, "--tokens", "-3", "--hidden", "8", "--experts", "4", "--topk", "2"], 2, "positive"),
    (["tiling", OP, "--hidden", "8", "--experts", "4", "--topk", "2"], 2, "--tokens"),
    (["tiling", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--soc", "910c"], 2,
     "unknown SoC"),
    (["frobnicate"], 2, "invalid choice"),
    (["run", "moe_token_unpermute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2",
      "--capacity", "3"], 2, "not allowed with argument"),
    (["run", "moe_token_permute_grad", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2",
      "--no-probs"], 2, "--no-probs does not apply to moe_token_permute_grad"),
    (["run", "moe_token_unpermute_grad", "--tokens", "8", "--hidden", "8", "--experts", "4"], 2, "needs --topk"),
    (["run", "moe_token_unpermute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--no-probs",
      "--probs-dtype", "fp32"], 2, "exclude each other"),
    (["moe-layer", "--experts", "4", "--topk", "5"], 2, "must not exceed"),
    (["moe-layer", "--style", "dense"], 2, "invalid choice"),
])
def test_errors_are_one_line(argv, status, fragment, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == status
    assert fragment in err and len(err.strip().splitlines()) == 1, err


def _subparsers():
    from ops.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


@pytest.mark.parametrize("command", ["demo", "warmup", "tiling", "run", "profile", "moe-layer", "sweep"])
def test_every_flag_has_help_listing_its_values(command):
    for action in _subparsers()[command]._actions:
        if action.help == "==SUPPRESS==" or action.dest == "help":
            continue
        assert action.help, (command, action.dest)
        for choice in action.choices or ():
            assert str(choice) in action.help, (command, action.dest, choice)


def test_tiling_json_is_one_object_with_the_real_fields(capsys):
    import json
    rc = main(["tiling", OP, "--tokens", "30", "--hidden", "8", "--experts", "8", "--topk", "1", "--probs-dtype",
               "fp32", "--cores", "40", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["tiling_key"] == 101 and doc["block_dim"] == 40 and doc["ub_fits"] is True
    assert doc["fields"]["total_ub_size"] == 196352 and doc["soc"]["aiv_num"] == 40
    assert [r["name"] for r in doc["ub_plan"]][-1] == "probGradTBuf"


def test_run_json_and_per_core(capsys):
    import json
    argv = ["run", "moe_token_permute", "--tokens", "64", "--hidden", "32", "--experts", "8", "--topk", "2"]
    assert main(argv + ["--json", "--per-core"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cores = doc["report"]["cores"]
    assert doc["exact"] is True and len(cores) == doc["tiling"]["block_dim"] == 48
    # MTE3: 128 rows of 32 bf16 out of the index copy, plus 128 int32 results written by each of the two sorts
    assert sum(c["mte3_bytes"] for c in cores) == doc["report"]["total"]["mte3_bytes"] == 128 * 32 * 2 + 2 * 128 * 4
    assert main(argv + ["--per-core"]) == 0
    out = capsys.readouterr().out
    assert out.count("tilingKey") == 1 and "per core (48 blocks)" in out
    assert len([line for line in out.splitlines() if line.strip().split(" ")[0].isdigit()]) == 48


def test_tiling_exits_non_zero_when_the_plan_does_not_fit(capsys):
    # the documented key-101 quirk on a stock 910B: 15000 tokens x hidden 8192 with fp32 probs
    rc = main(["tiling", OP, "--tokens", "15000", "--hidden", "8192", "--experts", "8", "--topk", "2",
               "--probs-dtype", "fp32"])
    captured = capsys.readouterr()
    assert rc == 1 and "DOES NOT FIT" in captured.out
    assert len(captured.err.strip().splitlines()) == 1 and "UBOverflowError" in captured.err


def test_demo_goes_on_past_failing_cases_and_tabulates_them(capsys):
    rc = main(["demo", "--all", "--ub-size", "65536"])
    out = capsys.readouterr().out
    assert rc == 1
    table = out[out.index("operator  "):].splitlines()[1:14]
    assert len(table) == 13 and all(" PASS " in row or " FAIL " in row for row in table)
    assert any(" PASS " in row for row in table) and any(" FAIL " in row for row in table)
    assert "cases passed" in out and "Traceback" not in out


@pytest.mark.parametrize("argv,env,fragment", [
    (["tiling", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--cores", "100000"], None,
     "aiv_num"),
    (["tiling", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--ub-size", "65536.7"], None,
     "positive integer"),
    (["run", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2"], "two", "ASCEND_SIM_THREADS"),
    (["run", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--indices-dtype", "int64"], None,
     "--indices-dtype does not apply"),
    (["run", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2",
      "--mx-scale-rule", "floor"], None, "--mx-scale-rule applies to MXFP8"),
    (["tiling", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2",
      "--quant-mode", "2"], None, "quantises on ascend950 only"),
    (["run", OP, "--tokens", "8", "--hidden", "8", "--experts", "4", "--capacity", "2"], None,
     "--capacity applies with --drop-and-pad"),
])
def test_settings_errors_are_one_line(argv, env, fragment, capsys, monkeypatch):
    if env is not None:
        monkeypatch.setenv("ASCEND_SIM_THREADS", env)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and len(err.strip().splitlines()) == 1, err


def test_cold_demo_compile_tickets_are_split_between_two_ends(monkeypatch):
    """Two processes take stage tickets from opposite ends of one list until they meet: every ticket is
    compiled exactly once, each process starts on its own operator."""
    import multiprocessing

    from ops.cli import demo as cli
    from tiling import get_soc
    executors = list(cli._prepared_executors(cli.demo_cases(get_soc("910b"), values=False)).values())
    tickets = cli._compile_tickets(executors)
    stages = [t[0][0] for t in tickets]
    assert len(set(stages)) == len(stages)                        # one ticket per stage function
    assert all(len({id(s) for s, _ in t}) == 1 for t in tickets)  # all signatures of a stage stay together
    ops_of = {s: ex.op for ex in executors for s, _ in ex.stage_calls()}
    assert ops_of[stages[0]] != ops_of[stages[-1]]                # the two ends start on different operators
    taken = []
    monkeypatch.setattr(cli, "ensure_compiled", lambda calls, on_compile=None: taken.append(calls[0][0]))
    bounds = multiprocessing.get_context("fork").Array("i", [0, len(tickets) - 1])
    cli._take_tickets(tickets, bounds, from_front=False)          # the other process took everything
    cli._take_tickets(tickets, bounds, from_front=True)           # nothing left for this one
    assert taken == stages[::-1]


PROFILE = ["profile", "moe_token_unpermute", "--tokens", "96", "--hidden", "256", "--experts", "8", "--topk", "2"]


def test_profile_writes_a_perfetto_trace_and_the_pipe_utilization_csv(tmp_path, capsys):
    import csv
    import json
    trace, table = tmp_path / "out.json", tmp_path / "out.csv"
    assert main(PROFILE + ["--trace", str(trace), "--csv", str(table), "--trace-cores", "0-1,5"]) == 0
    out = capsys.readouterr().out
    assert "estimate" in out and "bound by" in out and "roofline" in out and "wrote" in out
    doc = json.loads(trace.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert slices and {e["pid"] for e in slices} == {0, 1, 5}
    assert doc["otherData"]["events"] == len(slices) and doc["otherData"]["dropped_calls"] == 0
    rows = list(csv.reader(table.open()))
    assert rows[0][:3] == ["block_id", "aiv_time(us)", "aiv_total_cycles"] and len(rows) == 1 + 48


def test_profile_says_when_the_trace_was_cut(tmp_path, capsys):
    assert main(PROFILE + ["--trace", str(tmp_path / "t.json"), "--max-events", "50"]) == 0
    out = capsys.readouterr().out
    assert "calls left out" in out


def test_profile_what_if_prints_the_stock_chip_beside_the_custom_one(capsys):
    assert main(PROFILE + ["--cores", "8", "--cost", "hbm_bytes_per_cycle=96"]) == 0
    out = capsys.readouterr().out
    assert "what-if" in out and "stock" in out
    cores_row = next(line for line in out.splitlines() if "vector cores" in line).split()
    assert cores_row[-2:] == ["48", "8"]
    assert "slower on this call" in out


def test_profile_json(capsys):
    import json
    assert main(PROFILE + ["--json", "--ub-size", "131072"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"]["time_us"] > 0 and doc["stock"]["ub"] == 196608
    assert doc["estimate"]["kernels"][0]["bound"] in ("S", "V", "MTE2", "MTE3", "HBM")


@pytest.mark.parametrize("extra,fragment", [
    (["--cost", "warp_speed=9"], "unknown cost parameter"),
    (["--cost", "clock_mhz=fast"], "cannot read"),
    (["--cost", "event_cycles=-4"], "event_cycles"),
    (["--trace-cores", "1"], "--trace-cores selects"),
    (["--trace-cores", "3-1", "--trace", "x.json"], "block indices"),
], ids=["unknown-cost", "bad-value", "negative-cycles", "cores-without-trace", "bad-range"])
def test_profile_bad_flags_are_one_line(extra, fragment, capsys):
    assert main(PROFILE + extra) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1, err


# --- the command line as a package ---------------------------------------------------------------------------
def _module_graph() -> dict[str, set[str]]:
    """{module under ops: the modules under ops it imports}, from every import statement (in functions too: a
    deferred import is still a dependency). Importing a.b.c also runs the packages a.b and a, unless the
    importer is inside them already; the registry's dynamic imports of each operator's spec are added."""
    import ast
    import pathlib

    from ops.cli.operators import PACKAGES
    root = pathlib.Path(__file__).resolve().parents[1]
    modules = {}
    for path in (root / "ops").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets.update([base, *(f"{base}.{a.name}" for a in node.names)])
        if name == "ops.cli.operators":
            targets.update(f"ops.{p}.cli" for p in PACKAGES)
        edges = set()
        for target in targets:
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                ancestor = ".".join(parts[:k])
                if ancestor in modules and not (name == ancestor or name.startswith(ancestor + ".")):
                    edges.add(ancestor)
        graph[name] = edges
    return graph


def _cycle_through(graph: dict, start: str) -> list | None:
    """A path start -> ... -> start in the graph, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph[node]:
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_command_line_modules_import_no_cycle():
    graph = _module_graph()
    cli_modules = [m for m in graph if m == "ops.cli" or m.startswith("ops.cli.") or m.endswith(".cli")
                   or m == "ops.common.cli_spec"]
    assert "ops.cli.demo" in cli_modules and "ops.permute.cli" in cli_modules
    cycles = {m: _cycle_through(graph, m) for m in cli_modules}
    assert not any(cycles.values()), {m: c for m, c in cycles.items() if c}


def test_every_operator_states_its_own_spec():
    from ops.cli.operators import OPS, PACKAGES
    assert len(OPS) == len(PACKAGES) == 8
    for name, spec in OPS.items():
        assert spec.name == name and spec.demo_cases.__module__.startswith("ops.") and spec.flags


@pytest.mark.parametrize("op", ["moe_token_permute", "moe_token_unpermute_with_routing_map_grad",
                                "moe_token_permute_with_routing_map", "moe_token_unpermute_with_routing_map",
                                "moe_token_permute_with_routing_map_grad", "moe_token_unpermute",
                                "moe_token_permute_grad", "moe_token_unpermute_grad"])
def test_each_demo_group_is_titled_with_its_operator(op):
    from ops.cli.demo import demo_title
    from tiling import get_soc
    camel = "".join(w.capitalize() for w in op.split("_"))
    title = demo_title(op, get_soc("910b"))
    assert title.split(" ")[0] == camel and "ascend910b" in title, title


def test_python_dash_m_and_the_console_script_run_the_package():
    import os
    import subprocess
    import sys
    from pathlib import Path

    import tomllib

    import ops.cli
    root = Path(__file__).resolve().parents[1]
    script = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]["ascend-sim"]
    module, _, attr = script.partition(":")
    assert (module, attr) == ("ops.cli", "main") and ops.cli.main is main
    done = subprocess.run([sys.executable, "-m", "ops.cli", "--help"], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert done.returncode == 0, done.stderr
    for command in ("demo", "warmup", "tiling", "run", "profile", "limits", "moe-layer"):
        assert command in done.stdout
    done = subprocess.run([sys.executable, "-m", "ops.cli", "run", "moe_token_frobnicate", "--tokens", "1",
                           "--hidden", "1", "--experts", "1"], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert done.returncode == 2 and "unknown operator" in done.stderr


# --- flag errors found before the run ------------------------------------------------------------------------
LIMITS = ["limits", "moe_token_unpermute", "--vary", "topk", "--fix", "tokens=64", "--fix", "hidden=64", "--to", "8"]


@pytest.mark.parametrize("command,flag,target", [
    (PROFILE, "--trace", "missing/out.json"),
    (PROFILE, "--trace", "."),
    (PROFILE, "--csv", "missing/out.csv"),
    (PROFILE, "--csv", "."),
    (PROFILE, "--plot", "missing/out.png"),
    (PROFILE, "--plot", "."),
    (LIMITS, "--plot", "missing/out.png"),
    (LIMITS, "--plot", "."),
], ids=["profile-trace-no-dir", "profile-trace-onto-dir", "profile-csv-no-dir", "profile-csv-onto-dir",
        "profile-plot-no-dir", "profile-plot-onto-dir", "limits-plot-no-dir", "limits-plot-onto-dir"])
def test_an_output_file_that_cannot_be_written_is_a_flag_error_before_the_run(command, flag, target, tmp_path,
                                                                             capsys):
    path = str(tmp_path / target)
    assert main(command + [flag, path]) == 2
    captured = capsys.readouterr()
    assert f"cannot write {path}" in captured.err and flag in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == ""     # nothing ran


ROUTING_OPS = ["moe_token_permute_with_routing_map", "moe_token_unpermute_with_routing_map",
               "moe_token_permute_with_routing_map_grad", "moe_token_unpermute_with_routing_map_grad"]


@pytest.mark.parametrize("op", ROUTING_OPS)
@pytest.mark.parametrize("extra", [["--topk", "2"], ["--capacity", "2", "--drop-and-pad"]], ids=["topk", "pad"])
def test_int8_tokens_on_a_routing_map_op_give_the_operators_status(op, extra, capsys):
    """The OpDef takes float tokens only: the aclnn call's own 161002, not its tiling's error or a raw one."""
    rc = main(["run", op, "--tokens", "8", "--hidden", "8", "--experts", "4", "--dtype", "int8", *extra])
    err = capsys.readouterr().err
    assert rc == 1 and "ParamInvalidError [161002]" in err and "int8" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,flag", [
    (["run", "moe_token_permute", "--tokens", "100000000000", "--hidden", "8", "--experts", "4", "--topk", "2"],
     "--tokens"),
    (["run", "moe_token_unpermute_with_routing_map_grad", "--tokens", "8", "--hidden", "100000000000", "--experts",
      "4", "--topk", "2"], "--hidden"),
    (["run", "moe_token_permute_with_routing_map", "--tokens", "64", "--hidden", "64", "--experts", "40000000000",
      "--topk", "2"], "--experts"),
    (["profile", "moe_token_unpermute", "--tokens", "100000000000", "--hidden", "8", "--experts", "4", "--topk",
      "2"], "--tokens"),
    (["moe-layer", "--tokens", "100000000000"], "--tokens"),
    (["moe-layer", "--hidden", "1000000"], "--hidden"),
], ids=["permute-tokens", "uwrm-grad-hidden", "pwrm-experts", "profile-tokens", "moe-layer-tokens",
        "moe-layer-hidden"])
def test_a_case_larger_than_the_memory_is_refused_in_one_line_before_allocating(argv, flag, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and flag in err and "bytes of memory" in err and len(err.strip().splitlines()) == 1, err


def test_the_memory_bound_counts_the_case_s_bytes_not_one_flag():
    """The same --tokens fits with a small hidden size and not with a large one: the bound is on bytes."""
    from ops.cli import OPS, build_parser
    from ops.cli.common import CliError, check_inputs_fit_memory, machine_memory_bytes
    tokens = machine_memory_bytes() // 64      # bf16 tokens (N, H) + int32 indices (N, 1): N * (2H + 4) bytes
    spec = OPS["moe_token_permute"]

    def case(hidden):
        return build_parser().parse_args(["run", "moe_token_permute", "--tokens", str(tokens), "--hidden", str(hidden),
                                          "--experts", "4", "--topk", "1"])
    check_inputs_fit_memory(case(16), spec)                   # 36 / 64 of the memory
    with pytest.raises(CliError, match="--tokens .* --hidden 64 .*bytes of memory"):
        check_inputs_fit_memory(case(64), spec)               # 132 / 64 of it


@pytest.mark.parametrize("argv,flag", [
    (["moe-layer", "--tokens", "8", "--experts", "4", "--capacity", "9", "--style", "routing_map_pad"], "--capacity"),
    (["moe-layer", "--tokens", "8", "--experts", "4", "--capacity", "9"], "--capacity"),
    (["limits", "moe_token_unpermute_with_routing_map", "--vary", "hidden", "--fix", "capacity=4"], "--capacity"),
    (["limits", "moe_token_permute_with_routing_map_grad", "--vary", "tokens", "--drop-and-pad"], "--capacity"),
], ids=["layer-capacity-above-tokens", "layer-all-styles", "limits-capacity-without-pad",
        "limits-pad-without-capacity"])
def test_flag_combinations_that_make_no_case_are_flag_errors(argv, flag, capsys):
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2 and flag in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert "not a valid shape" not in captured.out
