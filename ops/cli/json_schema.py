"""JSON Schemas (draft 2020-12) of every command's `--json` document, one per command.

The schemas are written to docs/schemas/<command>.schema.json from here, so the shared pieces (a step, a UB
plan buffer, the counters) are defined once:

    python -m ops.cli.json_schema docs/schemas

tests/test_cli_json_schema.py checks that the files on disk are what this module builds, and validates each
command's output against its schema. Every object is closed (additionalProperties false) except the maps
keyed by data (tiling fields, cost figures, per-pipe bytes), whose values are typed.
"""
from __future__ import annotations

import json
import os
import sys

from ascend_sim.layout import PIPE_NAMES

from .jsonout import STEP_KINDS

DRAFT = "https://json-schema.org/draft/2020-12/schema"

BOUNDS = (*PIPE_NAMES, "HBM", "launch", "-")
"""What can bound an estimate: a pipe of the slowest block, the HBM, a modelled step's launch cost, or "-"
(nothing ran)."""

INT = {"type": "integer"}
COUNT = {"type": "integer", "minimum": 0}
NUM = {"type": "number"}
NONNEG = {"type": "number", "minimum": 0}
STR = {"type": "string"}
BOOL = {"type": "boolean"}


def nullable(schema: dict) -> dict:
    """`schema` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def closed(properties: dict, required=None, description: str | None = None) -> dict:
    """An object with exactly these properties (all required unless `required` names the required ones)."""
    out = {"type": "object", "properties": properties,
           "required": list(properties) if required is None else list(required), "additionalProperties": False}
    if description:
        out = {"description": description, **out}
    return out


def ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{name}"}


COUNTER_NAMES = ("mte2_bytes", "mte2_instr", "mte3_bytes", "mte3_instr", "vec_elem_ops", "vec_instr",
                 "scalar_gm_reads", "scalar_gm_writes", "scalar_ub_ops", "events", "pipe_barriers", "sync_all",
                 "ub_hwm_bytes", "calls")

STEP = closed({
    "name": {"type": "string", "pattern": "^l0op::", "description": "the l0 call, e.g. l0op::Sort"},
    "kind": {"enum": list(STEP_KINDS), "description": "simulated: an ops-transformer kernel run on the simulated "
             "cores; modelled: an l0 operator of another CANN library, run as NumPy on the host, its chip time "
             "modelled from its bytes; host: run on the host, not estimated"},
    "kernel": nullable({**STR, "description": "the simulated kernel (null: a host step, or nothing to launch)"}),
    "tiling_key": nullable(INT),
    "block_dim": nullable(COUNT),
    "tier": nullable({"enum": ["compiled", "interpreted"], "description": "how the simulated kernel ran "
                      "(ascend_sim.tier; null for a host or modelled step)"}),
    "wall_time_s": {**NONNEG, "description": "host wall time of the step, s (a kernel: its cores' time)"},
    "gm_bytes": nullable({**COUNT, "description": "GM bytes the step moves"}),
    "estimate_us": nullable({**NONNEG, "description": "estimated chip time of the step, us"}),
    "cycles": nullable(COUNT),
    "bound": nullable({"enum": list(BOUNDS)}),
}, description="one l0 step of the aclnn call, in the order the call runs them")
STEP["allOf"] = [
    {"if": {"properties": {"kind": {"const": "modelled"}}},
     "then": {"properties": {"kernel": {"type": "null"}, "estimate_us": NONNEG}}},
    {"if": {"properties": {"kind": {"const": "host"}}},
     "then": {"properties": {"kernel": {"type": "null"}, "estimate_us": {"type": "null"}}}},
]

DEFS = {
    "reference": closed({"repo": STR, "branch": STR, "commit": {"type": "string", "pattern": "^[0-9a-f]{40}$"},
                         "date": STR},
                        description="the upstream version (repository, branch, commit) the simulated operators "
                                    "follow"),
    "ub_buffer": closed({"name": STR, "bytes": {**COUNT, "description": "bytes per buffer"}, "count": COUNT,
                         "kind": {"enum": ["TQue", "TQueBind", "TBuf"]},
                         "position": {"enum": ["VECIN", "VECOUT", "VECCALC", "VECIN->VECOUT"]},
                         "depth": COUNT, "pipe": STR},
                        description="one buffer of the kernel's UB plan"),
    "ub_plan": {"type": "array", "items": ref("ub_buffer")},
    "soc": closed({"name": STR, "aiv_num": COUNT, "ub_size": COUNT, "ub_size_for_tiling": COUNT,
                   "npu_arch": INT}),
    "tiling": closed({
        "op": STR, "soc": ref("soc"), "tiling_key": INT, "block_dim": COUNT, "workspace_size": COUNT,
        "schedule_mode": INT,
        "fields": {"type": "object", "additionalProperties": INT, "description": "the tiling struct's fields"},
        "ub_plan": ref("ub_plan"), "ub_plan_bytes": COUNT,
        "ub_pipe_bytes": {"type": "object", "additionalProperties": COUNT,
                          "description": "UB bytes of each TPipe (the plan needs the largest)"},
        "ub_fits": BOOL}),
    "counters": closed({n: COUNT for n in COUNTER_NAMES}, description="work of the simulated kernels per pipe"),
    "core": closed({"block_idx": COUNT, **{n: COUNT for n in COUNTER_NAMES}}, description="one core's counters"),
    "step": STEP,
    "steps": {"type": "array", "items": ref("step")},
    "call_estimate": closed({"time_us": NONNEG, "cycles": COUNT, "bound": {"enum": list(BOUNDS)},
                             "steps_estimated": COUNT},
                            description="the whole call's estimate: its estimated steps one after another"),
    "report": closed({
        "kernel": STR, "wall_time_s": NONNEG, "compile_time_s": NONNEG,
        "tier": {"enum": ["compiled", "interpreted"], "description": "interpreted if any launch of the call ran in "
                 "the interpreter (ascend_sim.tier)"},
        "threads": COUNT, "ub_plan_bytes": COUNT,
        "total": ref("counters"), "cores": {"type": "array", "items": ref("core")},
        "gm_gb_per_s": nullable(NONNEG)},
        required=("kernel", "wall_time_s", "compile_time_s", "tier", "threads", "ub_plan_bytes", "total",
                  "gm_gb_per_s"),
        description="the simulated kernels' work (`cores` with --per-core)"),
    "utilisation": {"type": "object", "propertyNames": {"enum": list(PIPE_NAMES)}, "additionalProperties": NONNEG},
    "launch_estimate": {
        "type": "object", "description": "one estimated launch (a simulated kernel or a modelled step)",
        "properties": {
            "kernel": STR, "modelled": BOOL, "time_us": NONNEG, "cycles": COUNT, "bound": {"enum": list(BOUNDS)},
            "core_bound_cycles": COUNT, "hbm_bound_cycles": COUNT, "roofline_us": NONNEG,
            "utilisation": ref("utilisation"), "clock_mhz": NONNEG, "launch_cycles": COUNT, "gm_bytes": COUNT,
            "modelled_work": closed({"kind": STR, "read_bytes": COUNT, "write_bytes": COUNT, "cores": COUNT,
                                     "gm_us": NONNEG, "vector_us": NONNEG, "fill_us": NONNEG}),
            "same_address_cycles": COUNT, "l2_hit_bytes": COUNT, "roofline_gm_us": NONNEG,
            "roofline_vector_us": NONNEG,
            "slowest_block": nullable(closed({"block_idx": COUNT, "cycles": COUNT,
                                              "utilisation": ref("utilisation")})),
        },
        "required": ["kernel", "modelled", "time_us", "cycles", "bound", "core_bound_cycles", "hbm_bound_cycles",
                     "roofline_us", "utilisation", "clock_mhz", "launch_cycles", "gm_bytes"],
        "additionalProperties": False,
        "if": {"properties": {"modelled": {"const": True}}},
        "then": {"required": ["modelled_work"]},
        "else": {"required": ["same_address_cycles", "l2_hit_bytes", "roofline_gm_us", "roofline_vector_us",
                              "slowest_block"]},
    },
}


def _refs(node) -> set[str]:
    """The $defs names `node` refers to, directly."""
    if isinstance(node, dict):
        out = {node["$ref"].rsplit("/", 1)[1]} if isinstance(node.get("$ref"), str) else set()
        return out.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _document(title: str, description: str, properties: dict, required=None) -> dict:
    """A command's schema: a closed object with `reference` first, and the $defs it uses (directly or through
    other $defs), so each file stands alone."""
    body = closed({"reference": ref("reference"), **properties},
                  required=None if required is None else ("reference", *required))
    used, todo = set(), _refs(body)
    while todo:
        name = todo.pop()
        if name not in used:
            used.add(name)
            todo |= _refs(DEFS[name])
    return {"$schema": DRAFT, "$id": f"urn:ascend-sim:schema:{title}", "title": f"ascend-sim {title} --json",
            "description": description, **body, "$defs": {k: v for k, v in DEFS.items() if k in used}}


def _tiling() -> dict:
    props = dict(DEFS["tiling"]["properties"])
    return _document("tiling", "The real tiling's figures and the kernel's UB plan of one case (nothing runs).",
                     props)


def _run() -> dict:
    return _document("run", "One case through both aclnn phases: tiling and UB plan, the simulated kernels' work "
                     "(per core with --per-core), the call's l0 steps with their estimates, the golden comparison.", {
                         "op": STR, "tiling": ref("tiling"), "report": nullable(ref("report")),
                         "steps": ref("steps"), "estimate": nullable(ref("call_estimate")),
                         "exact": nullable({**BOOL, "description": "matches the golden (null: --no-check)"}),
                         "within_bound": {**BOOL, "description": "the match is within the index-add bound (the "
                                          "real op fixes no add order)"},
                         "check": {"enum": ["bit-exact", "within the index-add bound", "MISMATCH vs golden",
                                            "not checked"]}})


def _profile() -> dict:
    summary = {"ub": COUNT, "cores": COUNT, "key": INT, "block_dim": COUNT, "plan": COUNT, "us": NONNEG,
               "bound": {"enum": list(BOUNDS)}}
    return _document("profile", "The estimated chip time of one call: per launch (`estimate.kernels`) and per l0 "
                     "step, the UB plan, the files written, and with a custom chip the stock chip beside it.", {
                         "op": STR, "soc": STR, "tiling_key": INT, "block_dim": COUNT, "ub_size": COUNT,
                         "ub_plan_bytes": COUNT, "ub_plan": ref("ub_plan"),
                         "estimate": nullable(closed({
                             **DEFS["call_estimate"]["properties"],
                             "kernels": {"type": "array", "items": ref("launch_estimate")}})),
                         "steps": ref("steps"),
                         "files": closed({"csv": nullable(STR), "plot": nullable(STR), "trace": nullable(closed({
                             "path": STR, "events": COUNT, "flows": COUNT, "kernels": COUNT,
                             "dropped_calls": COUNT}))}),
                         "stock": closed({"soc": STR, **summary, "speedup": nullable({
                             **NONNEG, "description": "stock estimate / this chip's (above 1: this chip is faster)"})},
                             description="the same call on the stock chip (with --ub-size, --cores, --cost, "
                                         "--cost-file)"),
                     }, required=("op", "soc", "tiling_key", "block_dim", "ub_size", "ub_plan_bytes", "ub_plan",
                                  "estimate", "steps", "files"))


def _limits() -> dict:
    segment = closed({"first": COUNT, "last": COUNT, "tiling_key": nullable(INT), "fits": BOOL,
                      "status": nullable({**INT, "description": "the tiling's failure status (0: not a valid shape)"}),
                      "plan_bytes": COUNT, "ub_bytes": COUNT, "error": STR, "label": STR},
                     description="values first..last of the varied dimension share this outcome")
    return _document("limits", "Where each tiling key stops fitting the UB, or the tiling fails, as one dimension "
                     "grows, per chip profile.", {
                         "op": STR, "vary": {"enum": ["hidden", "tokens", "topk", "experts"]}, "held": STR,
                         "from": COUNT, "to": COUNT, "plot": nullable(STR),
                         "profiles": {"type": "array", "items": closed({
                             "soc": STR, "ub_size": COUNT, "aiv_num": COUNT,
                             "segments": {"type": "array", "items": segment}})}})


def _calibrate() -> dict:
    figures = {"type": "object", "additionalProperties": NUM}
    return _document("calibrate", "Cost-model figures fitted to msprof op_summary times: every row before and "
                     "after, the figures and the fit's error.", {
                         "soc": STR, "fitted": figures, "cost": figures,
                         "rows": {"type": "array", "items": closed({
                             "line": COUNT, "op_type": STR, "measured_us": NONNEG, "before_us": NONNEG,
                             "after_us": NONNEG, "before_error": NUM, "after_error": NUM})},
                         "evaluations": COUNT,
                         "rms_log_error": closed({"before": NONNEG, "after": NONNEG}),
                         "figures": {"type": "array", "items": closed({"name": STR, "start": NUM, "fitted": NUM,
                                                                       "lower": NUM, "upper": NUM})},
                         "out": nullable(STR)})


def _demo() -> dict:
    case = closed({
        "number": {**COUNT, "description": "tour only: the stop's number"},
        "what": {**STR, "description": "tour only: what the operator did"},
        "op": STR, "label": STR, "shape": STR, "soc": STR, "passed": BOOL,
        "status": nullable({**STR, "description": "the comparison in words, or the error"}),
        "error": nullable(STR), "tiling_key": nullable(INT), "block_dim": nullable(COUNT),
        "ub_plan_bytes": nullable(COUNT), "ub_plan": ref("ub_plan"), "total": nullable(ref("counters")),
        "steps": ref("steps"), "estimate": nullable(ref("call_estimate"))},
        required=("op", "label", "shape", "soc", "passed", "status", "error", "tiling_key", "block_dim",
                  "ub_plan_bytes", "ub_plan", "total", "steps", "estimate"))
    case["if"] = {"properties": {"passed": {"const": True}}}
    case["then"] = {"properties": {"error": {"type": "null"}, "tiling_key": INT}}
    return _document("demo", "The quick tour (mode tour) or every demo case (mode all): per case what ran, its "
                     "tiling, UB plan, work, steps, estimate and verdict.", {
                         "mode": {"enum": ["tour", "all"]}, "soc": STR,
                         "cases": {"type": "array", "items": case},
                         "passed": COUNT, "total": COUNT, "ok": BOOL, "seconds": NONNEG, "compile_seconds": NONNEG})


def _moe_layer() -> dict:
    run = closed({"op": STR, "tiling_key": nullable(INT), "block_dim": COUNT, "mte2_bytes": COUNT,
                  "mte3_bytes": COUNT, "vec_elem_ops": COUNT, "scalar_ops": COUNT, "sync_events": COUNT,
                  "wall_ms": NONNEG, "kernels": COUNT, "host_steps": COUNT, "steps": ref("steps")},
                 description="one operator call")
    style = closed({
        "style": {"enum": ["topk", "routing_map", "routing_map_pad"]}, "passed": BOOL, "error": nullable(STR),
        "dtype": STR, "shape": {"type": "object", "additionalProperties": nullable(COUNT)},
        "tolerance": NONNEG, "errors": {"type": "object", "additionalProperties": NONNEG},
        "fd_checks": {"type": "array", "items": closed({"param": STR, "analytic": NUM, "numeric": NUM,
                                                          "rel_err": NONNEG, "ok": BOOL})},
        "runs": {"type": "array", "items": run}},
        required=("style", "passed", "error"))
    style["if"] = {"properties": {"error": {"type": "null"}}}
    style["then"] = {"required": ["dtype", "shape", "tolerance", "errors", "fd_checks", "runs"]}
    return _document("moe-layer", "A whole MoE layer forward and backward per style: the operator calls with "
                     "their steps, the errors against the float64 layer, the finite-difference checks.", {
                         "soc": STR, "styles": {"type": "array", "items": style},
                         "passed": COUNT, "total": COUNT, "ok": BOOL})


def _warmup() -> dict:
    return _document("warmup", "What `warmup` compiled and where numba's cache is.", {
        "operators": {"type": "array", "items": STR}, "socs": {"type": "array", "items": STR}, "cases": COUNT,
        "compiled": closed({"signatures": COUNT, "stage_functions": COUNT, "processes": COUNT}),
        "seconds": NONNEG, "cache": closed({"where": STR, "bytes": COUNT, "files": COUNT})})


BUILDERS = {"tiling": _tiling, "run": _run, "profile": _profile, "limits": _limits, "calibrate": _calibrate,
            "demo": _demo, "moe-layer": _moe_layer, "warmup": _warmup}
"""Command name: the function that builds its schema."""


def schemas() -> dict[str, dict]:
    """{command: its schema}."""
    return {name: build() for name, build in BUILDERS.items()}


def schema_text(schema: dict) -> str:
    """A schema as written to docs/schemas (two-space indent, a final newline)."""
    return json.dumps(schema, indent=2) + "\n"


def write(directory: str) -> list[str]:
    """Write every command's schema into `directory` as <command>.schema.json; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, schema in schemas().items():
        path = os.path.join(directory, f"{name}.schema.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(schema_text(schema))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write(sys.argv[1] if len(sys.argv) > 1 else os.path.join("docs", "schemas")):
        print(written)
