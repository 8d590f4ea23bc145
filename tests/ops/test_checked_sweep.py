"""Checked mode over every operator at small shapes: each tiling key, token dtype, probs dtype (or none) and
drop-and-pad setting, on A2 (ascend910b) and on the 950, not only the demo's shapes.

Every case either runs clean in checked mode "all" (pipe races, GM races between cores, writes of two cores
to the same bytes, uninitialised reads, unpaired flags; what the real kernels do on purpose is waived where their
kernels are declared, each traced to its source line) or is refused by the operator's own dtype check (161002)
before anything is launched. A second test asserts the sweep reached every tiling key each operator's kernel
table declares, so a sweep that silently stopped reaching a key fails.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest

import ops
import ops._framework as framework
from ascend_sim import checked
from ops.permute import allocate_outputs as allocate_permute_outputs
from ops.permute import examples as permute_examples
from ops.permute.kernel import KERNELS as PERMUTE_KERNELS
from ops.permute_grad import examples as permute_grad_examples
from ops.permute_with_routing_map import examples as pwrm_examples
from ops.permute_with_routing_map_grad import examples as pwrmg_examples
from ops.unpermute import examples as unpermute_examples
from ops.unpermute_grad import examples as unpermute_grad_examples
from ops.unpermute_grad.kernel import KERNELS as UNPERMUTE_GRAD_KERNELS
from ops.unpermute_with_routing_map import examples as uwrm_examples
from ops.unpermute_with_routing_map_grad import examples as uwrmg_examples
from ops.unpermute_with_routing_map_grad.kernel import KERNELS as UWRMG_KERNELS
from tiling import get_soc
from tiling.status import AclnnError

SOCS = ("ascend910b", "ascend950")
# "all": the pipe races of mode "race", GM races between cores and overlapping writes of two cores
SWEEP_MODE = "all"
FLOATS = ("bf16", "fp16", "fp32")
PROBS = (None,) + FLOATS
# small shapes: 9 tokens of 48, 4 experts, topK 2, capacity 3
N, H, E, K, CAP = 9, 48, 4, 2, 3
# MoeTokenPermute's key is 1 + (multi-core sort) + 2 (split-D rows) + 4 (numOutTokens drops rows). In a UB of
# 136 KiB the multi-core sort's buffers (4 x 32 KiB) fit and one sort loop holds 4288 keys: 600 tokens x topK 8
# sort on several cores, 20 tokens on one; rows of 72 KiB do not fit twice beside the 2 KiB index buffer, rows of
# 64 elements do. Keeping 100 rows drops the rest.
PERMUTE_UB = 139264
PERMUTE_TOPK = 8
PERMUTE_TOKENS = {False: 20, True: 600}
PERMUTE_SPLIT_ROW_BYTES = 73728
PERMUTE_KEEP = 100
PERMUTE_VARIANTS = [(multi, split, keep)
                    for multi in (False, True) for split in (False, True) for keep in (False, True)]
MX_QUANT_MODES = (2, 3, 9)     # the 950's MXFP8 E5M2 / E4M3FN and MXFP4 copies of permute_tokens
# on 950 the permute is MoeInitRoutingV3 (V2) / MoeInitRoutingV2 (V1, fp tokens) on the stock UB: 900 tokens x 8
# slots pass both one-core sort limits (5856 keys for V3, 6624 int32 ids for V2)
PERMUTE_TOKENS_950 = {False: 20, True: 900}


def _permute_variant(multi: bool, split: bool, keep: bool) -> str:
    return "-".join(["multi-core-sort" if multi else "one-core-sort"] + (["split-D"] if split else [])
                    + (["keep-100"] if keep else []))


@dataclass(frozen=True)
class Case:
    op: str
    soc: str
    dtype: str
    probs: str | None = None
    drop_and_pad: bool = False
    variant: str = ""         # operator-specific: permute "keep 30" / "small UB", pwrmg "deterministic"

    @property
    def id(self) -> str:
        parts = [self.op, self.soc.replace("ascend", ""), self.dtype]
        if self.op not in ("permute", "permute_grad"):         # the two without probs
            parts.append(f"probs-{self.probs or 'none'}")
        return "-".join(parts + (["pad"] if self.drop_and_pad else []) + ([self.variant] if self.variant else []))


def _cases() -> list[Case]:
    cases = []
    for soc in SOCS:
        for dtype in FLOATS + ("int8",):
            if soc == "ascend950":
                for multi, keep in ((False, False), (False, True), (True, False), (True, True)):
                    variant = _permute_variant(multi, False, keep)
                    cases.append(Case("permute", soc, dtype, variant=variant))
                    if dtype != "int8":
                        cases.append(Case("permute", soc, dtype, variant=variant + "-v1"))
                continue
            for multi, split, keep in PERMUTE_VARIANTS:
                case = Case("permute", soc, dtype, variant=_permute_variant(multi, split, keep))
                # key 4 copies all 4800 rows of 72 KiB (345 MB): the one case too big for the quick suite
                cases.append(pytest.param(case, marks=pytest.mark.slow) if multi and split and not keep else case)
        if soc == "ascend950":
            for dtype in ("bf16", "fp16"):
                for mode in MX_QUANT_MODES:
                    cases.append(Case("permute", soc, dtype, variant=f"quant-mode-{mode}"))
        for dtype in FLOATS:
            cases.append(Case("permute_grad", soc, dtype))
            cases.append(Case("permute_grad", soc, dtype, variant="keep 12"))
            for probs in PROBS:
                cases.append(Case("unpermute", soc, dtype, probs))
                cases.append(Case("unpermute_grad", soc, dtype, probs))
                for pad in (False, True):
                    for op in ("pwrm", "uwrm", "uwrmg"):
                        cases.append(Case(op, soc, dtype, probs, pad))
                    for variant in ("", "deterministic"):
                        cases.append(Case("pwrmg", soc, dtype, probs, pad, variant))
    return cases


CASES = _cases()
CASE_OF = [c.values[0] if hasattr(c, "values") else c for c in CASES]


def _call(case: Case):
    soc = case.soc
    if case.op == "permute":
        if case.variant.startswith("quant-mode-"):
            x, idx = permute_examples.make_inputs(N, 64, E, topk=K, dtype=case.dtype, seed=1)
            return ops.moe_token_permute(x, idx, quant_mode=int(case.variant.rsplit("-", 1)[1]), soc=soc)
        multi, split = "multi-core" in case.variant, "split-D" in case.variant
        keep = PERMUTE_KEEP if "keep" in case.variant else 0
        if soc == "ascend950":
            x, idx = permute_examples.make_inputs(PERMUTE_TOKENS_950[multi], 64, 16, topk=PERMUTE_TOPK,
                                                  dtype=case.dtype, seed=1)
            if case.variant.endswith("-v1"):      # aclnnMoeTokenPermute: MoeInitRoutingV2 with numOutTokens
                outs = allocate_permute_outputs(x, idx, keep, soc=soc)
                size, executor = ops.aclnn.moe_token_permute_get_workspace_size(x, idx, keep, False, outs[0],
                                                                               outs[1], soc=soc)
                return ops.aclnn.moe_token_permute(np.empty(size, np.uint8), size, executor)
            return ops.moe_token_permute(x, idx, num_out_tokens=keep, soc=soc)
        item = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1}[case.dtype]
        hidden = PERMUTE_SPLIT_ROW_BYTES // item if split else 64
        x, idx = permute_examples.make_inputs(PERMUTE_TOKENS[multi], hidden, 16, topk=PERMUTE_TOPK, dtype=case.dtype,
                                              seed=1)
        return ops.moe_token_permute(x, idx, num_out_tokens=keep, soc=get_soc(case.soc, ub_size=PERMUTE_UB))
    if case.op == "permute_grad":
        args = permute_grad_examples.make_inputs(N, H, K, dtype=case.dtype, seed=1,
                                                 num_out_tokens=12 if case.variant else 0)
        return ops.moe_token_permute_grad(*args.values(), soc=soc)
    with_probs = case.probs is not None
    if case.op == "unpermute":
        args = unpermute_examples.make_inputs(N, H, E, K, dtype=case.dtype, probs_dtype=case.probs,
                                              with_probs=with_probs, seed=1)
        return ops.moe_token_unpermute(*args.values(), soc=soc)
    if case.op == "unpermute_grad":
        args = unpermute_grad_examples.make_inputs(N, H, topk=K, dtype=case.dtype, probs_dtype=case.probs,
                                                   with_probs=with_probs, seed=1)
        return ops.moe_token_unpermute_grad(*args.values(), soc=soc)
    examples, call = {
        "pwrm": (pwrm_examples, ops.moe_token_permute_with_routing_map),
        "pwrmg": (pwrmg_examples, ops.moe_token_permute_with_routing_map_grad),
        "uwrm": (uwrm_examples, ops.moe_token_unpermute_with_routing_map),
        "uwrmg": (uwrmg_examples, ops.moe_token_unpermute_with_routing_map_grad),
    }[case.op]
    routing = dict(capacity=CAP) if case.drop_and_pad else dict(topk=K)
    args = examples.make_inputs(N, H, E, dtype=case.dtype, probs_dtype=case.probs, drop_and_pad=case.drop_and_pad,
                                with_probs=with_probs, seed=1, **routing)
    extra = dict(deterministic=True) if case.variant == "deterministic" else {}
    return call(*args.values(), soc=soc, **extra)


@functools.lru_cache(maxsize=None)
def _outcome(case: Case) -> tuple:
    """("ran", launches) or ("refused", status, launches); launches are (op, kernel, tiling key)."""
    launches = []
    launch = framework.launch

    def recording(kernel, **kw):
        launches.append((kernel.op, kernel.name, kw.get("tiling_key")))
        return launch(kernel, **kw)

    framework.launch = recording
    try:
        with checked(SWEEP_MODE):
            _call(case)
    except AclnnError as e:
        return ("refused", e.status, tuple(launches))
    finally:
        framework.launch = launch
    return ("ran", tuple(launches))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASE_OF])
def test_checked_mode_over_every_key_dtype_and_mode(case):
    outcome = _outcome(case)
    if outcome[0] == "refused":
        assert outcome[1] == 161002 and outcome[2] == (), outcome     # the dtype check, before any launch
    # else it ran clean (some composites run host steps only for some dtypes: nothing launched is fine)


# tiling keys each operator's kernel table declares: (the l0 operator its launches report, the sweep's cases, the
# chips whose chains launch it)
A2_A3 = tuple(s for s in SOCS if s != "ascend950")
DECLARED_KEYS = {
    "MoeTokenPermute": ("permute", set(PERMUTE_KERNELS), A2_A3),
    "MoeInitRoutingV3": ("permute", {10000000, 11000000}, ("ascend950",)),     # the MX keys: the quant-mode cases
    "MoeInitRoutingV2": ("permute", {11001, 11002}, ("ascend950",)),
    "MoeTokenUnpermuteGrad": ("unpermute_grad", set(UNPERMUTE_GRAD_KERNELS), A2_A3),
    "MoeFinalizeRoutingV2Grad": ("unpermute_grad", {10001, 20011}, ("ascend950",)),
    "MoeTokenUnpermuteWithRoutingMapGrad": ("uwrmg", set(UWRMG_KERNELS), SOCS),
}


@pytest.mark.parametrize("op,soc", [(op, soc) for op in sorted(DECLARED_KEYS) for soc in DECLARED_KEYS[op][2]],
                         ids=[f"{op}-{soc}" for op in sorted(DECLARED_KEYS) for soc in DECLARED_KEYS[op][2]])
def test_the_sweep_reaches_every_declared_key(op, soc, request):
    case_op, declared, _ = DECLARED_KEYS[op]
    slow_skipped = "not slow" in (request.config.getoption("-m") or "")
    cases = [c for c in CASES if not (slow_skipped and hasattr(c, "marks") and c.marks)]
    reached = {key for c in cases for case in [c.values[0] if hasattr(c, "values") else c]
               if case.op == case_op and case.soc == soc for launch_op, _, key in _outcome(case)[-1]
               if launch_op == op}
    if slow_skipped and op == "MoeTokenPermute":
        declared = declared - {4}          # only the slow case reaches key 4
    assert reached >= declared, sorted(declared - reached)
