"""The unaligned register load's bounds are checked in bytes: a DataCopyUnAlign that starts inside its tensor and
runs past the end faults, naming the call (a check that compared elements with bytes, or the start alone, would
let it read the next buffer)."""
from __future__ import annotations

import pytest

from ascend_sim import OutOfBoundsError

from .test_regbase import SRC, launch


def test_an_unaligned_load_running_past_its_tensor_is_out_of_bounds():
    # x holds 256 fp32 (1,024 bytes): 10 from element 250 reach byte 1,040
    with pytest.raises(OutOfBoundsError) as err:
        launch([5, 250, 10, 0], SRC)
    assert "MicroAPI::DataCopyUnAlign(UB->RegTensor)" in err.value.call
    assert "1040" in str(err.value) and "1024" in str(err.value)


def test_the_same_load_ending_at_the_last_byte_is_fine():
    got = launch([5, 250, 6, 0], SRC)
    assert (got[:6] == SRC[250:256]).all()
