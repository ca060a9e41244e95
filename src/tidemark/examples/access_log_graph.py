"""A job as a graph on the access-log input (:mod:`tidemark.examples.access_log`): a fan-out, a
fan-in, a stage reading a channel and an input topic at once, a two-input function, a side output
another stage reads, three outputs.

::

    access-log ──> parse ──> url_hits ──> url_totals ──> output_topic
        │            └─────> ip_hits ──────────────────> ip_output_topic
        │                       └─(side output ip_seen)─> ip_firsts ──> ip_firsts_topic
        └──────────────────────────────────────┘ (url_totals' second input)

* ``parse`` (no key): keeps the fields the others need, ``{"url", "ip"}``; ``url_hits`` and
  ``ip_hits`` both read its output (a fan-out).
* ``url_hits`` (keyed by URL) and ``ip_hits`` (keyed by client IP) count, emitting
  ``{"url", "n"}`` / ``{"ip", "n"}`` on every record: each key's outputs are 1, 2, ..., n.
* ``url_totals`` (a :class:`~tidemark.api.KeyedCoProcessFunction` keyed by URL) reads
  ``url_hits``' output (input 1) and the access-log itself (input 2, through an exchange: a fan-in
  of a channel and an input topic, aligned on the barriers of both). Per URL it keeps the last
  count it heard of and the raw records it saw, in one key's state, and emits
  ``{"url", "side": "hits", "n"}`` for each count and ``{"url", "side": "raw", "n"}`` for each
  raw record: per URL and side, again 1, 2, ..., n, so the output is checkable exactly once
  (:mod:`tidemark.examples.verify`: ``hit_graph`` and ``hit_graph_ips``).
* ``ip_hits`` also writes the IP of every record, ``{"ip"}``, to its side output ``ip_seen``, a
  channel that ``ip_firsts`` (keyed by IP) reads: it writes each IP the first time it sees it,
  so its output holds every IP once (``hit_graph_new_ips``).
"""

from __future__ import annotations

from typing import Any

from tidemark.api import (
    ErrorPolicy,
    Input,
    JobSpec,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    Stage,
    StateBackendKind,
)
from tidemark.examples.access_log import PARSE_RECORD, _ip, _url
from tidemark.state import ValueStateDescriptor
from tidemark.types import CheckpointingMode, JobId


class Parse(ProcessFunction):
    def process(self, value: Any, ctx: Any) -> None:
        ctx.emit(None, {"url": _url(value), "ip": _ip(value)})


IP_SEEN = OutputTag("ip_seen")


class Count(KeyedProcessFunction):
    """Counts the records of each key of ``field``: ``{field: key, "n": count}``; each record's
    key also goes to the side output ``seen`` as ``{field: key}``, when given."""

    def __init__(self, field: str, seen: OutputTag | None = None) -> None:
        self.field = field
        self.seen = seen

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        count = self.count.value() + 1
        self.count.update(count)
        ctx.emit(ctx.key, {self.field: ctx.key, "n": count})
        if self.seen is not None:
            ctx.output(self.seen, {self.field: ctx.key}, key=ctx.key)


class FirstSeen(KeyedProcessFunction):
    """Each key's first record, once."""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(ValueStateDescriptor("seen", default=False))

    def process(self, value: Any, ctx: Any) -> None:
        if not self.seen.value():
            self.seen.update(True)
            ctx.emit(ctx.key, value)


class UrlTotals(KeyedCoProcessFunction):
    """Input 1: ``url_hits``' counts; input 2: raw access-log records; one URL's state for both."""

    def open(self, ctx: Any) -> None:
        self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))
        self.raw = ctx.get_state(ValueStateDescriptor("raw", default=0))

    def process_element1(self, value: Any, ctx: Any) -> None:
        if value["n"] != self.hits.value() + 1:  # per URL the counts come in order: a gap is a lost record
            raise ValueError(f"count {value['n']} of {ctx.key} after {self.hits.value()}")
        self.hits.update(value["n"])
        ctx.emit(ctx.key, {"url": ctx.key, "side": "hits", "n": value["n"]})

    def process_element2(self, value: Any, ctx: Any) -> None:
        raw = self.raw.value() + 1
        self.raw.update(raw)
        ctx.emit(ctx.key, {"url": ctx.key, "side": "raw", "n": raw})


def hit_graph(job_id: str = "access-log-graph", input_topic: str = "access-log",
              output_topic: str = "url-totals", ip_output_topic: str = "ip-hits",
              ip_firsts_topic: str = "ip-firsts", parallelism: int = 2,
              mode: str = "EXACTLY_ONCE", state_backend: str = "heap", on_error: str = "dead-letter",
              workers: int = 1, spark_step: bool = False) -> JobSpec:
    """The graph of the module docstring; its channels are named after ``job_id``; ``spark_step``:
    Spark parses the input for both stages that read it (``access_log.PARSE_RECORD``; ``url_totals``
    reads it through an exchange, whose reader forwards the rows)."""
    policy = ErrorPolicy(on_error)
    parsed, url_hits, ip_seen = f"{job_id}.parsed", f"{job_id}.url-hits", f"{job_id}.ip-seen"
    step = PARSE_RECORD if spark_step else None
    return JobSpec(
        job_id=JobId(job_id),
        stages=(
            Stage("parse", (input_topic,), None, Parse, parsed, on_error=policy, spark_step=step),
            Stage("url_hits", (parsed,), _url, lambda: Count("url"), url_hits, on_error=policy),
            Stage("ip_hits", (parsed,), _ip, lambda: Count("ip", IP_SEEN), ip_output_topic, on_error=policy,
                  side_outputs={IP_SEEN.name: ip_seen}),
            Stage("ip_firsts", (ip_seen,), _ip, FirstSeen, ip_firsts_topic, on_error=policy),
            Stage("url_totals", (url_hits, Input(input_topic, spark_step=step)), _url, UrlTotals, output_topic,
                  on_error=policy),
        ),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend))
