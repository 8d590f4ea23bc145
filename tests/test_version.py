"""One version: ascend_sim.__version__ is what the installed package's metadata says (pyproject.toml reads it), what
`ascend-sim --version` prints, and a release CHANGELOG.md describes."""
from __future__ import annotations

import importlib.metadata
import pathlib
import re

import pytest

import ascend_sim
from ops.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", ascend_sim.__version__), ascend_sim.__version__


def test_the_metadata_has_the_package_version():
    try:
        installed = importlib.metadata.version("ascend-sim")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ascend-sim is not installed here (a checkout run in place has no metadata)")
    assert installed == ascend_sim.__version__


def test_pyproject_takes_the_version_from_the_package():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dynamic = \["version"\]$', text, re.M), "pyproject.toml must not carry its own version"
    assert re.search(r'^version = \{attr = "ascend_sim.__version__"\}$', text, re.M)


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"ascend-sim {ascend_sim.__version__}, simulating ")


def test_the_changelog_describes_the_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(ascend_sim.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)
