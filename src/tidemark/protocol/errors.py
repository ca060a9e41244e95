"""Errors of the wire protocol: decoding, encoding, schema catalog and Schema Registry.

Every failure to turn bytes into a message is a :class:`DecodeError` subclass carrying a short
machine-readable ``reason`` (a stable kebab-case string, safe to use as a metric label and as
the ``error_type`` of a dead letter). A consumer can therefore catch ``DecodeError`` alone, send
the record to the dead-letter topic and move on; nothing else escapes
:func:`tidemark.protocol.codec.decode` for arbitrary input bytes when the local schema-id table
is used. With a Schema Registry configured, an unreachable registry raises
:class:`SchemaRegistryUnavailable` instead: that is not the record's fault, so the caller should
retry rather than dead-letter the record.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error raised by :mod:`tidemark.protocol`."""


class DecodeError(ProtocolError):
    """The bytes are not a decodable Tidemark record.

    ``reason`` is one of the class-level constants of the concrete subclasses.
    """

    reason: str = "decode-error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class BadMagicByte(DecodeError):
    """A framed record whose first byte is not the Confluent wire-format magic byte ``0``.

    "Framed" means bytes 1-4 hold a schema id the codec knows (e.g. another framing version or a
    corrupted first byte). Bytes that do not even look framed are :class:`MalformedRecord`.
    """

    reason = "bad-magic-byte"

    def __init__(self, magic: int) -> None:
        super().__init__(f"expected magic byte 0, got {magic}")
        self.magic = magic


class UnknownSchemaId(DecodeError):
    """The 4-byte schema id names no schema known locally (or to the registry)."""

    reason = "unknown-schema-id"

    def __init__(self, schema_id: int, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"schema id {schema_id} is not known{suffix}")
        self.schema_id = schema_id


class TruncatedRecord(DecodeError):
    """The record ends early: shorter than the 5-byte header, or the Avro body stops mid-value."""

    reason = "truncated"


class MalformedRecord(DecodeError):
    """The body is not a valid encoding for its writer schema.

    Examples: garbage that is not framed at all (first byte not ``0`` and no known schema id in
    bytes 1-4), an invalid enum or union index, invalid UTF-8, a length that is negative or larger
    than any sane bound, bytes left over after the record, a value the reader cannot resolve.
    """

    reason = "malformed"


class UnexpectedMessageType(DecodeError):
    """The record decoded fine but is not the message type the caller asked for."""

    reason = "unexpected-type"

    def __init__(self, expected: type, actual: type) -> None:
        super().__init__(f"expected {expected.__name__}, got {actual.__name__}")
        self.expected = expected
        self.actual = actual


class EncodeError(ProtocolError, ValueError):
    """A message cannot be encoded: not a protocol message, or a field value out of range."""


class SchemaCatalogError(ProtocolError):
    """The ``schemas/`` folder or the schema-id table is inconsistent (a deployment bug)."""


class SchemaRegistryError(ProtocolError):
    """The Schema Registry refused a request (HTTP error with a Confluent error body)."""

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class SchemaRegistryUnavailable(SchemaRegistryError):
    """The Schema Registry could not be reached or timed out; retrying may succeed."""
