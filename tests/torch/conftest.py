# The torch tests need the [torch] extra; without it this directory is not collected (a skip raised here would be
# a collection error).
import importlib.util

if importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["test_*.py"]
