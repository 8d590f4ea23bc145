"""Outlined machine-model calls (_outline.py): argument kinds cross a by-address call unchanged, one variant serves
every call site of one kind, a stage run without ensure_compiled still finds its variants, and a core that has no
way to find one records a fault instead of crashing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import types

import ascend_sim.kernel_api as asc
from ascend_sim import _outline
from ascend_sim.core import make_core
from ascend_sim.datacopy import DataCopyExtParams, GlobalTensor
from ascend_sim.layout import ERR_BASE, F_OUTLINE, OUTLINE_RESOLVER, OUTLINE_TABLE

from .harness import que, run, tbuf

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("ty, kind, words", [
    (types.Array(types.float32, 1, "C"), "afloat32", 2),
    (types.Array(types.uint16, 1, "C"), "auint16", 2),
    (types.int32, "i", 1),
    (types.uint64, "u", 1),
    (types.boolean, "b", 1),
    (types.float32, "f", 1),
    (types.float64, "d", 1),
    (types.none, "n", 0),
    (types.Tuple((types.int64, types.float32)), "T(i,f)", 2),
], ids=lambda v: str(v))
def test_kinds_and_word_counts(ty, kind, words):
    assert _outline._kind(ty) == kind
    namespace: dict = {}
    exprs, n = _outline._rebuild(kind, namespace)
    assert len(exprs) == 1 and n == words


@pytest.mark.parametrize("ty", [types.Array(types.float32, 2, "C"), types.Array(types.float32, 1, "A"),
                                types.unicode_type], ids=str)
def test_unsupported_kinds_stay_inline(ty):
    assert _outline._kind(ty) is None


def test_namedtuple_kind_names_its_class():
    params = types.NamedUniTuple(types.int64, 4, DataCopyExtParams)
    kind = _outline._kind(types.NamedTuple((types.Array(types.uint8, 1, "C"), types.int64, types.int64), GlobalTensor))
    assert kind == "Nascend_sim.datacopy.GlobalTensor(auint8,i,i)"
    assert _outline._kind(params) == "Nascend_sim.datacopy.DataCopyExtParams(i,i,i,i)"
    assert _outline._kind(types.Array(types.float32, 1, "C"), as_bytes=True) == "B"


@asc.global_aicore
def _copy_roundtrip_stage(c, src, dst, n):
    """GM -> UB -> GM of n float32 through TBuf 0."""
    t = asc.tbuf_get(c, 0, asc.ub_f32(c))
    asc.data_copy_pad(c, t, asc.gm_at(src, 0), asc.DataCopyExtParams(1, n * 4, 0, 0), asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(dst, 0), t, asc.DataCopyExtParams(1, n * 4, 0, 0))


def test_outlined_copy_gives_the_bytes_and_counters():
    src = np.arange(40, dtype=np.float32)
    dst = np.zeros_like(src)
    report = run([_copy_roundtrip_stage], [tbuf("buf", 256)], GlobalTensor(src, 0, 0), GlobalTensor(dst, 1, 0),
                 40, gm_names=("src", "dst"))
    np.testing.assert_array_equal(dst, src)
    assert report.total.mte2_bytes == 160 and report.total.mte3_bytes == 160


@asc.global_aicore
def _queue_two_types_stage(c):
    """AllocTensor / EnQue / DeQue / FreeTensor of one queue's buffer as float32, then as uint16."""
    t = asc.alloc_tensor(c, 0, asc.ub_f32(c))
    asc.en_que(c, 0, t)
    t = asc.de_que(c, 0, asc.ub_f32(c))
    asc.free_tensor(c, 0, t)
    h = asc.alloc_tensor(c, 0, asc.ub_u16(c))
    asc.en_que(c, 0, h)
    h = asc.de_que(c, 0, asc.ub_u16(c))
    asc.free_tensor(c, 0, h)


def test_one_variant_per_kind_whatever_the_element_type_of_a_bytes_argument():
    report = run([_queue_two_types_stage], [que("q", 256)])
    assert report.total.events > 0
    for name in ("en_que", "free_tensor"):
        variants = [d for d in _outline._VARIANTS if f"ascend_sim.queue:{name}:" in d]
        # float32 and uint16 LocalTensors both cross as bytes: one variant, of kind B
        assert len(variants) == 1 and variants[0].endswith("|Nascend_sim.core.Core(auint8,aint64,i,i),i,B#"), \
            variants


def test_core_without_a_table_records_a_fault_not_a_crash():
    src = np.arange(8, dtype=np.float32)
    dst = np.zeros_like(src)
    run([_copy_roundtrip_stage], [tbuf("buf", 256)], GlobalTensor(src, 0, 0), GlobalTensor(dst, 1, 0), 8)
    dst = np.zeros_like(src)
    core = make_core(0, 1, 256, 8, 4095, 2201)
    core.state[OUTLINE_TABLE] = 0
    core.state[OUTLINE_RESOLVER] = 0
    _copy_roundtrip_stage(core, GlobalTensor(src, 0, 0), GlobalTensor(dst, 1, 0), 8)
    assert core.state[ERR_BASE] == F_OUTLINE
    assert not dst.any()


def test_stage_called_directly_in_a_fresh_process_resolves_its_variants(tmp_path):
    """Second process: the stage loads from the disk cache without ensure_compiled; its outlined calls find their
    variants through the resolver callback."""
    code = (
        "import numpy as np\n"
        "from tests.ascend_sim.test_outline import _copy_roundtrip_stage\n"
        "from ascend_sim.core import make_core\n"
        "from ascend_sim.datacopy import GlobalTensor\n"
        "from ascend_sim.layout import ERR_BASE\n"
        "import ascend_sim.queue\n"
        "src = np.arange(8, dtype=np.float32); dst = np.zeros_like(src)\n"
        "core = make_core(0, 1, 256, 8, 4095, 2201)\n"
        "_copy_roundtrip_stage(core, GlobalTensor(src, 0, 0), GlobalTensor(dst, 1, 0), 8)\n"
        "print(int(core.state[ERR_BASE]), int(core.state[ERR_BASE + 1]))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), NUMBA_CACHE_DIR=str(tmp_path))
    outs = [subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for out in outs:
        assert out.returncode == 0, out.stderr[-2000:]
    # no queue table: TBuf::Get of queue 0 faults (F_QUE_INDEX) before any copy, in both the compiling and the
    # cache-loading process; what matters is that the call got to its variant and ran it
    first, second = (o.stdout.split() for o in outs)
    assert first == second and first[0] != str(F_OUTLINE)
