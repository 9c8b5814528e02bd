"""The one place the worker replaces a library's code: aiokafka's, by module-level name.

aiokafka's consumer reads a fetch response through names it looks up in its own modules
when it runs, so what those names hold is what it runs. ``install`` puts there, for the
whole process (every consumer in it; the producer's encoders are untouched):

- ``gzip_decode``, ``snappy_decode``, ``lz4_decode``, ``zstd_decode`` of the record
  modules (the Cython build and the Python one, whichever the fetcher runs): decoders that
  stop past ``Patches.bounds.limit`` bytes of output (``stream.app.inflate``; why: a
  decompression bomb, note 017);
- the fetcher's ``MemoryRecords``: the guarded records, which turn a batch that does not
  inflate within bounds into one unread record and leave the rest of a partition's part
  past ``Patches.bounds.budget`` for the next fetch (``stream.app.inflate``, note 017);
- the fetcher's ``PartitionRecords``: a changelog's part handed over unread, for the bulk
  restore (``stream.app.restore``; why: the restore's speed, note 021).

``stream.app.internals.PATCHED`` lists those names, and nothing else is replaced: the
replacements are made fresh from one ``Patches`` value on every call, their bounds bound
in (no class attribute or module global holds them), so installing again with other
bounds replaces the lot and leaves nothing of the last install in use. Replacing a name
the pinned aiokafka does not define fails loudly rather than patching nothing.
"""

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stream.app import inflate, restore
from stream.app.internals import PATCHED


@dataclass(frozen=True, slots=True)
class Patches:
    """Everything the replacements depend on: the inflate bounds and the changelogs
    restored in bulk (none: every topic's records as aiokafka reads them)."""

    bounds: inflate.Bounds
    changelogs: frozenset[str] = field(default_factory=frozenset)


def replacements(patches: Patches) -> dict[str, Any]:
    """Each replaced name and what takes its place (one decoder serves every module that
    calls it by that name)."""
    return inflate.replacements(patches.bounds) | restore.replacements(patches.changelogs)


def install(patches: Patches) -> Mapping[tuple[str, str], Any]:
    """Every name of ``internals.PATCHED`` replaced with what ``patches`` makes of it;
    returns what was put where, by (module, name)."""
    made = replacements(patches)
    listed = {name for names in PATCHED.values() for name in names}
    if listed != set(made):  # the fence and the patch point name the same code
        raise RuntimeError(f"patches: listed {sorted(listed)}, made {sorted(made)}")
    placed: dict[tuple[str, str], Any] = {}
    for module_name, names in PATCHED.items():
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                raise RuntimeError(f"patches: {module_name} has no {name} to replace")
            setattr(module, name, made[name])
            placed[module_name, name] = made[name]
    return placed


__all__ = ["Patches", "install", "replacements"]
