"""Deterministic access-log records, written to Kafka, and what the example jobs must output.

``generate(n, seed)`` yields the same ``n`` records for the same seed: URLs drawn from a skewed
(Zipf-like) catalogue, ``per_minute`` records per minute of event time, a small share of malformed records
when asked (they must reach the dead-letter topic, not the output).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import Producer

from tidemark.api import key_partition
from tidemark.broker.engine import tansu_selected
from tidemark.examples.access_log import MINUTE_MS, OUT_OF_ORDERNESS_MS, closed_minutes, minute_of, top_of
from tidemark.kafka.clients import produce_waiting, producer_config
from tidemark.keygroups import DEFAULT_MAX_PARALLELISM

URLS = tuple(f"/{section}/{item}" for section in ("shop", "cart", "blog", "api", "img") for item in range(12))
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def generate(n: int, seed: int = 7, per_minute: int = 1000, malformed_every: int = 0,
             first: int = 0) -> Iterator[bytes]:
    """``first``: the index of the first record, so that a second part continues a first one in
    event time (``generate(n, seed, first=n_before)``)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(URLS))]
    step_ms = MINUTE_MS / per_minute
    for i in range(first, first + n):
        if malformed_every and i % malformed_every == malformed_every - 1:
            yield b'{"ts": "not a number", "url": '  # truncated JSON
            continue
        record = {"ts": START_MS + int(i * step_ms), "ip": f"10.0.{rng.randrange(4)}.{rng.randrange(250)}",
                  "method": rng.choice(("GET", "GET", "GET", "POST")), "url": rng.choices(URLS, weights)[0],
                  "status": rng.choice((200, 200, 200, 304, 404)), "bytes": rng.randrange(100, 50_000)}
        yield json.dumps(record).encode()


class RecordWriter:
    """One idempotent producer for many writes of records (a new idempotent producer waits about
    half a second for its producer id before its first write is delivered: a feeder writing a
    chunk twice a second keeps one). ``transactional`` (default: only when the broker is Tansu,
    ``tansu_selected()``) commits a transaction every ``chunk`` records instead: Tansu reports a
    short end offset after plain batched produce, and the commit marker that ends each
    transaction makes its reported end exact. Close it (or use it as a context manager) to
    deliver what is still buffered."""

    def __init__(self, bootstrap: str | dict[str, Any], transactional: bool | None = None) -> None:
        self.transactional = tansu_selected() if transactional is None else transactional
        txn_id = f"tidemark-generator-{uuid.uuid4().hex}" if self.transactional else None
        base = dict(bootstrap) if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}
        self._producer = Producer(producer_config(base, txn_id))
        if self.transactional:
            self._producer.init_transactions(30)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, topic: str, records: Iterable[bytes], partitions: int | None = None, chunk: int = 1000,
              rate_per_s: float | None = None, progress: Callable[[int], None] | None = None,
              partition_of: Callable[[bytes], int] | None = None,
              key_of: Callable[[bytes], bytes | None] | None = None) -> int:
        """Write ``records`` in order (round-robin over partitions when given, from partition 0;
        ``partition_of(record)`` when given, e.g. :func:`by_url`; with ``key_of`` (e.g.
        :func:`url_key`) each record gets that key and, without ``partition_of``, the producer's
        partition of its key) and wait until they are delivered (committed, when transactional);
        returns the count.
        ``rate_per_s`` paces the writes (default: as fast as the broker takes them); ``progress``
        is called with the count so far about twice a second."""
        producer = self._producer
        if self.transactional:
            producer.begin_transaction()
        count = 0
        started = reported = time.monotonic()
        for i, value in enumerate(records):
            kwargs: dict[str, Any] = {"value": value}
            if key_of is not None:
                kwargs["key"] = key_of(value)
            if partition_of is not None:
                kwargs["partition"] = partition_of(value)
            elif partitions and key_of is None:
                kwargs["partition"] = i % partitions
            produce_waiting(producer, topic, **kwargs)
            count += 1
            if self.transactional and count % chunk == 0:
                producer.commit_transaction(60)
                producer.begin_transaction()
            if rate_per_s and (ahead := started + count / rate_per_s - time.monotonic()) > 0.01:
                producer.poll(0)
                time.sleep(ahead)
            if progress and time.monotonic() - reported >= 0.5:
                reported = time.monotonic()
                progress(count)
        if self.transactional:
            producer.commit_transaction(60)
        else:
            self._deliver(topic, "records")
        if progress:
            progress(count)
        return count

    def write_rows(self, topic: str, rows: Iterable[tuple[bytes, bytes | None, int]]) -> None:
        """Write keyed rows ``(key, value, timestamp_ms)`` (a value of None deletes the key in a
        compacted topic) and wait until they are delivered."""
        for key, value, at_ms in rows:
            produce_waiting(self._producer, topic, key=key, value=value, timestamp=at_ms)
        self._deliver(topic, "rows")

    def _deliver(self, topic: str, what: str) -> None:
        if self._producer.flush(60) > 0:
            raise RuntimeError(f"{topic}: {what} still undelivered after 60 s")

    def close(self) -> None:
        self._producer.flush(10)


def produce(bootstrap: str | dict[str, Any], topic: str, records: Iterable[bytes], partitions: int | None = None,
            chunk: int = 1000, transactional: bool | None = None, rate_per_s: float | None = None,
            progress: Callable[[int], None] | None = None, partition_of: Callable[[bytes], int] | None = None,
            key_of: Callable[[bytes], bytes | None] | None = None) -> int:
    """Write ``records`` once with a :class:`RecordWriter` of their own, as an application writing
    a job's input would; returns the count. ``bootstrap`` is the address, or a client
    configuration (:func:`tidemark.kafka.clients.base_config`)."""
    with RecordWriter(bootstrap, transactional) as writer:
        return writer.write(topic, records, partitions, chunk, rate_per_s, progress, partition_of, key_of)


def url_key(record: bytes) -> bytes | None:
    """An access-log record's URL as its Kafka key (a record keyed by URL; None when it has none)."""
    try:
        return str(json.loads(record)["url"]).encode()
    except (ValueError, KeyError, TypeError):
        return None


def by_url(partitions: int, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> Callable[[bytes], int]:
    """The partition of an access-log record in a topic co-partitioned by URL (the examples'
    key: ``key_partition``); a record without one (malformed) goes to partition 0, where the job
    dead-letters it."""
    def partition_of(record: bytes) -> int:
        try:
            return key_partition(json.loads(record)["url"], partitions, max_parallelism)
        except (ValueError, KeyError, TypeError):
            return 0
    return partition_of


def _valid(records: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for raw in records:
        try:
            yield json.loads(raw)
        except ValueError:
            continue


def expected_url_counts(records: Iterable[bytes]) -> dict[str, int]:
    return dict(Counter(r["url"] for r in _valid(records)))


def expected_ip_counts(records: Iterable[bytes]) -> dict[str, int]:
    return dict(Counter(r["ip"] for r in _valid(records)))


def expected_top_urls(records: Iterable[bytes], max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS
                      ) -> dict[int, list[list[Any]]]:
    """The top URLs of each minute ``top_urls`` closes once the input went idle
    (:func:`~tidemark.examples.access_log.closed_minutes`), for records in event-time order (the
    generator's: none is late)."""
    per_minute: dict[int, Counter[str]] = defaultdict(Counter)
    largest = None
    for record in _valid(records):
        ts = int(record["ts"])
        per_minute[minute_of(ts)][record["url"]] += 1
        largest = ts if largest is None else max(largest, ts)
    if largest is None:
        return {}
    end = closed_minutes(largest, max_out_of_orderness_ms)
    return {minute: top_of(c.items()) for minute, c in sorted(per_minute.items()) if minute < end}


def final_watermark(records: Iterable[bytes], max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS) -> int | None:
    """The watermark a job reaches once every input partition went idle after ``records``: the
    largest event time minus the out-of-orderness bound, minus one (None without records)."""
    stamps = [int(r["ts"]) for r in _valid(records)]
    return max(stamps) - max_out_of_orderness_ms - 1 if stamps else None


def expected_sessions(records: Iterable[bytes], gap_ms: int, max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS
                      ) -> dict[tuple[str, int], dict[str, Any]]:
    """The sessions ``sessions`` closes, by (IP, start), computed without the window code: per IP,
    requests in time order, a new session after a silence longer than the gap (a request exactly
    ``gap_ms`` after the previous one joins its session: their windows touch)."""
    valid = list(_valid(records))
    watermark = final_watermark((json.dumps(r).encode() for r in valid), max_out_of_orderness_ms)
    per_ip: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for record in valid:
        per_ip[record["ip"]].append((int(record["ts"]), record["url"]))
    closed: dict[tuple[str, int], dict[str, Any]] = {}
    for ip, requests in per_ip.items():
        requests.sort()
        sessions: list[list[Any]] = []  # [start, end, requests, urls]
        for ts, url in requests:
            if sessions and ts <= sessions[-1][1]:
                session = sessions[-1]
                session[1], session[2] = max(session[1], ts + gap_ms), session[2] + 1
                session[3].add(url)
            else:
                sessions.append([ts, ts + gap_ms, 1, {url}])
        for start, end, count, urls in sessions:
            if watermark is not None and end - 1 <= watermark:
                closed[(ip, start)] = {"ip": ip, "start": start, "end": end, "requests": count,
                                       "distinct_urls": len(urls)}
    return closed


def expected_sliding_counts(records: Iterable[bytes], size_ms: int, slide_ms: int,
                            max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS) -> dict[tuple[str, int], int]:
    """Hits per (URL, window start) of the sliding windows ``sliding_url_counts`` closes, computed
    without the window code: a record at ``t`` counts in every window ``[s, s + size)`` with ``s``
    a multiple of the slide and ``t - size < s <= t``."""
    valid = list(_valid(records))
    watermark = final_watermark((json.dumps(r).encode() for r in valid), max_out_of_orderness_ms)
    counts: Counter[tuple[str, int]] = Counter()
    for record in valid:
        ts = int(record["ts"])
        first = (ts - size_ms) // slide_ms + 1
        for start in range(first * slide_ms, ts + 1, slide_ms):
            counts[(record["url"], start)] += 1
    return {window: hits for window, hits in counts.items()
            if watermark is not None and window[1] + size_ms - 1 <= watermark}
