"""The dead letter: a record that could not be decoded or processed, with where it came from.

A top-level protocol message like those of :mod:`tidemark.protocol.messages` (its own schema in
``schemas/DeadLetter/``), written to a dead-letter topic by :mod:`tidemark.chassis.dead_letter_publisher`
and :mod:`tidemark.runtime.worker.record_errors`; it never takes part in the checkpoint protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be decoded or processed, with where it came from."""

    origin_topic: str
    origin_partition: int
    origin_offset: int
    origin_timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    error_type: str = ""
    error_message: str = ""
    service: str = ""
    failed_at: int = 0
    original_sizes: dict[str, int] = field(default_factory=dict)  # parts cut to fit (v2)
    original_sha256: dict[str, str] = field(default_factory=dict)  # their digests (v2)
