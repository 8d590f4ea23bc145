"""One aclnn executor run from several threads at once, each thread with its own workspace, as a user with a thread
pool would: every operator's outputs equal the golden afterwards (runs of one executor take turns; a chain's
intermediates belong to the executor, and two runs at once used to mix them into wrong tokens)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from ops.cli import build_parser
from ops.cli.common import prepare_op
from ops.cli.operators import OPS
from ops.common.cli_spec import same_bits
from tiling import get_soc

SMALL = ["--tokens", "64", "--hidden", "128", "--experts", "8", "--topk", "2"]
THREADS, RUNS_PER_THREAD = 4, 3


def _case(op: str, soc: str):
    a = build_parser().parse_args(["run", op, *SMALL, "--soc", soc])
    spec = OPS[op]
    return spec, spec.make_inputs(a), get_soc(soc)


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_one_executor_from_four_threads(op, soc):
    spec, args, chip = _case(op, soc)
    tiling_result, outs, size, executor = prepare_op(spec, args, chip)
    errors: list[BaseException] = []

    def worker():
        try:
            for _ in range(RUNS_PER_THREAD):
                spec.run(np.empty(size, dtype=np.uint8), size, executor)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{op} on {soc}: {errors[0]!r}"
    want = spec.golden(args, tiling_result)
    if spec.check is not None:
        assert spec.check(outs, want, args), f"{op} on {soc}: outputs differ from the golden after {THREADS} threads"
    else:
        for k, (o, w) in enumerate(zip(outs, want)):
            if w is not None:
                assert same_bits(o, w), f"{op} on {soc}: output {k} differs from the golden after {THREADS} threads"
