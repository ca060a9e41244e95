"""Checkpoint storage, opened by URL through a scheme registry.

``open_storage("file:///var/lib/tidemark")`` returns a :class:`FilesystemCheckpointStorage`.
Another scheme plugs in with one call, e.g. in ``storage/s3.py``::

    register_scheme("s3", "tidemark.storage.s3:S3CheckpointStorage.from_url")

The target is imported lazily on first use, so optional dependencies stay optional.
"""

from __future__ import annotations

import importlib
from typing import Callable, Union
from urllib.parse import urlparse

from tidemark.storage.base import (
    CheckpointStorage,
    CorruptStateFile,
    InvalidStoragePath,
    StorageError,
    TargetConflict,
)

StorageFactory = Callable[[str], CheckpointStorage]


class UnknownStorageScheme(StorageError, ValueError):
    """No storage is registered for the URL's scheme."""


_REGISTRY: dict[str, Union[str, StorageFactory]] = {
    "file": "tidemark.storage.filesystem:FilesystemCheckpointStorage.from_url",
    "s3": "tidemark.storage.s3:S3CheckpointStorage.from_url",
}


def register_scheme(scheme: str, factory: Union[str, StorageFactory]) -> None:
    """Make ``open_storage`` handle ``scheme://`` URLs with ``factory(url)``.

    ``factory`` is a callable or a lazy ``"module:attribute.path"`` reference.
    """
    _REGISTRY[scheme.lower()] = factory


def registered_schemes() -> list[str]:
    return sorted(_REGISTRY)


def _load(reference: str) -> StorageFactory:
    module_name, _, attribute = reference.partition(":")
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target  # type: ignore[return-value]


def open_storage(url: str) -> CheckpointStorage:
    """The checkpoint storage for ``url``; ``UnknownStorageScheme`` for unregistered schemes."""
    scheme = urlparse(url).scheme.lower()
    factory = _REGISTRY.get(scheme)
    if factory is None:
        raise UnknownStorageScheme(
            f"no checkpoint storage for scheme {scheme or '(none)'!r} in {url!r}; "
            f"registered: {', '.join(registered_schemes())}"
        )
    if isinstance(factory, str):
        factory = _load(factory)
        _REGISTRY[scheme] = factory
    return factory(url)


__all__ = [
    "CheckpointStorage",
    "CorruptStateFile",
    "InvalidStoragePath",
    "StorageError",
    "TargetConflict",
    "UnknownStorageScheme",
    "open_storage",
    "register_scheme",
    "registered_schemes",
]
