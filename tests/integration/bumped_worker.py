"""`python -m tests.integration.bumped_worker worker`: the worker of a release that bumped
contextBreakdown's state version (same semantics), as an upgrade would bring it."""

import os
import sys

# The bump patches a class, which only the Python core allows (docs/notes/012).
os.environ["STREAM_PURE_PYTHON"] = "1"

from stream.cli import main
from stream.projections.breakdown import ContextBreakdown

ContextBreakdown.version += 1

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
