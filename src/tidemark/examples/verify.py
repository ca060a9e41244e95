"""What the example jobs must output, as expectations for the exactly-once check
(:mod:`tidemark.verification`), computed from their input records.

* ``url_counts``: each URL's outputs are ``{"url", "hits": i}`` for i = 1..n, n its number of
  valid input records; identity ``(url, hits)``, every value checked.
* ``top_urls`` (and ``windowed_top_urls``, the same job on windows): one output per minute the
  job closes, ``{"minute", "top"}`` with the minute's final top URLs
  (:func:`tidemark.examples.generator.expected_top_urls`); identity ``(minute,)``, every value checked.
* ``sessions`` (:mod:`tidemark.examples.access_log_windows`, its default gap): one output per
  closed session, identity ``(ip, start)`` (:func:`tidemark.examples.generator.expected_sessions`).
* ``sliding_url_counts`` (its default windows): one output per closed (URL, window), identity
  ``(url, start)`` (:func:`tidemark.examples.generator.expected_sliding_counts`).
* ``hit_graph`` (:mod:`tidemark.examples.access_log_graph`, its URL totals output): per URL and
  side (``hits``, ``raw``) the outputs ``{"url", "side", "n": i}`` for i = 1..n; identity
  ``(url, side, n)``. ``hit_graph_ips`` (its IP output): ``{"ip", "n": i}``, identity ``(ip, n)``.
  ``hit_graph_new_ips`` (the output of ``ip_firsts``, fed by the side output ``ip_seen``): ``{"ip"}`` once
  per IP, identity ``ip``.

:func:`example_expectation` reads the input topic to compute them; :func:`read_committed`,
:func:`verify_url_counts` and :func:`verify_top_urls` serve tests that hold the input records
themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from tidemark.verification.committed_reader import CommittedReader, collect, read_to_end
from tidemark.verification.comparison import Verdict, compare
from tidemark.verification.output_check import Identify

__all__ = ["EXAMPLES", "ExampleCheck", "Verdict", "example_expectation", "read_committed", "verify_top_urls",
           "verify_url_counts", "verify_example"]


def _field_identity(*fields: str) -> Callable[[Any], Hashable]:
    def identity(value: Any) -> Hashable:
        if isinstance(value, dict) and all(f in value for f in fields):
            return tuple(json.dumps(value[f]) if isinstance(value[f], (list, dict)) else value[f] for f in fields)
        return ("<not an output record of this example>", json.dumps(value, sort_keys=True, default=str))
    return identity


def url_counts_expectation(records: Iterable[bytes]) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_url_counts  # the example job and its state: when checking

    return _url_counts_from(expected_url_counts(records))


def _url_counts_from(counts: dict[str, int]) -> dict[Hashable, Any]:
    return {(url, i): {"url": url, "hits": i} for url, n in counts.items() for i in range(1, n + 1)}


def top_urls_expectation(records: Iterable[bytes]) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_top_urls

    return _top_urls_from(expected_top_urls(records))


def _top_urls_from(per_minute: dict[int, list[list[Any]]]) -> dict[Hashable, Any]:
    return {(minute,): {"minute": minute, "top": top} for minute, top in per_minute.items()}


def sessions_expectation(records: Iterable[bytes], gap_ms: int | None = None) -> dict[Hashable, Any]:
    from tidemark.examples.access_log_windows import SESSION_GAP_MS
    from tidemark.examples.generator import expected_sessions

    return dict(expected_sessions(records, SESSION_GAP_MS if gap_ms is None else gap_ms))


def sliding_url_counts_expectation(records: Iterable[bytes], size_ms: int = 5 * 60_000,
                                   slide_ms: int = 60_000) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_sliding_counts

    return {(url, start): {"url": url, "start": start, "end": start + size_ms, "hits": hits}
            for (url, start), hits in expected_sliding_counts(records, size_ms, slide_ms).items()}


@dataclass(frozen=True)
class ExampleCheck:
    """How to check one example job: its expectation from input records, and the identity of an
    output value."""

    expectation: Callable[[Iterable[bytes]], dict[Hashable, Any]]
    identity: Callable[[Any], Hashable]

    @property
    def identify(self) -> Identify:
        return lambda key, value: self.identity(value)


def hit_graph_expectation(records: Iterable[bytes]) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_url_counts

    return {(url, side, i): {"url": url, "side": side, "n": i} for url, n in expected_url_counts(records).items()
            for side in ("hits", "raw") for i in range(1, n + 1)}


def hit_graph_ips_expectation(records: Iterable[bytes]) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_ip_counts

    return {(ip, i): {"ip": ip, "n": i} for ip, n in expected_ip_counts(records).items() for i in range(1, n + 1)}


def hit_graph_new_ips_expectation(records: Iterable[bytes]) -> dict[Hashable, Any]:
    from tidemark.examples.generator import expected_ip_counts

    return {(ip,): {"ip": ip} for ip in expected_ip_counts(records)}


EXAMPLES: dict[str, ExampleCheck] = {
    "url_counts": ExampleCheck(url_counts_expectation, _field_identity("url", "hits")),
    "top_urls": ExampleCheck(top_urls_expectation, _field_identity("minute")),
    "windowed_top_urls": ExampleCheck(top_urls_expectation, _field_identity("minute")),
    "sessions": ExampleCheck(sessions_expectation, _field_identity("ip", "start")),
    "sliding_url_counts": ExampleCheck(sliding_url_counts_expectation, _field_identity("url", "start")),
    "hit_graph": ExampleCheck(hit_graph_expectation, _field_identity("url", "side", "n")),
    "hit_graph_ips": ExampleCheck(hit_graph_ips_expectation, _field_identity("ip", "n")),
    "hit_graph_new_ips": ExampleCheck(hit_graph_new_ips_expectation, _field_identity("ip")),
}
"""The example jobs of :mod:`tidemark.examples.access_log`, :mod:`tidemark.examples.access_log_windows`
and :mod:`tidemark.examples.access_log_graph`, by function name (a job's second output by a suffix)."""


def example_expectation(client: dict[str, Any], example: str, input_topic: str) -> tuple[int, dict[Hashable, Any]]:
    """``(input records, expectation)`` of ``example`` from every committed record of
    ``input_topic``; raises UnknownTopic."""
    values = [r.value for r in read_to_end(client, input_topic) if r.value is not None]
    return len(values), EXAMPLES[example].expectation(values)


def read_committed(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 120.0,
                   settle_s: float = 3.0) -> list[dict[str, Any]]:
    """Every committed record of ``topic`` as JSON; waits for ``expect`` records (or the timeout),
    then ``settle_s`` more so duplicates arriving late are seen too. ``[]`` when the topic does
    not appear within the timeout."""
    with CommittedReader({"bootstrap.servers": bootstrap}, topic) as reader:
        if not reader.open(timeout_s):
            return []
        records = collect(reader, until=lambda read: len(read) >= expect, wait_s=timeout_s, settle_s=settle_s)
    return [json.loads(r.value) for r in records if r.value is not None]


def _verify(example: str, output: list[dict[str, Any]], expected: dict[Hashable, Any]) -> Verdict:
    identity = EXAMPLES[example].identity
    return compare(((identity(value), value) for value in output), expected)


def verify_url_counts(output: list[dict[str, Any]], expected: dict[str, int]) -> Verdict:
    """``output`` values against per-URL counts (:func:`tidemark.examples.generator.expected_url_counts`)."""
    return _verify("url_counts", output, _url_counts_from(expected))


def verify_top_urls(output: list[dict[str, Any]], expected: dict[int, list[list[Any]]]) -> Verdict:
    """``output`` values against the closed minutes' final tops (:func:`expected_top_urls`)."""
    return _verify("top_urls", output, _top_urls_from(expected))


def verify_example(example: str, output: list[dict[str, Any]], expected: dict[Hashable, Any]) -> Verdict:
    """``output`` values of an example of :data:`EXAMPLES` against an expectation by its identity
    (e.g. :func:`sessions_expectation` with the job's gap)."""
    return _verify(example, output, expected)
