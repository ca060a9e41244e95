"""Which keyed backends exist and how each kind of state handle is read back.

Two tables, filled by the backend packages when they are imported (``tidemark.state`` imports
heap and RocksDB; ``tidemark.changelog.backend`` registers its wrapper):

* backend name (``"heap"``, ``"rocksdb"``) -> factory of a fresh backend for a
  :class:`BackendContext`; wiring type -> wrapper (the changelog backend wraps any backend given
  a :class:`~tidemark.changelog.backend.wrapper.ChangelogWiring`). :func:`create_backend` builds
  the named backend and wraps it with every wiring given, in order;
* state-handle kind -> reader of the handle's entries, used by
  :func:`tidemark.state.restore.read_handle` so that any backend restores any handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.state.backend import KeyedStateBackend
from tidemark.state.snapshot import RestoredPart
from tidemark.state.ttl import Clock
from tidemark.storage.base import CheckpointStorage


@dataclass(frozen=True)
class BackendContext:
    """What every backend factory gets: the key groups it owns, where it may keep local files
    (a directory of its own, deleted on close) and the clock of TTL (default: the wall clock)."""

    key_groups: KeyGroupRange
    max_parallelism: int
    operator_id: str = "operator"
    local_dir: Path | None = None
    clock: Clock | None = None
    backend_options: Any = None  # the backend's own (RocksDB: a RocksDBSetup); None: its defaults


BackendFactory = Callable[[BackendContext], KeyedStateBackend]
BackendWrapper = Callable[[KeyedStateBackend, Any], KeyedStateBackend]
HandleReader = Callable[[StateHandle, CheckpointStorage, KeyGroupRange], Iterator[RestoredPart]]

_FACTORIES: dict[str, BackendFactory] = {}
_WRAPPERS: dict[type, BackendWrapper] = {}
_READERS: dict[StateHandleKind, HandleReader] = {}


class UnknownBackendError(ValueError):
    """No backend, wrapper or handle reader is registered under that name or kind."""


def register_backend(name: str, factory: BackendFactory) -> None:
    _FACTORIES[name] = factory


def register_wrapper(wiring: type, wrapper: BackendWrapper) -> None:
    """``wrapper(backend, wiring_instance)`` wraps a backend when ``create_backend`` is given an
    instance of ``wiring``."""
    _WRAPPERS[wiring] = wrapper


def register_handle_reader(kind: StateHandleKind, reader: HandleReader) -> None:
    _READERS[kind] = reader


def backend_names() -> list[str]:
    return sorted(_FACTORIES)


def create_backend(name: str, context: BackendContext, *wirings: object) -> KeyedStateBackend:
    """A fresh ``name`` backend for ``context``, wrapped by each of ``wirings`` in order."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UnknownBackendError(f"no keyed state backend named {name!r} (known: {backend_names()})")
    backend = factory(context)
    for wiring in wirings:
        wrapper = _WRAPPERS.get(type(wiring))
        if wrapper is None:
            backend.close()
            raise UnknownBackendError(f"no backend wrapper registered for {type(wiring).__name__}")
        backend = wrapper(backend, wiring)
    return backend


def handle_reader(kind: StateHandleKind) -> HandleReader:
    reader = _READERS.get(kind)
    if reader is None:
        raise UnknownBackendError(f"no reader registered for {kind.value} state handles")
    return reader
