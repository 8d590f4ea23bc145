"""Host-side tiling of the MoE token permute / unpermute operators, per chip profile.

`tiling.<op_name>(inputs..., attrs..., soc=...)` returns the real op's TilingResult
(tilingKey, block dim, workspace, tiling-struct fields in order, UB plan) or raises
TilingError where the real tiling fails. It knows no kernel code.
"""
from .common import TensorDesc, TilingResult, as_dtype, length_by_type  # noqa: F401
from .reference import REFERENCE_COMMIT, REFERENCE_REPO, reference, reference_line  # noqa: F401
from .platform import PROFILES, SocProfile, get_soc  # noqa: F401
from .status import (AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError,  # noqa: F401
                     TilingError)
from .moe_token_unpermute_with_routing_map_grad import moe_token_unpermute_with_routing_map_grad  # noqa: F401
from .moe_init_routing_v3 import moe_init_routing_v3  # noqa: F401
from .moe_token_permute import moe_token_permute  # noqa: F401
from .moe_token_permute_grad import moe_token_permute_grad  # noqa: F401
from .moe_token_permute_with_routing_map import moe_token_permute_with_routing_map  # noqa: F401
from .moe_token_permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad  # noqa: F401
from .moe_token_unpermute import moe_token_unpermute  # noqa: F401
from .moe_token_unpermute_grad import moe_token_unpermute_grad  # noqa: F401
from .moe_token_unpermute_with_routing_map import moe_token_unpermute_with_routing_map  # noqa: F401
from .moe_init_routing_v2 import moe_init_routing_v2  # noqa: F401
from .moe_init_routing_v2_grad import moe_init_routing_v2_grad  # noqa: F401
from .moe_finalize_routing_v2 import moe_finalize_routing_v2  # noqa: F401
from .moe_finalize_routing_v2_grad import moe_finalize_routing_v2_grad  # noqa: F401
from .moe_inplace_index_add import moe_inplace_index_add  # noqa: F401
from .moe_masked_scatter import moe_masked_scatter  # noqa: F401
