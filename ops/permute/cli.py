"""MoeTokenPermute (V2) on the command line: its flags, inputs, golden and demo cases."""
from __future__ import annotations

import argparse

import numpy as np

from tiling import get_soc
from tiling import moe_token_permute as tiling_op
from tiling.common import TensorDesc, as_dtype

from ..common.cli_spec import CliError, DemoCase, OpSpec, zipf_of
from . import allocate_outputs, examples, get_workspace_size_v2, golden, run_v2

NAME = "moe_token_permute"


def quant_mode(a: argparse.Namespace) -> int:
    """--quant-mode, -1 (none) when not given."""
    return -1 if a.quant_mode is None else a.quant_mode


def _need_topk(a: argparse.Namespace) -> None:
    if a.topk is None:
        raise CliError(f"{NAME} needs --topk")


def _descs(a: argparse.Namespace) -> dict:
    _need_topk(a)
    return dict(tokens=TensorDesc((a.tokens, a.hidden), as_dtype(a.dtype)),
                indices=TensorDesc((a.tokens, a.topk), as_dtype(a.indices_dtype or "int32")),
                num_out_tokens=a.num_out_tokens or 0, padded_mode=False, quant_mode=quant_mode(a))


def _inputs(a: argparse.Namespace) -> dict:
    _need_topk(a)
    tokens, indices = examples.make_inputs(a.tokens, a.hidden, a.experts, topk=a.topk, dtype=a.dtype,
                                           indices_dtype=a.indices_dtype or "int32", seed=a.seed, zipf=zipf_of(a))
    return dict(tokens=tokens, indices=indices, num_out_tokens=a.num_out_tokens or 0, padded_mode=False,
                quant_mode=quant_mode(a), mx_scale_rule=a.mx_scale_rule)


def _check_flags(a: argparse.Namespace, soc) -> None:
    if a.quant_mode not in (None, -1) and not soc.is_regbase:
        raise CliError(f"--quant-mode {a.quant_mode} quantises on ascend950 only; {soc.name} runs V1 and the real op "
                       "ignores quant_mode there: drop the flag or pass --soc ascend950")
    if a.mx_scale_rule is not None and quant_mode(a) not in (2, 3):
        raise CliError("--mx-scale-rule applies to MXFP8 quantisation only (--quant-mode 2 or 3 on ascend950)")


def _tiling(args: dict, soc):
    return tiling_op(args["tokens"], args["indices"], args["num_out_tokens"], args["padded_mode"],
                     args["quant_mode"], soc=soc)


def _workspace(args: dict, outs: tuple, soc):
    return get_workspace_size_v2(args["tokens"], args["indices"], args["num_out_tokens"], args["padded_mode"],
                                 args["quant_mode"], *outs, soc=soc, mx_scale_rule=args.get("mx_scale_rule"))


def _golden(args: dict, tiling):
    if tiling.soc.is_regbase:      # the MoeInitRoutingV3 chain: ids outside [0, 10240) dropped
        total = int(np.prod(np.shape(args["indices"])))
        rows = golden.num_out_rows(int(args["num_out_tokens"]), total)
        return golden.golden_950(args["tokens"], args["indices"], rows, args["quant_mode"],
                                 args.get("mx_scale_rule"))[:3]
    return golden.golden_v2(args["tokens"], args["indices"], args["num_out_tokens"], -1)


def _outputs(args: dict, soc) -> tuple:
    return allocate_outputs(args["tokens"], args["indices"], args["num_out_tokens"], args["quant_mode"], soc=soc)


DEMO = [
    # (label, soc (None: the demo's profile), tokens, hidden, topK, numOutTokens, quant_mode); 64 experts
    ("one-core sort", None, 512, 4096, 8, 0, -1),
    ("multi-core sort (VBS, VMS, SortOut)", None, 2048, 1024, 8, 0, -1),
    ("numOutTokens drops rows", None, 512, 4096, 8, 3000, -1),
    ("split-D rows", None, 16, 65536, 2, 0, -1),
    ("MXFP8 E5M2 (quant_mode 2, round-scale rule)", "ascend950", 512, 4096, 8, 0, 2),
    ("MXFP8 E4M3FN (quant_mode 3, round-scale rule)", "ascend950", 512, 4096, 8, 0, 3),
    ("MXFP4 E2M1 (quant_mode 9)", "ascend950", 512, 4096, 8, 0, 9),
]


def _demo_cases(soc, ub_size=None, aiv_num=None, values: bool = True, zipf: float | None = None) -> list:
    """The quantising cases run on the 950 profile whatever the demo's chip, with its custom UB / cores."""
    cases = []
    for label, where, n, h, top_k, num_out, quant in DEMO:
        case_soc = soc if where is None else get_soc(where, ub_size=ub_size, aiv_num=aiv_num)
        x, idx = examples.make_inputs(n, h, 64, topk=top_k, seed=2, zipf=zipf)
        args = dict(tokens=x, indices=idx, num_out_tokens=num_out, padded_mode=False, quant_mode=quant)
        shape = f"{n}x{h} topK {top_k}" + (f" keep {num_out}" if num_out else "") + \
            (f" [{case_soc.name}]" if where else "")
        cases.append(DemoCase(NAME, label, case_soc, args, shape))
    return cases


SPEC = OpSpec(
    name=NAME,
    order=20,
    descs=_descs,
    make_inputs=_inputs,
    tiling=_tiling,
    get_workspace_size=_workspace,
    run=run_v2,
    outputs=_outputs,
    golden=_golden,
    flags=frozenset({"indices_dtype", "num_out_tokens", "quant_mode", "mx_scale_rule"}),
    demo_title=lambda soc: f"MoeTokenPermute (V2): experts 64, bf16 tokens, int32 ids; on {soc.name} unless marked",
    demo_cases=_demo_cases,
    check_flags=_check_flags,
)
