import pytest

pytest.importorskip("torch", reason="the [torch] extra is not installed")
