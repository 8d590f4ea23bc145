"""The Ascend 950 l0 operators the family's aclnn chains launch: MoeInitRoutingV3, MoeInitRoutingV2 (arch35 kernels)."""
