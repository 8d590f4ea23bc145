"""`python -m ops.cli ...`: the same command line as the `ascend-sim` console script."""
import sys

from ops.cli import main

sys.exit(main())
