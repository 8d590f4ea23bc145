"""`ascend-sim calibrate`: the fit recovers figures a simulator-made CSV was generated with, every bad input is one
error naming its line, and the fitted file feeds `--cost-file` / get_soc(cost=...)."""
from __future__ import annotations

import csv
import json

import pytest

from ascend_sim import ConfigError
from ops.calibrate import InputError, calibrate, parse_fit, read_op_summary, read_pipe_utilization
from ops.calibrate.kernels import builder_for
from ops.calibrate.msprof import OpRow
from ops.cli import main
from tiling import get_soc

HEADER = ["Op Name", "OP Type", "Task Type", "Task Duration(us)", "Block Dim", "Input Shapes", "Input Data Types",
          "Output Shapes", "Output Data Types"]

# (OP Type, input shapes, input dtypes, output dtypes): big copies (HBM-bound), tiny ones (latency-bound), the
# permute / unpermute kernels (scalar-bound at these sizes), a Cast
SIMULATED = [("MoeTokenPermute", "64,256;64,2", "DT_BF16;INT32", ""),
             ("MoeTokenUnpermute", "128,256;128;64,2", "DT_BF16;INT32;DT_BF16", "")]
MODELLED = [("ViewCopy", "4096,7168", "DT_BF16", "DT_BF16"), ("ViewCopy", "64", "INT32", "INT32"),
            ("Cast", "4096,64", "DT_BF16", "FLOAT"), ("Transpose", "2048,256", "FLOAT16", "FLOAT16"),
            ("Sort", "8192", "FLOAT", "FLOAT;INT32")]


def _write_summary(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for k, (op, shapes, dtypes, out_dtypes, us) in enumerate(rows):
            w.writerow([f"{op}_{k}", op, "AI_VECTOR_CORE", us, 48, shapes, dtypes, "", out_dtypes])


def _measured_on(chip, specs, tmp_path, name="op_summary.csv"):
    """An op_summary CSV whose times are the simulator's estimates on `chip` (the "hardware" of the test)."""
    path = tmp_path / name
    _write_summary(path, [(op, sh, dt, odt, 1.0) for op, sh, dt, odt in specs])
    rows = read_op_summary(str(path))
    estimates = [builder_for(r)(r)(chip) for r in rows]
    _write_summary(path, [(op, sh, dt, odt, repr(e.time_us)) for (op, sh, dt, odt), e in zip(specs, estimates)])
    return path, estimates


TRUE_910B = {"hbm_bytes_per_cycle": 620.0, "mte2_latency_cycles": 290, "scalar_call_cycles": 5}


@pytest.mark.parametrize("soc_name, specs, true", [
    ("ascend910b", SIMULATED + MODELLED, TRUE_910B),
    ("ascend910b", SIMULATED + MODELLED, {"hbm_bytes_per_cycle": 1100.0, "mte2_latency_cycles": 180,
                                          "scalar_call_cycles": 3}),
    ("ascend950", MODELLED, {"hbm_bytes_per_cycle": 800.0, "mte2_latency_cycles": 400}),
], ids=["910b-slower", "910b-faster", "950-modelled-steps"])
def test_calibrate_recovers_the_figures_the_csv_was_made_with(tmp_path, soc_name, specs, true):
    path, _ = _measured_on(get_soc(soc_name, cost=true), specs, tmp_path)
    stock = get_soc(soc_name)
    result = calibrate(read_op_summary(str(path)), soc_name, parse_fit(",".join(true), stock.cost))
    for name, value in true.items():
        assert result.fitted[name] == pytest.approx(value, rel=0.05), (name, result.fitted)
    assert result.rms_log_error(True) < 0.01 < result.rms_log_error(False)
    assert all(abs(r.after_error) < 0.02 for r in result.rows)


def test_pipe_utilization_rows_join_the_fit(tmp_path):
    chip = get_soc("ascend910b", cost=TRUE_910B)
    path, estimates = _measured_on(chip, SIMULATED + MODELLED[:2], tmp_path)
    pipe_path = tmp_path / "PipeUtilization.csv"
    estimates[0].to_csv(str(pipe_path))
    pipes = {2: read_pipe_utilization(str(pipe_path))}
    assert set(pipes[2]) == {"total", "V", "S", "MTE2", "MTE3"}
    result = calibrate(read_op_summary(str(path)), "ascend910b",
                       parse_fit(",".join(TRUE_910B), get_soc("ascend910b").cost), pipes)
    for name, value in TRUE_910B.items():
        assert result.fitted[name] == pytest.approx(value, rel=0.05)


def test_pipe_times_of_a_modelled_row_are_refused(tmp_path):
    path, _ = _measured_on(get_soc("ascend910b"), MODELLED[:2], tmp_path)
    pipe_path = tmp_path / "pipe.csv"
    pipe_path.write_text("block_id,aiv_time(us),aiv_vec_time(us)\n0,1.0,0.5\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 2: --pipe-csv: ViewCopy is modelled"):
        calibrate(read_op_summary(str(path)), "ascend910b", parse_fit("mte2_latency_cycles", get_soc("910b").cost),
                  {2: read_pipe_utilization(str(pipe_path))})


GOOD = ["a", "ViewCopy", "AI_VECTOR_CORE", "3.5", "48", "4096,64", "DT_BF16", "", ""]


def _bad(**changes):
    row = list(GOOD)
    for column, value in changes.items():
        row[HEADER.index(column)] = value
    return row


@pytest.mark.parametrize("rows, line, match", [
    ([HEADER[:3] + HEADER[4:]], 1, "missing column\\(s\\) 'task duration\\(us\\)'"),
    ([HEADER, GOOD, _bad(**{"OP Type": "MatMul"})], 3, "unknown operator 'MatMul'"),
    ([HEADER, _bad(**{"Task Duration(us)": "fast"})], 2, "not a number: 'fast'"),
    ([HEADER, GOOD, GOOD, _bad(**{"Task Duration(us)": "-1"})], 4, "positive time"),
    ([HEADER, _bad(**{"Input Shapes": "4096,x"})], 2, "not a shape list"),
    ([HEADER, _bad(**{"Input Data Types": "DT_COMPLEX64"})], 2, "unknown data type 'DT_COMPLEX64'"),
    ([HEADER, _bad(**{"Input Data Types": "DT_BF16;INT32"})], 2, "1 input shapes but 2 input data types"),
    ([HEADER, _bad(**{"OP Type": "MoeTokenPermute"})], 2, "MoeTokenPermute takes 2 input"),
    ([HEADER, _bad(**{"OP Type": "MoeTokenPermute", "Input Shapes": "64,256;32,2", "Input Data Types": "BF16;INT32"})],
     2, "expects tokens \\(N, H\\) and indices \\(N, K\\)"),
    ([HEADER, GOOD[:4]], 2, "4 fields, the header has 9"),
    ([HEADER, _bad(**{"OP Type": ""})], 2, "empty operator type"),
], ids=["missing-column", "unknown-op", "non-numeric", "negative", "bad-shape", "bad-dtype", "count-mismatch",
        "too-few-inputs", "shape-mismatch", "short-row", "empty-op"])
def test_bad_csv_is_one_error_naming_the_line(tmp_path, capsys, rows, line, match):
    path = tmp_path / "bad.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(InputError, match=match) as info:
        rows_read = read_op_summary(str(path))
        calibrate(rows_read, "ascend910b", parse_fit("hbm_bytes_per_cycle", get_soc("910b").cost))
    assert info.value.line == line and f"bad.csv line {line}" in str(info.value)
    assert main(["calibrate", str(path), "--fit", "hbm_bytes_per_cycle"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"line {line}" in err and "Traceback" not in err


@pytest.mark.parametrize("text, match", [
    ("", "the file is empty"), (",".join(HEADER) + "\n", "no data rows"),
], ids=["empty", "header-only"])
def test_an_empty_csv_is_named(tmp_path, text, match):
    path = tmp_path / "empty.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=match):
        read_op_summary(str(path))


def test_a_bad_pipe_csv_names_its_line(tmp_path, capsys):
    path = tmp_path / "pipe.csv"
    path.write_text("block_id,aiv_time(us),aiv_vec_time(us)\n0,1.0,0.5\n1,1.0,n/a\n", encoding="utf-8")
    with pytest.raises(InputError, match="pipe.csv line 3, column 'aiv_vec_time\\(us\\)': not a number"):
        read_pipe_utilization(str(path))


@pytest.mark.parametrize("text, match", [
    ("no_such_figure", "not a figure the fit can move"), ("enabled", "not a figure the fit can move"),
    ("hbm_bytes_per_cycle:10", "name:lower:upper"), ("hbm_bytes_per_cycle:a:b", "must be numbers"),
    ("hbm_bytes_per_cycle:9:3", "0 < lower <= upper"), ("mte2_latency_cycles:1.2:1.8", "no whole number"),
    ("hbm_bytes_per_cycle,hbm_bytes_per_cycle", "twice"), ("", "names no figure"),
], ids=["unknown", "flag", "one-bound", "text-bounds", "crossed", "no-integer", "twice", "empty"])
def test_bad_fit_lists_are_refused(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_fit(text, get_soc("910b").cost)


def test_bounds_clamp_the_start_and_the_result(tmp_path):
    path, _ = _measured_on(get_soc("ascend910b", cost={"hbm_bytes_per_cycle": 400.0}), MODELLED[:1], tmp_path)
    result = calibrate(read_op_summary(str(path)), "ascend910b",
                       parse_fit("hbm_bytes_per_cycle:500:900", get_soc("910b").cost))
    assert result.fitted["hbm_bytes_per_cycle"] == pytest.approx(500.0)


def test_the_command_writes_a_cost_file_that_profile_reads(tmp_path, capsys):
    path, _ = _measured_on(get_soc("ascend910b", cost=TRUE_910B), SIMULATED + MODELLED, tmp_path)
    out = tmp_path / "fit.json"
    assert main(["calibrate", str(path), "--fit", ",".join(TRUE_910B), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "before us" in text and "after us" in text and f"wrote {out}" in text
    saved = json.loads(out.read_text())
    assert saved["soc"] == "ascend910b"
    assert saved["cost"]["mte2_latency_cycles"] == pytest.approx(290, rel=0.05)
    assert get_soc("ascend910b", cost=str(out)).cost.scalar_call_cycles == 5
    assert main(["profile", "moe_token_permute", "--tokens", "64", "--hidden", "256", "--experts", "8", "--topk", "2",
                 "--cost-file", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    fitted_us = report["estimate"]["time_us"]
    assert report["stock"]["us"] != pytest.approx(fitted_us)
    # the profile on the fitted figures is the "hardware" figure the CSV's permute row was made with
    assert fitted_us == pytest.approx(read_op_summary(str(path))[0].duration_us, rel=0.02)


def test_the_command_refuses_a_missing_csv(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "none.csv")]) == 2
    assert "no file" in capsys.readouterr().err


def test_op_row_errors_carry_their_fields():
    row = OpRow("x.csv", 7, "n", "Sort", 1.0, ((4,),), (None,))
    e = row.error("broken", "Input Shapes")
    assert (e.path, e.line, e.column, e.reason) == ("x.csv", 7, "Input Shapes", "broken")


def test_a_fit_started_from_a_cost_file_keeps_its_other_figures(tmp_path, capsys):
    path, _ = _measured_on(get_soc("ascend910b", cost={"hbm_bytes_per_cycle": 500.0}), MODELLED[:1], tmp_path)
    start = tmp_path / "start.json"
    start.write_text(json.dumps({"cost": {"scalar_call_cycles": 6, "hbm_bytes_per_cycle": 700.0}}), encoding="utf-8")
    out = tmp_path / "fit.json"
    assert main(["calibrate", str(path), "--fit", "hbm_bytes_per_cycle", "--cost-file", str(start), "--out", str(out),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fitted"]["hbm_bytes_per_cycle"] == pytest.approx(500.0, rel=0.05)
    saved = json.loads(out.read_text())["cost"]
    assert saved["scalar_call_cycles"] == 6 and saved["hbm_bytes_per_cycle"] == pytest.approx(500.0, rel=0.05)


def test_a_kernel_the_call_does_not_launch_on_that_chip_is_named(tmp_path):
    # MoeInitRoutingV3 is the permute call's kernel on ascend950 only: on 910B the call launches MoeTokenPermute
    path = tmp_path / "v3.csv"
    _write_summary(path, [("MoeInitRoutingV3", "64,256;64,2", "DT_BF16;INT32", "", 5.0)])
    with pytest.raises(InputError, match="line 2: MoeInitRoutingV3 is no kernel of this call on ascend910b"):
        calibrate(read_op_summary(str(path)), "ascend910b", parse_fit("mte2_latency_cycles", get_soc("910b").cost))
