"""``python -m stream.gateway``: the same as ``stream serve`` (``server.py``)."""

import sys

from stream.gateway.server import main

sys.exit(main())
