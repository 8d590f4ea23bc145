"""aclnn status codes and the errors that carry them (CANN docs: aclnn return codes).

These are host-side facts shared by the tiling functions (which fail with TilingError
exactly where the real op's tiling returns GRAPH_FAILED) and the operator layer.
"""
from __future__ import annotations

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_INNER_TILING_ERROR = 561002
ACLNN_ERR_INNER_NULLPTR = 561103


class AclnnError(Exception):
    """An aclnn call returned a non-zero status. `.status` is the code, the message names the argument and rule."""
    status = 0

    def __init__(self, message: str, *, status: int | None = None):
        if status is not None:
            self.status = status
        self.message = message
        super().__init__(f"[{self.status}] {message}")


class ParamNullptrError(AclnnError):
    """161001 ACLNN_ERR_PARAM_NULLPTR: a required tensor, output or attribute is missing."""
    status = ACLNN_ERR_PARAM_NULLPTR


class ParamInvalidError(AclnnError):
    """161002 ACLNN_ERR_PARAM_INVALID: dtype / format / shape outside what the op supports."""
    status = ACLNN_ERR_PARAM_INVALID


class TilingError(AclnnError):
    """561002 ACLNN_ERR_INNER_TILING_ERROR: the host tiling rejected the shapes or attributes."""
    status = ACLNN_ERR_INNER_TILING_ERROR


class InnerNullptrError(AclnnError):
    """561103 ACLNN_ERR_INNER_NULLPTR: an internal (l0) operator could not be built."""
    status = ACLNN_ERR_INNER_NULLPTR
