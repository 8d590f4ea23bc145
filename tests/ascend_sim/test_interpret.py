"""The interpreted tier (ascend_sim.interpret, tier.py) against the compiled kernels.

The interpreter runs the same stage source over the same memory, so every output, per-core counter and estimate
must come out identical: each case runs once compiled and once interpreted, from the `ascend-sim run` flags of the
quick tour's operators on small shapes, and is also compared with its golden. The hazard the comparison guards
against is where numba's scalar arithmetic differs from NumPy's (float32 with a Python float, integer wrap-around).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ascend_sim
from ascend_sim import ConfigError, execution_tier
from ascend_sim import interpret as interp
from ascend_sim import tier as tiers
from ops._framework import launches_of
from ops.cli import build_parser
from ops.cli.common import run_op
from ops.cli.operators import OPS
from tests.bits import assert_bits_equal
from tiling import get_soc

REPO = Path(__file__).resolve().parents[2]
SHAPE = ["--tokens", "16", "--hidden", "64", "--experts", "8"]
# (operator, extra `ascend-sim run` flags): every operator's main modes; each runs on 910B and on the 950
CASES = [
    ("moe_token_permute", ["--topk", "2"]),
    ("moe_token_permute", ["--topk", "2", "--dtype", "fp32", "--num-out-tokens", "20"]),
    ("moe_token_permute_with_routing_map", ["--topk", "2"]),
    ("moe_token_permute_with_routing_map", ["--capacity", "4", "--drop-and-pad", "--probs-dtype", "fp32"]),
    ("moe_token_unpermute", ["--topk", "2"]),
    ("moe_token_unpermute", ["--topk", "2", "--no-probs", "--dtype", "fp16"]),
    ("moe_token_unpermute_with_routing_map", ["--topk", "2"]),
    ("moe_token_unpermute_with_routing_map", ["--capacity", "4", "--drop-and-pad"]),
    ("moe_token_permute_grad", ["--topk", "2", "--dtype", "fp32"]),
    ("moe_token_permute_with_routing_map_grad", ["--topk", "2"]),
    ("moe_token_unpermute_grad", ["--topk", "2"]),
    ("moe_token_unpermute_grad", ["--topk", "2", "--no-probs"]),
    ("moe_token_unpermute_with_routing_map_grad", ["--topk", "2"]),
    ("moe_token_unpermute_with_routing_map_grad", ["--capacity", "4", "--drop-and-pad", "--no-probs"]),
]
# the 950's MX quantisation chain (MoeInitRoutingV3): MXFP8 E4M3 / E5M2 and MXFP4
MX_CASES = [pytest.param(("moe_token_permute", ["--topk", "2", "--quant-mode", q]), marks=() if q == "3" else
                         pytest.mark.slow, id=f"permute quant-mode {q}") for q in ("2", "3", "9")]


def _case_id(case) -> str:
    op, flags = case
    return op.replace("moe_token_", "") + ("" if flags == ["--topk", "2"] else " " + " ".join(flags))


def _run(op: str, flags: list[str], soc_name: str, tier: str) -> dict:
    a = build_parser().parse_args(["run", op, *SHAPE, *flags, "--soc", soc_name])
    args = OPS[op].make_inputs(a)
    with execution_tier(tier):
        return run_op(OPS[op], args, get_soc(soc_name))


def _assert_same_run(compiled: dict, interpreted: dict, where: str) -> None:
    assert interpreted["exact"], f"{where}: the interpreted run does not match the golden"
    for k, (got, want) in enumerate(zip(interpreted["outputs"], compiled["outputs"], strict=True)):
        if want is None:
            assert got is None, where
        else:
            assert_bits_equal(np.asarray(got), np.asarray(want), f"{where} output {k}")
    runs_c, runs_i = launches_of(compiled["report"]), launches_of(interpreted["report"])
    assert [r.tier for r in runs_c] == ["compiled"] * len(runs_c), where
    assert [r.tier for r in runs_i] == ["interpreted"] * len(runs_i), where
    for k, (ri, rc) in enumerate(zip(runs_i, runs_c, strict=True)):
        assert (ri.kernel, ri.tiling_key, ri.block_dim) == (rc.kernel, rc.tiling_key, rc.block_dim), where
        assert ri.cores == rc.cores, f"{where} launch {k} ({rc.kernel}): per-core counters differ"
        assert ri.estimate.time_us == rc.estimate.time_us, f"{where} launch {k} ({rc.kernel}): estimate differs"
        assert ri.estimate.bound == rc.estimate.bound, where


# the 950 runs the arch35 l0 operators: their compiled side is extra compile time for a cold suite, so they are slow;
# the default tier keeps every 910B case and the MXFP8 E4M3 chain
@pytest.mark.parametrize("soc_name", ["ascend910b", pytest.param("ascend950", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_interpreted_equals_compiled(case, soc_name):
    op, flags = case
    where = f"{_case_id(case)} on {soc_name}"
    _assert_same_run(_run(op, flags, soc_name, "compiled"), _run(op, flags, soc_name, "interpreted"), where)


@pytest.mark.parametrize("case", MX_CASES)
def test_interpreted_equals_compiled_mx_chain(case):
    op, flags = case
    _assert_same_run(_run(op, flags, "ascend950", "compiled"), _run(op, flags, "ascend950", "interpreted"),
                     f"{_case_id(case)} on ascend950")


@pytest.mark.parametrize("mode", ["race", "all"])
def test_checked_mode_findings_are_the_same(mode):
    """A checked launch interpreted calls the compiled checker entries through ctypes: a clean kernel stays clean
    and counts the same waived reads as compiled."""
    op, flags = "moe_token_unpermute_with_routing_map_grad", ["--topk", "2"]
    a = build_parser().parse_args(["run", op, *SHAPE, *flags])
    args = OPS[op].make_inputs(a)
    soc = get_soc("ascend910b")
    extras = {}
    for tier in ("compiled", "interpreted"):
        with execution_tier(tier), ascend_sim.checked(mode):
            facts = run_op(OPS[op], args, soc)
        assert facts["exact"], tier
        extras[tier] = [sorted(r.extra.items()) for r in launches_of(facts["report"])]
    # the launches ran checked (a mode bit set, races waived at their sources), and the interpreter found the same
    assert all(dict(e)["checked"] and dict(e)["waived_races"] > 0 for e in extras["compiled"]), extras["compiled"]
    assert extras["interpreted"] == extras["compiled"]


# --- the parts -----------------------------------------------------------------------------------------------
def test_overload_choice_is_keyed_on_the_arguments_its_generator_reads():
    def generator(c, dst, src, count):
        return dst if src else count
    assert interp._inspected(generator) == (1, 2, 3)

    def only_t(c, th, t, i):
        if t is None:
            return None

        def impl(c, th, t, i):
            return i
        return impl
    assert interp._inspected(only_t) == (2,)


def test_the_intrinsic_twins_do_what_the_intrinsics_do():
    from ascend_sim._memory import memcpy_bytes
    src = np.arange(16, dtype=np.uint8)
    dst = np.zeros(8, dtype=np.uint32)
    interp.twin(memcpy_bytes)(dst, 4, src, 2, 9)
    assert_bits_equal(dst.view(np.uint8)[4:13], src[2:11], "memcpy_bytes twin")
    assert_bits_equal(dst.view(np.uint8)[:4], np.zeros(4, np.uint8), "memcpy_bytes twin leaves the rest")
    from ascend_sim._memory import ub_view
    ub = np.arange(64, dtype=np.uint8)
    view = interp.twin(ub_view)(ub, np.float32, 8, 3)
    assert view.dtype == np.float32 and view.size == 3
    view[0] = 1.0
    assert_bits_equal(ub[8:12], np.float32([1.0]).view(np.uint8), "ub_view twin is a view")
    from ascend_sim.dtypes import f32_from_bits, leading_zeros64, view_f32_as_u32
    assert interp.twin(f32_from_bits)(np.uint32(0x3FC00000)) == np.float32(1.5)
    assert interp.twin(view_f32_as_u32)(np.float32(-0.0)) == np.uint32(0x80000000)
    assert [interp.twin(leading_zeros64)(np.uint64(v)) for v in (0, 1, 1 << 63)] == [64, 63, 0]
    assert interp._trailing_zeros(np.uint64(8)) == 3 and interp._trailing_zeros(np.uint32(0)) == 32


def test_an_intrinsic_without_a_twin_says_so():
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def made_up(typingctx, x):
        return types.int64(types.int64), lambda context, builder, sig, args: args[0]

    with pytest.raises(NotImplementedError, match="made_up"):
        interp.twin(made_up)(1)


def test_the_tier_comes_from_the_block_then_the_environment(monkeypatch):
    monkeypatch.setenv("ASCEND_SIM_TIER", "interpreted")
    assert tiers.resolve() == "interpreted"
    with execution_tier("compiled"):
        assert tiers.resolve() == "compiled"
        assert tiers.resolve("auto") == "auto"
    monkeypatch.setenv("ASCEND_SIM_TIER", "fast")
    with pytest.raises(ConfigError, match="ASCEND_SIM_TIER = 'fast'"):
        tiers.resolve()
    with pytest.raises(ConfigError, match="execution tier is one of auto, compiled, interpreted"):
        with execution_tier("jit"):
            pass
    monkeypatch.setenv("ASCEND_SIM_INTERPRET_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="ASCEND_SIM_INTERPRET_MAX_BYTES"):
        tiers.interpret_max_bytes()


def test_workspace_bytes_do_not_count_towards_the_interpretation_bound():
    workspace = np.zeros(1 << 20, np.uint8)
    x = np.zeros(100, np.float32)
    assert tiers.gm_bytes((x, (workspace[64:128], 3)), workspace) == 400
    assert tiers.gm_bytes((x, (workspace[64:128], 3))) == 464


# --- auto: interpret while compiling in the background, then run compiled ---------------------------------------
SMALL_CALL = textwrap.dedent("""
    import numpy as np, ml_dtypes, ops
    from ops._framework import kernel_reports, recorded_runs
    x = (np.arange(16 * 64) % 7).astype(ml_dtypes.bfloat16).reshape(16, 64)
    idx = (np.arange(32, dtype=np.int32) % 8).reshape(16, 2)
    with recorded_runs() as runs:
        out = ops.moe_token_permute(x, idx, soc="ascend910b")
    print(",".join(r.tier for r in kernel_reports(runs)), int(np.asarray(out[0]).view(np.uint16).sum()))
""")


@pytest.mark.slow
def test_auto_interprets_a_cold_call_and_compiles_it_in_the_background(tmp_path):
    """A fresh process with an empty cache interprets the call and leaves a background compile behind; once that
    is done, the next fresh process runs the compiled kernels, with the same result."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO), ASCEND_SIM_TIER="auto",
               ASCEND_SIM_BACKGROUND_COMPILE="1")

    def call() -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", SMALL_CALL], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return tuple(out.stdout.split())

    cold_tiers, cold_sum = call()
    assert set(cold_tiers.split(",")) == {"interpreted"}
    waited = subprocess.run([sys.executable, "-c", "import ascend_sim.background as b; print(b.wait(900))"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=1000)
    assert waited.stdout.strip() == "True", waited.stderr[-2000:]
    assert "Error" not in (tmp_path / "ascend_sim_background" / "background.log").read_text()
    warm_tiers, warm_sum = call()
    assert set(warm_tiers.split(",")) == {"compiled"}
    assert warm_sum == cold_sum


def test_the_fast_scalar_twins_equal_the_compiled_functions():
    """The Python-int twins of the per-element bit conversions give what numba's compiled originals give, for
    every bf16 pattern and for float32 patterns around every rounding boundary, NaN and infinity."""
    from numba import njit

    from ascend_sim.dtypes import bf16_bits_to_f32_bits, f32_bits_to_bf16_bits_rint

    @njit(cache=False)
    def compiled(xs, out_wide, out_narrow):
        for i in range(xs.size):
            out_wide[i] = bf16_bits_to_f32_bits(np.uint16(xs[i] & 0xFFFF))
            out_narrow[i] = f32_bits_to_bf16_bits_rint(xs[i])

    rng = np.random.default_rng(7)
    halves = np.arange(1 << 16, dtype=np.uint32)
    patterns = np.concatenate([halves << 16, (halves << 16) | 0x8000, (halves << 16) | 0x7FFF,
                               (halves << 16) | 0x8001, rng.integers(0, 1 << 32, 200_000, dtype=np.uint32)])
    wide = np.zeros(patterns.size, np.uint32)
    narrow = np.zeros(patterns.size, np.uint16)
    compiled(patterns, wide, narrow)
    twin_wide, twin_narrow = interp.twin(bf16_bits_to_f32_bits), interp.twin(f32_bits_to_bf16_bits_rint)
    got_wide = np.array([twin_wide(np.uint16(x & 0xFFFF)) for x in patterns.tolist()], np.uint32)
    got_narrow = np.array([twin_narrow(np.uint32(x)) for x in patterns.tolist()], np.uint16)
    assert_bits_equal(got_wide, wide, "bf16_bits_to_f32_bits twin")
    assert_bits_equal(got_narrow, narrow, "f32_bits_to_bf16_bits_rint twin")


def test_background_jobs_count_as_busy_while_waiting_or_running_in_a_live_process(tmp_path, monkeypatch):
    from ascend_sim import background
    monkeypatch.setattr(background, "job_dir", lambda: tmp_path)
    assert not background.busy()
    (tmp_path / "1-0-1.job").write_bytes(b"")
    assert background.busy()                                    # waiting for a child
    (tmp_path / "1-0-1.job").rename(tmp_path / f"1-0-1.running-{os.getpid()}")
    assert background.busy()                                    # a live child works on it
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"1-0-1.running-{os.getpid()}").rename(tmp_path / f"1-0-1.running-{dead.stdout.strip()}")
    assert not background.busy()                                # its child died: nothing will finish it
    assert background.wait(timeout_s=1.0)


def test_interpreted_atomic_adds_from_several_threads_lose_nothing():
    """Four user threads each launch, interpreted, a kernel whose cores all add into the same GM row: the stripe
    locks keep every add (int32 sums are exact, so the result does not depend on the order)."""
    import threading

    import ascend_sim.kernel_api as asc
    from tests.ascend_sim.test_atomic import _launch
    block_dim, rows, cols, off = 6, 3, 40, 5
    chip = get_soc("ascend950", aiv_num=block_dim)
    rng = np.random.default_rng(3)
    src = rng.integers(-50, 50, block_dim * rows * cols).astype(np.int32)
    dst = np.zeros(off + cols + 8, dtype=np.int32)
    tiers_seen, failures = [], []

    def worker():
        try:
            with execution_tier("interpreted"):
                report = _launch(src, dst, dt=asc.DT_INT32, rows=rows, cols=cols, dst_off=off, block_dim=block_dim,
                                 threads=1, chip=chip)
            tiers_seen.append(report.tier)
        except Exception as e:  # noqa: BLE001 - reported by the assert below
            failures.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # switch threads every few bytecodes, inside the adds (without the stripe
    try:                                # locks this loses updates)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == [] and tiers_seen == ["interpreted"] * 4
    want = np.zeros_like(dst)
    want[off: off + cols] = 4 * src.reshape(-1, cols).sum(axis=0)
    assert_bits_equal(dst, want, "four interpreted launches adding into one row")


def test_the_background_switch_is_checked(monkeypatch):
    from ascend_sim import background
    for raw, want in (("0", False), ("off", False), ("1", True), ("Yes", True)):
        monkeypatch.setenv("ASCEND_SIM_BACKGROUND_COMPILE", raw)
        assert background.enabled() is want, raw
    monkeypatch.setenv("ASCEND_SIM_BACKGROUND_COMPILE", "sometimes")
    with pytest.raises(ConfigError, match="ASCEND_SIM_BACKGROUND_COMPILE = 'sometimes'"):
        background.enabled()
