"""The one upstream version: named once (tiling.reference), shown by `--version`, carried by every JSON output and
by the reports of the operators' runs; no module names another tree as its source."""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest

from ops.cli import main
from tiling.reference import REFERENCE_COMMIT, REFERENCE_REPO

ROOT = pathlib.Path(__file__).resolve().parents[1]
PIN = {"repo": "cannmirror/ops-transformer", "branch": "master",
       "commit": "25fb6b92890d33582f2a377aa5f9c975301a73a3", "date": "2026-07-24"}


def test_the_pin_is_the_reference_commit():
    assert (REFERENCE_REPO, REFERENCE_COMMIT) == (PIN["repo"], PIN["commit"])


def test_version_names_the_pin(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("ascend-sim ") and PIN["repo"] in out and PIN["commit"][:12] in out


JSON_COMMANDS = [
    pytest.param(["tiling", "moe_token_permute", "--tokens", "64", "--hidden", "128", "--experts", "8", "--topk", "2",
                  "--json"],
                 id="tiling"),
    pytest.param(["limits", "moe_token_permute", "--vary", "hidden", "--tokens", "64", "--experts", "8", "--topk", "2",
                  "--json"],
                 id="limits"),
]


@pytest.mark.parametrize("argv", JSON_COMMANDS)
def test_json_outputs_carry_the_pin(argv, capsys):
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["reference"] == PIN


def test_run_reports_carry_the_pin():
    from ops import aclnn
    tokens = np.arange(8 * 32, dtype=np.float32).reshape(8, 32)
    idx = np.arange(8, dtype=np.int32)
    out = np.empty((8, 32), np.float32)
    ws, ex = aclnn.moe_token_unpermute_get_workspace_size(tokens, idx, None, False, None, out, soc="ascend910b")
    aclnn.moe_token_unpermute(np.empty(ws, np.uint8), ws, ex)
    assert ex.report.reference == PIN
    assert "25fb6b92890d" in str(ex.report)


def test_no_module_names_another_tree_as_its_source():
    offenders = []
    for path in [*ROOT.glob("ops/**/*.py"), *ROOT.glob("tiling/**/*.py"), *ROOT.glob("ascend_sim/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        if re.search(r"hicann|Dec(ember)?[- ]2025 snapshot|8\.5\.0-beta", text, re.IGNORECASE):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == [], f"modules naming another upstream tree: {offenders}"
