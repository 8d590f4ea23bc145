"""the Ascend 950 l0 operators the family's aclnn chains launch"""
