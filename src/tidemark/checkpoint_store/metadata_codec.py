"""The ``_metadata`` file format: one ``CheckpointMetadata`` record in Avro.

A file holds exactly the Confluent wire-format encoding of the record (magic byte, 4-byte schema
id, Avro body) produced by :mod:`tidemark.protocol.codec` with the committed *local* schema-id
table, never a Schema Registry's ids, so a checkpoint stays readable without the registry and
across deployments. Decoding resolves older writer schemas into the newest reader schema, so
files written before a compatible schema change still load. No pickle; a hostile file can only
fail with :class:`MetadataFormatError`.
"""

from __future__ import annotations

from functools import cache

from tidemark.protocol.codec import Codec
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import CheckpointMetadata


class MetadataFormatError(ValueError):
    """The bytes are not a valid checkpoint metadata file."""


@cache
def _codec() -> Codec:
    return Codec.local()


def encode_metadata(metadata: CheckpointMetadata) -> bytes:
    """The ``_metadata`` file content for ``metadata``."""
    return _codec().encode(metadata)


def decode_metadata(data: bytes) -> CheckpointMetadata:
    """Inverse of :func:`encode_metadata`; ``MetadataFormatError`` on anything else."""
    try:
        return _codec().decode_as(data, CheckpointMetadata)
    except DecodeError as exc:
        raise MetadataFormatError(f"not a checkpoint metadata file: {exc}") from None
