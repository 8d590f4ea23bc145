"""Two-phase aclnn-style entry points of every operator.

    workspace_size, executor = ops.aclnn.<op>_get_workspace_size(inputs..., attrs..., outputs..., soc=...)
    ops.aclnn.<op>(workspace, workspace_size, executor, stream=None)

Outputs are preallocated by the caller and filled in place; `executor.tiling` and, after
the run, `executor.report` describe what happened.
"""
from __future__ import annotations

# imported under their aclnn names (not assigned), so static analysis (the API reference's griffe) sees each as an
# alias of the function it is and shows that function's docstring
from .permute import get_workspace_size as moe_token_permute_get_workspace_size
from .permute import get_workspace_size_v2 as moe_token_permute_v2_get_workspace_size
from .permute import run as moe_token_permute
from .permute import run_v2 as moe_token_permute_v2
from .permute_grad import get_workspace_size as moe_token_permute_grad_get_workspace_size
from .permute_grad import run as moe_token_permute_grad
from .permute_with_routing_map import get_workspace_size as moe_token_permute_with_routing_map_get_workspace_size
from .permute_with_routing_map import run as moe_token_permute_with_routing_map
from .permute_with_routing_map_grad import (
    get_workspace_size as moe_token_permute_with_routing_map_grad_get_workspace_size,
)
from .permute_with_routing_map_grad import run as moe_token_permute_with_routing_map_grad
from .unpermute import get_workspace_size as moe_token_unpermute_get_workspace_size
from .unpermute import run as moe_token_unpermute
from .unpermute_grad import get_workspace_size as moe_token_unpermute_grad_get_workspace_size
from .unpermute_grad import run as moe_token_unpermute_grad
from .unpermute_with_routing_map import get_workspace_size as moe_token_unpermute_with_routing_map_get_workspace_size
from .unpermute_with_routing_map import run as moe_token_unpermute_with_routing_map
from .unpermute_with_routing_map_grad import (
    get_workspace_size as moe_token_unpermute_with_routing_map_grad_get_workspace_size,
)
from .unpermute_with_routing_map_grad import run as moe_token_unpermute_with_routing_map_grad

__all__ = [
    "moe_token_permute_get_workspace_size",
    "moe_token_permute",
    "moe_token_permute_v2_get_workspace_size",
    "moe_token_permute_v2",
    "moe_token_permute_grad_get_workspace_size",
    "moe_token_permute_grad",
    "moe_token_permute_with_routing_map_get_workspace_size",
    "moe_token_permute_with_routing_map",
    "moe_token_permute_with_routing_map_grad_get_workspace_size",
    "moe_token_permute_with_routing_map_grad",
    "moe_token_unpermute_get_workspace_size",
    "moe_token_unpermute",
    "moe_token_unpermute_grad_get_workspace_size",
    "moe_token_unpermute_grad",
    "moe_token_unpermute_with_routing_map_get_workspace_size",
    "moe_token_unpermute_with_routing_map",
    "moe_token_unpermute_with_routing_map_grad_get_workspace_size",
    "moe_token_unpermute_with_routing_map_grad",
]
