"""``faust -A stream.app.entry worker``: the Faust command line's door to the worker.

Importing this module builds the worker through ``stream.app.run.prepare``, as ``stream
worker`` does (the topics, local state and generation, then ``assemble``), and gives Faust
its ``app``. Nothing else imports it: everywhere else, building is a call, never an
import or an attribute's access. ``stream worker`` stays the way to run a worker (its
probes, its JSON logs, its exit statuses); this door is for Faust's own commands.
"""

from stream.app.run import prepare
from stream.config import Settings

app = prepare(Settings.from_env()).app

__all__ = ["app"]
