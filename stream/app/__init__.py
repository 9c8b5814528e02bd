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

        globals()["app"] = built = build_app(Settings.from_env())
        return built
    raise AttributeError(name)
