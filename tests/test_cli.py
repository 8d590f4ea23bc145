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


def test_demo_runs_every_mode(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for key in (0, 10, 1, 11, 101, 111):
        assert f"tilingKey {key}," in out
    for label in ("one-core sort", "multi-core sort", "numOutTokens drops rows", "split-D rows", "MXFP8 E5M2",
                  "MXFP8 E4M3FN", "MXFP4 E2M1"):
        assert label in out
    assert "MISMATCH" not in out and "all cases bit-exact" in out


def test_run_permute_with_quantisation(capsys):
    rc = main(["run", "moe_token_permute", "--tokens", "40", "--hidden", "96", "--experts", "6", "--topk", "2",
               "--soc", "950", "--quant-mode", "3", "--num-out-tokens", "-7", "--mx-scale-rule", "round_scale"])
    out = capsys.readouterr().out
    assert rc == 0 and "tilingKey 5," in out and "xQuantOutQueue" in out and "bit-exact vs golden" in out


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
     "drop-and-pad"),
    (["run", "moe_token_permute", "--tokens", "8", "--hidden", "8", "--experts", "4", "--topk", "2", "--soc", "950",
      "--quant-mode", "4"], 1, "161002"),
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
])
def test_errors_are_one_line(argv, status, fragment, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == status
    assert fragment in err and len(err.strip().splitlines()) == 1, err
