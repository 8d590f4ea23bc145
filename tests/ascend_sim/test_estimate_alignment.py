"""An estimate depends on the kernel and its inputs, not on where the host allocator put the arrays: the L2 share,
the same-address log and the scalar data cache key GM bytes by device address (gm_cost.device_address).

Each case runs one aclnn call on copies of the same inputs placed 0, 16, 48 and 264 bytes past a 4 KiB boundary
(the host allocator gives large arrays any 16-byte offset) and compares the whole per-core estimate.
"""
from __future__ import annotations

import numpy as np
import pytest

import ops
from ops import _framework
from ops.permute.examples import make_inputs as permute_inputs
from ops.unpermute_with_routing_map_grad.examples import make_inputs as uwrmg_inputs

SHIFTS = (0, 16, 48, 264)


def _placed(a: np.ndarray, shift: int) -> np.ndarray:
    """A copy of `a` whose first byte is `shift` bytes past a 4096-byte boundary."""
    raw = np.zeros(a.nbytes + 8192, dtype=np.uint8)
    start = (-raw.ctypes.data) % 4096 + shift
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _fingerprint(call, arrays, soc):
    with _framework.recorded_runs() as runs:
        call(*arrays, soc=soc)
    fp = []
    for run in runs:
        report = run.executor.report
        for r in getattr(report, "kernel_runs", [report]):
            e = r.estimate
            fp.append((e.l2_hit_bytes, e.same_address_bytes, tuple(c.cycles for c in e.cores)))
    return fp


CASES = {
    # hidden 100 fp32: rows of 400 bytes straddle L2 lines and 512-byte regions differently at each host offset
    "uwrmg-h100-fp32": (ops.moe_token_unpermute_with_routing_map_grad,
                        lambda: list(uwrmg_inputs(512, 100, 64, topk=8, dtype="fp32", with_probs=True, seed=2)
                                     .values())),
    "permute-h333-fp16": (ops.moe_token_permute,
                          lambda: list(permute_inputs(512, 333, 64, topk=8, dtype="fp16", seed=1))),
}


@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_estimate_does_not_move_with_the_host_alignment(case, soc):
    call, make = CASES[case]
    arrays = make()
    prints = {shift: _fingerprint(call, [_placed(a, shift) if isinstance(a, np.ndarray) else a for a in arrays], soc)
              for shift in SHIFTS}
    assert prints[0], "no kernel ran"
    for shift in SHIFTS[1:]:
        assert prints[shift] == prints[0], f"{case} on {soc}: the estimate moved with a host offset of {shift} bytes"
