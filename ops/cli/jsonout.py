"""The JSON pieces several commands share: an aclnn call's steps, an estimate, one run's facts.

Every object here is plain JSON (numbers, strings, lists, dicts, null); docs/schemas/<command>.schema.json
describes each command's document (the schemas come from ops.cli.json_schema).
"""
from __future__ import annotations

from ascend_sim.report import gm_bytes_of

from .common import report_json, tiling_json

STEP_KINDS = ("simulated", "modelled", "host")
"""A step's `kind`: "simulated" (an ops-transformer kernel, run on the simulated cores), "modelled" (an l0
operator of another CANN library, run as NumPy on the host, its chip time modelled from its bytes by
ascend_sim.host_cost) or "host" (run on the host and not estimated: it is no chip kernel, or no chip to
model it on was given)."""


def estimate_json(label: str, e) -> dict:
    """One launch's estimate (an ascend_sim Estimate, or a host step's ModelledEstimate): times in us,
    cycles at the chip's clock, the bounding pipe ("S", "V", "MTE2", "MTE3", "HBM", "launch" or "-")."""
    modelled = bool(getattr(e, "modelled", False))
    out = dict(kernel=label, modelled=modelled, time_us=float(e.time_us), cycles=int(e.cycles), bound=e.bound,
               core_bound_cycles=int(e.core_bound_cycles), hbm_bound_cycles=int(e.hbm_bound_cycles),
               roofline_us=float(e.cost.us(e.roofline_cycles)), utilisation=dict(e.utilisation()),
               clock_mhz=float(e.cost.clock_mhz), launch_cycles=int(e.launch_cycles), gm_bytes=int(e.gm_bytes))
    if modelled:
        w = e.work
        out["modelled_work"] = dict(kind=w.kind, read_bytes=int(w.read_bytes), write_bytes=int(w.write_bytes),
                                    cores=int(e.cores), gm_us=float(e.cost.us(e.gm_cycles)),
                                    vector_us=float(e.cost.us(e.vec_cycles)),
                                    fill_us=float(e.cost.us(e.fixed_cycles)))
    else:
        crit = e.critical_core
        out.update(same_address_cycles=int(e.same_address_cycles), l2_hit_bytes=int(e.l2_hit_bytes),
                   roofline_gm_us=float(e.cost.us(e.roofline_gm_cycles)),
                   roofline_vector_us=float(e.cost.us(e.roofline_vector_cycles)),
                   slowest_block=None if crit is None else dict(
                       block_idx=int(crit.block_idx), cycles=int(crit.cycles),
                       utilisation={p: float(crit.ratio(p)) for p in e.utilisation()}))
    return out


def _step(name: str, kind: str, run, wall_time_s: float, estimate) -> dict:
    return dict(name=name, kind=kind, kernel=None if run is None else run.kernel,
                tiling_key=None if run is None else run.tiling_key, block_dim=None if run is None else run.block_dim,
                tier=None if run is None else run.tier, wall_time_s=float(wall_time_s),
                gm_bytes=int(gm_bytes_of(run.total)) if run is not None else
                (int(estimate.gm_bytes) if estimate is not None else None),
                estimate_us=None if estimate is None else float(estimate.time_us),
                cycles=None if estimate is None else int(estimate.cycles),
                bound=None if estimate is None else estimate.bound)


def steps_json(rep) -> list[dict]:
    """The aclnn call's l0 steps in order: name (the l0 call, e.g. "l0op::Sort"), kind (STEP_KINDS), the
    simulated kernel's name, tilingKey and block dim (null for a host step or a kernel with nothing to launch),
    the host wall time in s, the GM bytes the step moves (counted for a simulated kernel, from its work for a modelled
    step), and the step's estimate (us, cycles,
    bound; null where nothing is estimated). A one-kernel aclnn is one step named after its l0 operator."""
    if rep is None:
        return []
    if not hasattr(rep, "steps"):       # one RunReport: the aclnn launches its own l0 kernel and nothing else
        return [_step(f"l0op::{rep.op}", "simulated", rep, rep.wall_time_s, rep.estimate)]
    out = []
    for s in rep.steps:
        e = rep.estimate_of(s)
        kind = "simulated" if s.kind == "kernel" else ("modelled" if e is not None else "host")
        out.append(_step(s.name, kind, s.run, s.wall_time_s, e))
    return out


def call_estimate_json(rep) -> dict | None:
    """The whole call's estimate: the sum of its estimated steps (they run one after another), bound by the
    longest one's bound; null when nothing ran."""
    if rep is None:
        return None
    e = rep.estimate
    if e is None:
        return None
    launches = e.launches if hasattr(e, "launches") else ((rep.kernel, e),)
    return dict(time_us=float(e.time_us), cycles=int(e.cycles), bound=e.bound, steps_estimated=len(launches))


def verdict(facts) -> str:
    """The golden comparison in words, as `run` prints it."""
    exact = facts.get("exact")
    if exact and facts.get("within_bound"):
        return "within the index-add bound"
    return {True: "bit-exact", False: "MISMATCH vs golden", None: "not checked"}[exact]


def run_json(op: str, facts: dict, per_core: bool) -> dict:
    """One run's document (what `ascend-sim run` prints): the tiling with its UB plan, the work per pipe (per
    core with `per_core`), the steps, the estimate and the golden comparison."""
    rep = facts["report"]
    report = report_json(rep, per_core)
    if report is not None:
        total = rep.total
        report["gm_gb_per_s"] = ((total.mte2_bytes + total.mte3_bytes) / rep.wall_time_s / 1e9
                                 if rep.wall_time_s else None)
    return dict(tiling=tiling_json(op, facts["tiling"]), report=report, steps=steps_json(rep),
                estimate=call_estimate_json(rep), exact=facts.get("exact"),
                within_bound=bool(facts.get("within_bound", False)), check=verdict(facts))
