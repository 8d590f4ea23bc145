"""ascend_sim.regbase is a package of one module per concern: its namespace still holds every name the single
module had, each instruction is registered once (the package re-exports, it does not copy), and the disk-cache
stamp of an instruction module changes when a module it calls into is edited."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_sim import regbase as rb

REPO = Path(__file__).resolve().parents[2]

# every public name of ascend_sim/regbase.py before the split (kernels and tests write rb.NAME), less the OP_*
# codes, which nothing outside used and the instructions no longer dispatch on
NAMES_BEFORE_THE_SPLIT = """
VL REGBASE_ARCH PAT_ALL PAT_ALLF PAT_H PAT_Q PAT_M3 PAT_M4 LOAD_NORM LOAD_BRC STORE_NORM LAYOUT_ZERO LAYOUT_ONE
NO_SAT SAT ZEROING MERGING CMP_EQ CMP_NE CMP_GT CMP_GE CMP_LT CMP_LE
KIND_MASK KIND_LOAD KIND_STORE KIND_ARITH KIND_CAST KIND_CMPSEL KIND_REDUCE KIND_MOVE MODE_NO_SCOPE HALF_LANES
vec_scope_begin vec_scope_end vreg_f32 vreg_i32 vreg_u32 vreg_i16 vreg_u16 vreg_u8 vreg_i8 mreg create_mask
update_mask reg_load reg_load_unalign reg_store reg_store_unalign vadd vsub vmul vdiv vmax vmin vadds vmuls vabs
vduplicate varange vcast_f32_to_i32 vcast_i32_to_f32 vcompare vcompare_scalar vselect vreduce_sum vreduce_max
vreduce_min vgather_mask vinterleave vdeinterleave vmask_and reg_store_pack4 vcast_f32_to_f16 vcast_u16_to_u32
vcast_i32_to_u8 reg_load_span reg_load_dintlv reg_load_e2b reg_store_pack_b16 reg_store_span reg_store_pack4_span
unalign_reg reg_store_unalign_stream reg_store_unalign_post vmask_deinterleave vmask_or vand vshift_rights
vshift_lefts vmaxs vreduce_max_with_datablock vinterleave_inplace vpack_lowest vtruncate vmul_bf16 vcast_f16_to_bf16
vcast_b16_to_f32 vcast_f32_to_bf16 vcast_f32_to_fp8 vcast_bf16_to_fp4 vduplicate_all reg_load_unpack_b16
vcast_half_to_f32 reg_store_pack_b32 reg_load_align vunpack_u16_to_u32 reg_load_unpack4_b8 reg_gather
vduplicate_reg vcopy
""".split()

# the helpers a new instruction module builds on (other modules import them from the package)
HELPERS = "_instr _same_type _b16_operands _int_operands _vreg_words _vtmp_u8 _ub_span _ub_reach _ureg_words".split()


@pytest.mark.parametrize("name", NAMES_BEFORE_THE_SPLIT + HELPERS)
def test_the_package_namespace_keeps_every_name(name):
    assert hasattr(rb, name)


def test_each_instruction_is_defined_in_exactly_one_module():
    owners = {}
    for name in NAMES_BEFORE_THE_SPLIT + HELPERS:
        value = getattr(rb, name)
        if callable(value):
            owners.setdefault(value.__module__, []).append(name)
            assert value.__module__.startswith("ascend_sim.regbase."), (name, value.__module__)
    assert len(owners) >= 8, sorted(owners)         # spread over the concern modules, none left in __init__


def test_kernel_api_takes_the_same_functions():
    import ascend_sim.kernel_api as asc
    assert asc.vadd is rb.vadd and asc.reg_gather is rb.reg_gather and asc.R_CMP_LT == rb.CMP_LT


def _stamp(root: Path, module: str) -> str:
    code = f"import {module}; from ascend_sim._jit import source_stamp; print(source_stamp({module!r}))"
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_editing_a_callee_module_changes_the_callers_stamp(tmp_path):
    """arith's instructions inline `_instr` from registers.py: an edit there must give arith's device functions
    (cached under a name carrying this stamp) and the stages that inline them a new disk-cache entry."""
    shutil.copytree(REPO / "ascend_sim", tmp_path / "ascend_sim", ignore=shutil.ignore_patterns("__pycache__"))
    before = _stamp(tmp_path, "ascend_sim.regbase.arith")
    registers = tmp_path / "ascend_sim" / "regbase" / "registers.py"
    registers.write_text(registers.read_text() + "\n# edited\n")
    assert _stamp(tmp_path, "ascend_sim.regbase.arith") != before
