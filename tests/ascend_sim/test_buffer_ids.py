"""asc.buffer_ids: a kernel's queue / TBuf ids come from its PipePhase's buffer-name tuple, by name."""
from __future__ import annotations

import pytest

import ascend_sim.kernel_api as asc

BUFFERS = ("inQueueX", "inQueueY", "outQueueZ", "tmpBuf")


@pytest.mark.parametrize("names, ids", [
    (("inQueueX", "inQueueY", "outQueueZ"), (0, 1, 2)),
    (("tmpBuf", "inQueueX"), (3, 0)),
    ((), ()),
], ids=["in_order", "any_order", "none"])
def test_an_id_is_the_place_of_its_name(names, ids):
    assert asc.buffer_ids(BUFFERS, *names) == ids


@pytest.mark.parametrize("buffers, names, message", [
    (BUFFERS, ("inQueueX", "outQueue"), r"\['outQueue'\] not among the buffers"),
    (("a", "b", "a"), ("b",), "name a buffer twice"),
], ids=["misspelt_name", "duplicate_buffer"])
def test_a_name_that_is_not_one_buffer_is_refused(buffers, names, message):
    with pytest.raises(ValueError, match=message):
        asc.buffer_ids(buffers, *names)


def test_ids_shared_by_sibling_tuples_stand_at_the_same_place():
    sibling = ("inQueueX", "inQueueY", "other")
    assert asc.buffer_ids(BUFFERS, "inQueueX", "inQueueY", also=(sibling,)) == (0, 1)
    with pytest.raises(ValueError, match=r"stand at places \(2,\)"):
        asc.buffer_ids(BUFFERS, "inQueueY", also=(("inQueueX", "other", "inQueueY"),))
    with pytest.raises(ValueError, match="not among"):
        asc.buffer_ids(BUFFERS, "outQueueZ", also=(sibling,))
