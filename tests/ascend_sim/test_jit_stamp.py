"""The disk-cache stamp of a kernel module covers the modules whose constants it inlines."""
from __future__ import annotations

import ascend_sim.queue  # noqa: F401
from ascend_sim._jit import stamped_modules


def test_a_module_importing_only_constants_is_stamped_with_their_module():
    # queue.py takes QUE_BASE and friends from core.py as plain ints: an edit of core.py's layout must still
    # recompile the queue calls (a stale cache read the queue table at the old offsets)
    assert "ascend_sim.core" in stamped_modules("ascend_sim.queue")
    assert "ascend_sim.pipe" in stamped_modules("ascend_sim.queue")
