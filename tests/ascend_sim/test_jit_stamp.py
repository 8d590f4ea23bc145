"""The disk-cache stamp of a kernel module covers the modules whose constants it inlines."""
from __future__ import annotations

import ascend_sim.queue  # noqa: F401
from ascend_sim._jit import stamped_modules


def test_a_module_importing_only_constants_is_stamped_with_their_module():
    # queue.py takes QUE_BASE and friends from core.py as plain ints: an edit of core.py's layout must still
    # recompile the queue calls (a stale cache read the queue table at the old offsets)
    assert "ascend_sim.core" in stamped_modules("ascend_sim.queue")
    assert "ascend_sim.pipe" in stamped_modules("ascend_sim.queue")


def test_import_statements_are_parsed_again_after_an_edit(tmp_path):
    """The parse of a module's import statements is memoised per version of its file: an edit that adds an
    import must be seen (the disk-cache stamp would otherwise miss the new module)."""
    import os

    from ascend_sim._jit import _import_statement_names
    src = tmp_path / "mod.py"
    src.write_text("from .core import QUE_BASE\n")
    assert _import_statement_names(str(src), "ascend_sim") == ("ascend_sim.core", "ascend_sim.core.QUE_BASE")
    src.write_text("from .core import QUE_BASE\nfrom . import timeline\n")
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))     # a new mtime even on a coarse clock
    assert "ascend_sim.timeline" in _import_statement_names(str(src), "ascend_sim")


def test_a_kernel_stamp_does_not_depend_on_what_was_imported_before():
    """`import ops` loads operators on first use, so processes import kernel modules in different orders (a
    friendly call loads one operator, the demo all of them): the stamps, and with them numba's disk-cache
    entries, must come out the same, or a warm cache would miss. Packages hold whatever submodules were loaded
    as attributes, and imports inside functions load modules late: neither may enter a stamp."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import json, sys, ops\n"
            "for name in sys.argv[1:]:\n"
            "    __import__(name) if '.' in name else getattr(ops, name)\n"
            "from ascend_sim._jit import _STAMPS\n"
            "print(json.dumps(_STAMPS))\n")
    env = dict(os.environ, PYTHONPATH=str(repo))

    def stamps(*first):
        out = subprocess.run([sys.executable, "-c", code, *first], cwd=repo, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    everything = stamps("ops.cli")
    for first in ("moe_token_permute_with_routing_map", "moe_token_unpermute_grad", "aclnn"):
        alone = stamps(first)
        assert alone and {k: everything.get(k) for k in alone} == alone, first


def test_import_names_persist_across_processes(tmp_path):
    """The parsed import statements behind the stamps are written for the next process, which then parses no
    file it parsed before; the stamp it computes from the memo is the one a fresh parse gives."""
    import json
    import os
    import subprocess
    import sys
    code = ("import ascend_sim._jit as j, ascend_sim.vector as v; "
            "print(j.source_stamp('ascend_sim.vector'), j._import_names_added)")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    first, second = (subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
                     .stdout.split() for _ in range(2))
    memo = json.loads(next(tmp_path.glob("ascend_sim_import_names.*.json")).read_text())
    assert any(row[0].endswith(os.path.join("ascend_sim", "vector.py")) for row in memo)
    assert first[0] == second[0]                   # the same stamp, parsed or read back
    assert first[1] == "True" and second[1] == "False", (first, second)


def test_the_import_names_memo_drops_entries_of_edited_files(tmp_path):
    """An entry whose file no longer has the recorded mtime / size (the file was edited) is not written back."""
    import json
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    vector = os.path.join(repo, "ascend_sim", "vector.py")
    memo = tmp_path / "ascend_sim_import_names.v1.json"
    memo.write_text(json.dumps([[vector, "ascend_sim", 1, 2, ["ascend_sim.layout"]]]))
    code = "import ascend_sim._jit as j, ascend_sim.vector as v; j.source_stamp('ascend_sim.vector')"
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)),
                   check=True, cwd=repo, capture_output=True)
    rows = json.loads(memo.read_text())
    st = os.stat(vector)
    assert [r[2:4] for r in rows if r[0] == vector] == [[st.st_mtime_ns, st.st_size]]
