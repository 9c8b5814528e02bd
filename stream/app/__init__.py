"""The Faust application: the only package that imports faust or rocksdict.

``faust -A stream.app worker`` finds ``app`` here; ``stream worker`` builds the same app
after creating the topics it needs.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # Built on first access, not at import, so `import stream.app.*` stays side-effect free.
    if name == "app":
        from stream.app.service import build_app
        from stream.config import Settings
        from stream.ops.admin import ensure_topics
        from stream.ops.control import worker_settings

        settings = Settings.from_env()
        # Same start-up as `stream worker`: the table needs the input's partition count,
        # the local state its epoch check, the updates the control record's generation.
        partitions = ensure_topics(settings)
        globals()["app"] = built = build_app(*worker_settings(settings)[:1], partitions)
        return built
    raise AttributeError(name)
