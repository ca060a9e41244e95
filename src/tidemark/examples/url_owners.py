"""Enrichment: each access-log record (:mod:`tidemark.examples.access_log`) joined with the owner
of its URL, a table kept in a compacted topic (key: the URL; value: ``{"owner": ...}``; no value:
the URL has no owner any more), as it stood at the record's time (:func:`tidemark.joins.table_join`).

::

    access-log ──(key: url)──> enrich ──> access-log-by-owner
    url-owners ──(table, key: url)──┘

A table row is in force from its Kafka timestamp on (the owners' writer sets it,
:func:`write_owners`); each access-log record waits until the watermark passes its ``ts`` and is
then written as ``{"ts", "url", "ip", "owner"}`` (``owner`` None when the URL had none).
:func:`expected_enriched` computes the output from the two topics alone: owner changes are
written before the records they apply to (:func:`owner_changes`), so none is behind the watermark.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any


from tidemark.api import EventTime, Input, JobSpec, Stage, StateBackendKind
from tidemark.examples.access_log import _url
from tidemark.examples.generator import URLS, RecordWriter
from tidemark.joins import table_decode, table_join
from tidemark.types import CheckpointingMode, JobId

OUT_OF_ORDERNESS_MS = 1_000
IDLE_MS = 2_000
TEAMS = ("web", "payments", "search", "media", "platform")
COMPACTED = {"cleanup.policy": "compact"}
"""The owners topic's configuration (``TopicSpec(topic, 1, COMPACTED)``)."""


def _enrich(record: Any, row: Any) -> Any:
    return {"ts": record["ts"], "url": record["url"], "ip": record["ip"], "owner": None if row is None else row["owner"]}


def url_owners(job_id: str = "url-owners", input_topic: str = "access-log", owners_topic: str = "url-owners",
               output_topic: str = "access-log-by-owner", parallelism: int = 2, workers: int = 1,
               mode: str = "EXACTLY_ONCE", state_backend: str = "heap") -> JobSpec:
    """The job of the module docstring."""
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("enrich", (
            Input(input_topic, key_by=_url,
                  event_time=EventTime(lambda r: int(r["ts"]), OUT_OF_ORDERNESS_MS, IDLE_MS)),
            Input(owners_topic, decode=table_decode(), key_by=lambda row: row["key"],
                  event_time=EventTime(None, OUT_OF_ORDERNESS_MS, IDLE_MS))),  # the row's Kafka timestamp
            None, table_join(_enrich), output_topic),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend))


def owner_changes(round_: int, at_ms: int, seed: int = 5) -> list[tuple[str, dict[str, str] | None, int]]:
    """Change number ``round_`` of the table, in force from ``at_ms``: ``(url, row or None, at_ms)``
    for a third of the URLs (a new owner, or none)."""
    rng = random.Random(seed * 7919 + round_)
    changes = []
    for url in URLS:
        if rng.random() < 0.33:
            owner = None if rng.random() < 0.2 else {"owner": rng.choice(TEAMS)}
            changes.append((url, owner, at_ms))
    return changes


def write_owners(writer: RecordWriter, topic: str, changes: Iterable[tuple[str, dict[str, str] | None, int]]) -> None:
    """Write table rows keyed by URL, each with its time as the Kafka timestamp (no value: deleted)."""
    writer.write_rows(topic, ((url.encode(), None if row is None else json.dumps(row).encode(), at_ms)
                              for url, row, at_ms in changes))


def expected_enriched(records: Iterable[bytes], changes: Iterable[tuple[str, dict[str, str] | None, int]]
                      ) -> dict[Hashable, dict[str, Any]]:
    """What the job writes for ``records`` once its inputs went idle, by ``ts`` (unique per record
    in the generator's records), computed without the join's code."""
    versions: dict[str, list[tuple[int, str | None]]] = defaultdict(list)
    for url, row, at_ms in changes:
        versions[url].append((at_ms, None if row is None else row["owner"]))
    out: dict[Hashable, dict[str, Any]] = {}
    for raw in records:
        record = json.loads(raw)
        in_force = [owner for at_ms, owner in sorted(versions[record["url"]], key=lambda v: v[0])
                    if at_ms <= record["ts"]]
        out[record["ts"]] = {"ts": record["ts"], "url": record["url"], "ip": record["ip"],
                             "owner": in_force[-1] if in_force else None}
    return out
