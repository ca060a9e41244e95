"""The ``_metadata`` file format: one ``CheckpointMetadata`` record in Avro, with a checksum.

Format 2 (written since the checksum was added)::

    b"TMCKMD2\n"  8 bytes, the format tag
    sha256(body)    32 bytes
    body            the Confluent wire-format encoding of the record

Format 1 (older files) is the body alone; it starts with the wire format's magic byte 0, which
no format-2 file can start with (a changed bit in the tag still leaves a non-zero first byte),
so the two never mix up. Format-1 files still load but carry no checksum.

The body is produced by :mod:`tidemark.protocol.codec` with the committed *local* schema-id
table, never a Schema Registry's ids, so a checkpoint stays readable without the registry and
across deployments. Decoding resolves older writer schemas into the newest reader schema, so
files written before a compatible schema change still load. No pickle; a hostile or damaged
file can only fail with :class:`MetadataFormatError` (:class:`CorruptMetadata` when the checksum
does not match).
"""

from __future__ import annotations

import hashlib
from functools import cache

from tidemark.protocol.codec import Codec
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import CheckpointMetadata


FORMAT_TAG = b"TMCKMD2\n"
_DIGEST_BYTES = 32


class MetadataFormatError(ValueError):
    """The bytes are not a valid checkpoint metadata file."""


class CorruptMetadata(MetadataFormatError):
    """A format-2 metadata file whose content does not match its checksum."""


@cache
def _codec() -> Codec:
    return Codec.local()


def encode_metadata(metadata: CheckpointMetadata) -> bytes:
    """The ``_metadata`` file content for ``metadata`` (format 2)."""
    body = _codec().encode(metadata)
    return FORMAT_TAG + hashlib.sha256(body).digest() + body


def decode_metadata(data: bytes) -> CheckpointMetadata:
    """Inverse of :func:`encode_metadata`, also reading format 1; ``MetadataFormatError`` on
    anything else, ``CorruptMetadata`` when a format-2 checksum does not match."""
    if data.startswith(FORMAT_TAG):
        start = len(FORMAT_TAG) + _DIGEST_BYTES
        recorded, body = data[len(FORMAT_TAG):start], data[start:]
        digest = hashlib.sha256(body).digest()
        if len(recorded) != _DIGEST_BYTES or digest != recorded:
            raise CorruptMetadata(f"checksum mismatch: sha256 {digest.hex()} differs from the recorded "
                                  f"{recorded.hex()} ({len(data)} bytes)")
    else:
        body = data  # format 1: no checksum
    try:
        return _codec().decode_as(body, CheckpointMetadata)
    except DecodeError as exc:
        raise MetadataFormatError(f"not a checkpoint metadata file: {exc}") from None
