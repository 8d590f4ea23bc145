"""The UB-limit explorer: documented boundaries, a brute-force scan, and the command line."""
from __future__ import annotations

import json

import pytest

from ops.cli import OPS, build_parser, main
from ops.cli.limits import _shape_rules_as_outcomes
from ops.limits import brute_force, explore, tiler
from tiling import get_soc

UWRMG = "moe_token_unpermute_with_routing_map_grad"


def _base(op, *flags):
    return build_parser().parse_args(["tiling", op, "--tokens", "1", "--hidden", "1", "--experts", "8", *flags])


def _tile(op, vary, soc, **fixed):
    base = _base(op, *(fixed.pop("flags", ())))
    for k, v in fixed.items():
        setattr(base, k, v)
    return _shape_rules_as_outcomes(tiler(OPS[op], base, vary, get_soc(soc)))


@pytest.mark.parametrize("soc,last_fit", [("ascend910b", 8048), ("ascend910_93", 8048), ("ascend950", 10432)])
def test_the_documented_key_101_hidden_limit(soc, last_fit):
    tile = _tile(UWRMG, "hidden", soc, tokens=15000, topk=2, flags=("--probs-dtype", "fp32"))
    segments = explore(tile, 1, 1 << 16)
    assert [(s.outcome.key, s.outcome.fits) for s in segments] == [(101, True), (101, False)]
    assert segments[0].last == last_fit and segments[1].first == last_fit + 1


def test_the_documented_key_101_token_limit():
    tile = _tile(UWRMG, "tokens", "ascend910b", hidden=8192, topk=8, flags=("--probs-dtype", "fp32"))
    segments = explore(tile, 1, 1 << 20)
    assert [s.first for s in segments] == [1, 1441]


@pytest.mark.parametrize("op,vary,fixed,low,high", [
    (UWRMG, "hidden", dict(tokens=15000, topk=2, flags=("--probs-dtype", "fp32")), 7900, 8200),
    (UWRMG, "tokens", dict(hidden=8192, topk=8, flags=("--probs-dtype", "fp32")), 1300, 1600),
    ("moe_token_unpermute", "topk", dict(tokens=64, hidden=7168, experts=256), 1, 300),
    ("moe_token_permute", "hidden", dict(tokens=64, topk=8, experts=64), 48400, 48700),
], ids=["uwrmg-hidden", "uwrmg-tokens", "unpermute-topk", "permute-hidden-split"])
def test_the_search_agrees_with_a_brute_force_scan(op, vary, fixed, low, high):
    tile = _tile(op, vary, "ascend910b", **fixed)
    fast = [(s.first, s.last, s.outcome.label) for s in explore(tile, low, high)]
    slow = [(s.first, s.last, s.outcome.label) for s in brute_force(tile, low, high)]
    assert fast == slow and len(fast) > 1


def test_limits_command_table_and_json(capsys):
    argv = ["limits", UWRMG, "--vary", "hidden", "--fix", "tokens=15000", "--fix", "topk=2", "--fix", "experts=8",
            "--probs-dtype", "fp32"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "hidden 1 .. 8,048" in out and "hidden 10,433 .. 65,536" in out and out.count("DOES NOT FIT") == 3
    assert main(argv + ["--soc", "910b", "--ub-size", "131072", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (profile,) = doc["profiles"]
    assert profile["ub_size"] == 131072 and profile["segments"][0]["fits"] is True
    assert profile["segments"][0]["last"] < 8048                 # a smaller UB stops fitting sooner


@pytest.mark.parametrize("extra,fragment", [
    (["--fix", "speed=3"], "--fix takes name=value"),
    (["--fix", "tokens=many"], "whole number"),
    (["--fix", "hidden=64"], "exclude each other"),
], ids=["unknown-name", "bad-value", "fix-the-varied"])
def test_limits_bad_flags(extra, fragment, capsys):
    assert main(["limits", UWRMG, "--vary", "hidden", *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
