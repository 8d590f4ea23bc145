"""The Ascend 950 l0 operators the family's aclnn chains launch: MoeInitRoutingV3, MoeInitRoutingV2, MoeInplaceIndexAdd,
MoeFinalizeRoutingV2Grad (arch35 kernels)."""
