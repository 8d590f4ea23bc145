"""The routing-skew knob (--routing uniform|zipf:S): every operator's inputs keep their contract under skew,
skew makes expert loads uneven, the draw is deterministic, and uniform routing draws exactly what it drew
before the knob existed."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ops.cli import OPS, build_parser, main
from ops.common.routing import padded_columns, parse_routing, routing_name, skewed_scores, top_experts

SHAPE = ["--tokens", "64", "--hidden", "32", "--experts", "16"]
ROUTING_MAP_OPS = [op for op in OPS if "routing_map" in op]
LAYOUTS = {"topk": ["--topk", "4"], "pad": ["--capacity", "8", "--drop-and-pad"]}
CASES = [(op, layout) for op in OPS for layout in LAYOUTS if layout == "topk" or op in ROUTING_MAP_OPS]


def _inputs(op: str, layout: str, routing: str | None, seed: int = 5, shape=SHAPE) -> dict:
    argv = ["run", op, *shape, "--seed", str(seed), *LAYOUTS[layout]]
    if routing is not None:
        argv += ["--routing", routing]
    return OPS[op].make_inputs(build_parser().parse_args(argv))


@pytest.mark.parametrize("text,zipf", [("uniform", None), ("UNIFORM", None), ("zipf:1.2", 1.2), ("zipf=0", 0.0),
                                       ("zipf:2", 2.0)], ids=lambda v: str(v))
def test_routing_flag_values(text, zipf):
    assert parse_routing(text) == zipf
    assert parse_routing(routing_name(zipf)) == zipf


@pytest.mark.parametrize("text", ["zipf", "zipf:", "zipf:-1", "zipf:nan", "zipf:x", "skewed:1", ""])
def test_bad_routing_values_are_one_line_flag_errors(text, capsys):
    rc = main(["run", "moe_token_permute", *SHAPE, "--topk", "2", "--routing", text])
    err = capsys.readouterr().err
    assert rc == 2 and "--routing" in err and len(err.strip().splitlines()) == 1


def test_uniform_routing_draws_what_it_drew_before_the_knob():
    """Digest of every operator's uniform inputs (seed 5), taken with the code before --routing existed:
    numpy's Generator streams are stable, so a change here is a change of the drawn cases."""
    h = hashlib.sha256()
    for op in OPS:
        for layout in LAYOUTS:
            if layout == "pad" and op not in ROUTING_MAP_OPS:
                continue
            for k, v in _inputs(op, layout, None).items():
                h.update(k.encode())
                h.update(np.asarray(v).tobytes() if v is not None else b"None")
    assert h.hexdigest() == "f350f72346005b5f30b130230f0c5b8c1db952eec429a593e71ec7f293f6ace6"


@pytest.mark.parametrize("op,layout", CASES, ids=[f"{op}-{layout}" for op, layout in CASES])
def test_skewed_inputs_keep_the_operator_s_contract(op, layout):
    tokens, experts, topk, capacity = 64, 16, 4, 8
    args = _inputs(op, layout, "zipf:1.5")
    if op == "moe_token_permute":
        idx = args["indices"]
        assert idx.shape == (tokens, topk) and all(len(set(row)) == topk for row in idx.tolist())
        assert idx.min() >= 0 and idx.max() < experts
    elif op in ("moe_token_permute_grad", "moe_token_unpermute", "moe_token_unpermute_grad"):
        assert sorted(args["sorted_indices"].tolist()) == list(range(tokens * topk))
    elif layout == "topk":
        routing = args["routing_map"].astype(bool)
        assert (routing.sum(axis=1) == topk).all()
    else:
        routing = args["routing_map"]
        if op == "moe_token_permute_with_routing_map":       # the op drops and pads: every token routes topK (2)
            assert (routing.astype(bool).sum(axis=1) == 2).all()
        else:
            assert (routing.astype(bool).sum(axis=0) <= capacity).all()
        tokens_of = {"moe_token_unpermute_with_routing_map": "sorted_indices",
                     "moe_token_permute_with_routing_map_grad": "sorted_indices",
                     "moe_token_unpermute_with_routing_map_grad": "permute_token_id"}.get(op)
        if tokens_of is not None:       # each expert's block: capacity distinct tokens
            column = args[tokens_of]
            assert column.size == experts * capacity
            if tokens_of == "sorted_indices":
                blocks = column.reshape(experts, capacity)
                assert all(len(set(b)) == capacity for b in blocks.tolist())


@pytest.mark.parametrize("op,layout", CASES, ids=[f"{op}-{layout}" for op, layout in CASES])
def test_skewed_inputs_are_drawn_from_the_seed(op, layout):
    def digest(seed, routing):
        return [np.asarray(v).tobytes() if v is not None else None
                for v in _inputs(op, layout, routing, seed=seed).values()]
    assert digest(5, "zipf:1.5") == digest(5, "zipf:1.5")
    assert digest(5, "zipf:1.5") != digest(6, "zipf:1.5")
    assert digest(5, "zipf:1.5") != digest(5, "uniform")


def _max_load_over_mean(zipf: float | None) -> float:
    args = _inputs("moe_token_permute", "topk", routing_name(zipf), shape=["--tokens", "4096", "--hidden", "8",
                                                                          "--experts", "64"])
    loads = np.bincount(args["indices"].reshape(-1), minlength=64)
    return loads.max() / loads.mean()


def test_a_larger_exponent_sends_more_tokens_to_the_hottest_expert():
    ratios = [_max_load_over_mean(s) for s in (None, 0.0, 1.0, 2.0)]
    assert ratios[0] < 1.3 and ratios[1] < 1.3         # uniform either way
    assert ratios[1] < ratios[2] < ratios[3]
    assert ratios[3] > 5        # 64 experts, topK 4: the hottest takes a large share of the 16,384 slots


def test_zipf_scores_sample_distinct_experts_in_proportion_to_the_weights():
    rng = np.random.default_rng(0)
    picks = top_experts(skewed_scores(rng, 20000, 8, 1.0), 1).reshape(-1)
    share = np.sort(np.bincount(picks, minlength=8))[::-1] / picks.size
    want = 1 / np.arange(1, 9)
    np.testing.assert_allclose(share, want / want.sum(), atol=0.015)


def test_padded_columns_drop_the_overflow_and_pad_the_rest():
    rng = np.random.default_rng(1)
    scores = skewed_scores(rng, 50, 6, 2.0)
    kept, columns = padded_columns(scores, 2, 10)
    assert (kept.sum(axis=0) <= 10).all() and kept.sum(axis=0).max() == 10     # the hottest expert is full
    for e in range(6):
        mine = np.flatnonzero(kept[:, e])
        assert columns[e, :mine.size].tolist() == mine.tolist()           # kept tokens first, ascending
        assert len(set(columns[e].tolist())) == 10


@pytest.mark.parametrize("extra", [["--topk", "2"], ["--capacity", "8", "--drop-and-pad"]], ids=["topk", "pad"])
def test_a_skewed_case_runs_and_matches_its_golden(extra, capsys):
    rc = main(["run", "moe_token_unpermute_with_routing_map_grad", "--tokens", "64", "--hidden", "256", "--experts",
               "16", *extra, "--routing", "zipf:1.5"])
    assert rc == 0 and "vs golden" in capsys.readouterr().out


def test_the_demo_draws_its_cases_with_the_skew():
    from ops.cli.demo import demo_cases, tour_cases
    from tiling import get_soc
    soc = get_soc("910b")
    for build in (lambda z: [t.case for t in tour_cases(soc, zipf=z)], lambda z: demo_cases(soc, values=False, zipf=z)):
        uniform, skewed = build(None), build(1.2)
        assert [c.label for c in uniform] == [c.label for c in skewed]
        assert all(c.shape.endswith(", routing zipf:1.2") for c in skewed)
        assert not any("routing" in c.shape for c in uniform)
        differs = [any(np.asarray(u).tobytes() != np.asarray(s).tobytes() for u, s in zip(a.args.values(),
                                                                                          b.args.values()))
                   for a, b in zip(uniform, skewed)]
        assert all(differs)
