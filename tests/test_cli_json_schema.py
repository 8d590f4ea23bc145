"""Every command's `--json` document validates against its schema in docs/schemas, carries the upstream
version and the aclnn call's steps, and the schemas are strict enough to refuse a document that lost a field."""
from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from ops.cli import build_parser, demo, main, warmup  # noqa: E402
from ops.cli.json_schema import BUILDERS, schema_text, schemas  # noqa: E402

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schemas"

# small cases: the tiling ones compile nothing; the runs share the kernels of tests/test_cli.py's smallest cases
PERMUTE = ["moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2"]
COMPOSITE = ["moe_token_unpermute_with_routing_map", "--tokens", "8", "--hidden", "16", "--experts", "4", "--topk", "2"]
UNPERMUTE = ["moe_token_unpermute", "--tokens", "96", "--hidden", "256", "--experts", "8", "--topk", "2"]
GRAD = ["moe_token_unpermute_with_routing_map_grad", "--tokens", "30", "--hidden", "8", "--experts", "8", "--topk", "1",
        "--probs-dtype", "fp32", "--cores", "40"]


def _validator(command: str):
    schema = json.loads((SCHEMAS / f"{command}.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _json_of(argv, capsys, rc=0) -> dict:
    assert main(argv) == rc, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _calibrate_csv(path: Path) -> Path:
    """An op_summary CSV of modelled steps only (nothing to compile): two copies and a cast."""
    rows = [("ViewCopy", "4096,7168", "DT_BF16", "DT_BF16", 40.0), ("ViewCopy", "64", "INT32", "INT32", 2.0),
            ("Cast", "4096,64", "DT_BF16", "FLOAT", 3.0)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Op Name", "OP Type", "Task Type", "Task Duration(us)", "Block Dim", "Input Shapes",
                    "Input Data Types", "Output Shapes", "Output Data Types"])
        for k, (op, shapes, dtypes, out, us) in enumerate(rows):
            w.writerow([f"{op}_{k}", op, "AI_VECTOR_CORE", us, 48, shapes, dtypes, "", out])
    return path


def _one_tour_stop(monkeypatch):
    monkeypatch.setattr(demo, "TOUR", demo.TOUR[:1])


def _two_demo_cases(monkeypatch):
    """demo --all on two cases: a one-kernel call and a composite one (kernel + modelled host steps)."""
    every = demo.demo_cases
    wanted = {("moe_token_permute", "one-core sort"), ("moe_token_unpermute_with_routing_map",
                                                       "key 1 probs (masked select + kernel G)")}
    monkeypatch.setattr(demo, "demo_cases", lambda *a, **k: [c for c in every(*a, **k) if (c.op, c.label) in wanted])


def _one_failing_demo_case(monkeypatch):
    every = demo.demo_cases
    monkeypatch.setattr(demo, "demo_cases", lambda *a, **k: [c for c in every(*a, **k)
                                                             if c.op == "moe_token_permute"][:1])


def _warm_tour_stop_only(monkeypatch):
    """warmup over the tour's first stop only (its stages are warm from the runs above: nothing to compile)."""
    chosen = warmup.selected_cases

    def selected(op_names, soc_names):
        tour, _ = chosen(op_names, soc_names)
        return tour[:1], []
    monkeypatch.setattr(warmup, "selected_cases", selected)


# (id, command, argv, expected exit status, setup(monkeypatch) or None, what the document must show)
CASES = [
    ("tiling", "tiling", ["tiling", *GRAD, "--json"], 0, None, None),
    ("tiling-does-not-fit", "tiling", ["tiling", "moe_token_unpermute_with_routing_map_grad", "--tokens", "15000",
                                       "--hidden", "8192", "--experts", "8", "--topk", "2", "--probs-dtype", "fp32",
                                       "--json"], 1, None, lambda d: d["ub_fits"] is False),
    ("run-one-kernel", "run", ["run", *PERMUTE, "--json"], 0, None,
     lambda d: [s["name"] for s in d["steps"]] == ["l0op::MoeTokenPermute"] and d["check"] == "bit-exact"),
    ("run-per-core", "run", ["run", *PERMUTE, "--json", "--per-core"], 0, None,
     lambda d: len(d["report"]["cores"]) == d["tiling"]["block_dim"]),
    ("run-composite", "run", ["run", *COMPOSITE, "--json"], 0, None,
     lambda d: [(s["name"], s["kind"]) for s in d["steps"]] == [
         ("l0op::MoeTokenUnpermuteWithRoutingMap", "simulated"), ("l0op::ViewCopy", "modelled"),
         ("l0op::ViewCopy", "modelled")]),
    ("run-950-chain", "run", ["run", "moe_token_unpermute", "--tokens", "40", "--hidden", "300", "--experts", "6",
                              "--soc", "950", "--no-probs", "--dtype", "fp16", "--json"], 0, None,
     lambda d: [(s["name"], s["kind"]) for s in d["steps"]] == [("l0op::MoeFinalizeRoutingV2", "simulated"),
                                                                ("l0op::ViewCopy", "modelled")]),
    ("run-no-check", "run", ["run", *PERMUTE, "--json", "--no-check"], 0, None,
     lambda d: d["exact"] is None and d["check"] == "not checked"),
    ("profile-what-if", "profile", ["profile", *UNPERMUTE, "--json", "--cores", "8"], 0, None,
     lambda d: d["stock"]["cores"] == 48 and d["steps"][0]["estimate_us"] == d["estimate"]["time_us"]),
    ("profile-composite", "profile", ["profile", *COMPOSITE, "--json"], 0, None,
     lambda d: [k["modelled"] for k in d["estimate"]["kernels"]] == [False, True, True]),
    ("limits", "limits", ["limits", "moe_token_permute", "--vary", "hidden", "--fix", "tokens=64", "--fix",
                          "experts=8", "--fix", "topk=2", "--to", "4096", "--json"], 0, None,
     lambda d: len(d["profiles"]) >= 2 and d["to"] == 4096),
    ("calibrate", "calibrate", ["calibrate", "{csv}", "--fit", "hbm_bytes_per_cycle", "--json"], 0, None,
     lambda d: [f["name"] for f in d["figures"]] == ["hbm_bytes_per_cycle"] and len(d["rows"]) == 3),
    ("demo-tour", "demo", ["demo", "--json"], 0, _one_tour_stop,
     lambda d: d["mode"] == "tour" and d["ok"] and d["cases"][0]["number"] == 1),
    ("demo-all", "demo", ["demo", "--all", "--json"], 0, _two_demo_cases,
     lambda d: d["mode"] == "all" and d["passed"] == d["total"] == 2 and len(d["cases"][1]["steps"]) == 3),
    ("demo-all-failing", "demo", ["demo", "--all", "--json", "--ub-size", "2048"], 1, _one_failing_demo_case,
     lambda d: not d["ok"] and d["cases"][0]["error"]),
    ("moe-layer", "moe-layer", ["moe-layer", "--style", "topk", "--tokens", "8", "--hidden", "16", "--experts", "4",
                                "--topk", "2", "--no-fd", "--json"], 0, None,
     lambda d: d["ok"] and [r["steps"][0]["name"] for r in d["styles"][0]["runs"]][0] == "l0op::MoeTokenPermute"),
    ("warmup", "warmup", ["warmup", "--op", "moe_token_permute", "--soc", "910b", "--jobs", "1", "--json"], 0,
     _warm_tour_stop_only, lambda d: d["cases"] == 1 and d["operators"] == ["moe_token_permute"]),
]


@pytest.mark.parametrize("case_id,command,argv,rc,setup,shows", CASES, ids=[c[0] for c in CASES])
def test_every_command_json_validates_against_its_schema(case_id, command, argv, rc, setup, shows, monkeypatch,
                                                         capsys, tmp_path):
    if setup is not None:
        setup(monkeypatch)
    argv = [a.replace("{csv}", str(_calibrate_csv(tmp_path / "op_summary.csv"))) for a in argv]
    doc = _json_of(argv, capsys, rc)
    errors = sorted(_validator(command).iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])
    assert doc["reference"]["commit"].startswith("25fb6b92890d")
    if shows is not None:
        assert shows(doc)


def test_profile_json_lists_the_files_it_wrote(capsys, tmp_path):
    trace, table = tmp_path / "t.json", tmp_path / "t.csv"
    doc = _json_of(["profile", *UNPERMUTE, "--json", "--trace", str(trace), "--csv", str(table)], capsys)
    assert not list(_validator("profile").iter_errors(doc))
    assert doc["files"]["csv"] == str(table) and doc["files"]["trace"]["path"] == str(trace)
    assert doc["files"]["trace"]["events"] > 0 and doc["files"]["plot"] is None


def test_run_and_profile_give_the_same_steps_and_their_estimates_add_up(capsys):
    ran = _json_of(["run", *COMPOSITE, "--json"], capsys)
    profiled = _json_of(["profile", *COMPOSITE, "--json"], capsys)
    fields = ("name", "kind", "kernel", "tiling_key", "block_dim", "gm_bytes", "estimate_us", "cycles", "bound")
    assert [[s[f] for f in fields] for s in ran["steps"]] == [[s[f] for f in fields] for s in profiled["steps"]]
    assert sum(s["cycles"] for s in ran["steps"]) == ran["estimate"]["cycles"] == profiled["estimate"]["cycles"]
    assert sum(s["estimate_us"] for s in ran["steps"]) == pytest.approx(ran["estimate"]["time_us"], rel=1e-12)
    assert [k["time_us"] for k in profiled["estimate"]["kernels"]] == [s["estimate_us"] for s in profiled["steps"]]


def _drop(key):
    def mutate(doc):
        del doc["steps"][0][key]
    return mutate


def _set(key, value):
    def mutate(doc):
        doc["steps"][-1][key] = value
    return mutate


def _extra_top_level(doc):
    doc["unexpected"] = 1


def _negative_counter(doc):
    doc["report"]["total"]["mte2_bytes"] = -1


@pytest.mark.parametrize("mutate", [
    _drop("kind"), _drop("tiling_key"), _drop("estimate_us"), _set("kind", "emulated"),
    _set("kernel", "a host step has no kernel"), _set("name", "Sort"), _extra_top_level, _negative_counter,
], ids=["step-without-kind", "step-without-tiling-key", "step-without-estimate", "unknown-step-kind",
        "modelled-step-with-a-kernel", "step-name-not-l0op", "unknown-top-level-key", "negative-counter"])
def test_the_run_schema_refuses_a_broken_document(mutate, capsys):
    doc = _json_of(["run", *COMPOSITE, "--json"], capsys)
    validator = _validator("run")
    assert validator.is_valid(doc)
    broken = copy.deepcopy(doc)
    mutate(broken)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


@pytest.mark.parametrize("command", sorted(BUILDERS))
def test_the_schema_files_are_what_ops_cli_json_schema_builds(command):
    """docs/schemas is generated (`python -m ops.cli.json_schema docs/schemas`): a changed document shape
    must regenerate it."""
    path = SCHEMAS / f"{command}.schema.json"
    assert path.read_text(encoding="utf-8") == schema_text(schemas()[command]), f"regenerate {path}"
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_every_command_with_json_output_has_a_schema():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    with_json = {name for name, p in sub.choices.items() if any("--json" in a.option_strings for a in p._actions)}
    assert {"tiling", "run", "profile", "limits", "calibrate", "demo", "moe-layer", "warmup"} <= with_json
    missing = sorted(name for name in with_json if not (SCHEMAS / f"{name}.schema.json").is_file())
    assert not missing, f"no docs/schemas/<command>.schema.json for {missing}"
