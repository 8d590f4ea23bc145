"""The one upstream version this project simulates.

Every operator, l0 operator, kernel, tiling, status code and aclnn chain, on every chip, follows
`cannmirror/ops-transformer` at one commit of its master branch. A module's "source" line names paths in that
tree; read them with `git -C <mirror> show 25fb6b92890d:<path>` (the mirror's HEAD is an older release branch).
"""
from __future__ import annotations

REFERENCE_REPO = "cannmirror/ops-transformer"
"""The upstream repository every operator follows (owner/name)."""
REFERENCE_BRANCH = "master"
REFERENCE_COMMIT = "25fb6b92890d33582f2a377aa5f9c975301a73a3"
"""The commit of REFERENCE_REPO's master branch every tiling, kernel, status and chain follows (40 hex digits)."""
REFERENCE_DATE = "2026-07-24"
# the short form the modules' source lines and the docs use
REFERENCE_SHORT = REFERENCE_COMMIT[:12]


def reference() -> dict:
    """The pin as the JSON outputs and reports carry it."""
    return {"repo": REFERENCE_REPO, "branch": REFERENCE_BRANCH, "commit": REFERENCE_COMMIT, "date": REFERENCE_DATE}


def reference_line() -> str:
    """One line for `--version` and text reports."""
    return f"{REFERENCE_REPO}@{REFERENCE_BRANCH} {REFERENCE_SHORT} ({REFERENCE_DATE})"
