"""Benchmark kernels whose measured times on real chips are published: the calibration set of the cost model.

data_copy.py is the GM -> UB copy benchmark of asc-devkit's best-practice examples (DataCopyPad loops over a
12288 x 12288 fp16 matrix, and the every-core-reads-the-same-band variants); `python -m ops.bench.data_copy`
prints its estimate / measured table on the stock profiles.
"""
