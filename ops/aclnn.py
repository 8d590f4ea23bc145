"""Two-phase aclnn-style entry points of every operator.

    workspace_size, executor = ops.aclnn.<op>_get_workspace_size(inputs..., attrs..., outputs..., soc=...)
    ops.aclnn.<op>(workspace, workspace_size, executor, stream=None)

Outputs are preallocated by the caller and filled in place; `executor.tiling` and, after
the run, `executor.report` describe what happened.
"""
from __future__ import annotations

from . import permute as _permute
from . import permute_grad as _permute_grad
from . import permute_with_routing_map as _pwrm
from . import permute_with_routing_map_grad as _pwrm_grad
from . import unpermute as _unpermute
from . import unpermute_grad as _unpermute_grad
from . import unpermute_with_routing_map as _uwrm
from . import unpermute_with_routing_map_grad as _uwrm_grad

moe_token_permute_get_workspace_size = _permute.get_workspace_size
moe_token_permute = _permute.run
moe_token_permute_v2_get_workspace_size = _permute.get_workspace_size_v2
moe_token_permute_v2 = _permute.run_v2
moe_token_permute_grad_get_workspace_size = _permute_grad.get_workspace_size
moe_token_permute_grad = _permute_grad.run
moe_token_permute_with_routing_map_get_workspace_size = _pwrm.get_workspace_size
moe_token_permute_with_routing_map = _pwrm.run
moe_token_permute_with_routing_map_grad_get_workspace_size = _pwrm_grad.get_workspace_size
moe_token_permute_with_routing_map_grad = _pwrm_grad.run
moe_token_unpermute_get_workspace_size = _unpermute.get_workspace_size
moe_token_unpermute = _unpermute.run
moe_token_unpermute_grad_get_workspace_size = _unpermute_grad.get_workspace_size
moe_token_unpermute_grad = _unpermute_grad.run
moe_token_unpermute_with_routing_map_get_workspace_size = _uwrm.get_workspace_size
moe_token_unpermute_with_routing_map = _uwrm.run
moe_token_unpermute_with_routing_map_grad_get_workspace_size = _uwrm_grad.get_workspace_size
moe_token_unpermute_with_routing_map_grad = _uwrm_grad.run

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
