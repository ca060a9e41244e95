"""Dynamic fraud rules: a low-volume topic of rules broadcast to every task of a stage keyed by
account over a high-volume topic of transactions (Flink's broadcast state pattern). Rule changes
apply without a restart, from the event time each version names.

::

    transactions ──(key: account)──> fraud ──> alerts
    rules ──────────(broadcast)────────┘   └──> cleared (side output)

* A **transaction** ``{"id", "account", "amount", "ts"}``; a **rule version** ``{"rule", "ts",
  "kind", "limit", "window_ms"}`` in force from ``ts`` on (until the rule's next version), or
  ``{"rule", "ts", "deleted": true}``. Kinds: ``"amount"`` flags a transaction of ``limit`` or
  more; ``"velocity"`` flags one that makes more than ``limit`` transactions of its account within
  ``window_ms`` (at most :data:`MAX_WINDOW_MS`).
* ``process_broadcast_element`` adds the version to the broadcast state ``rules`` (every version
  of every rule, by rule: a transaction is judged by the versions in force at its time, so the
  result does not depend on when a rule reached a task) and trims every account's history that no
  transaction still to come can need (``apply_to_keyed_state``: accounts that went quiet included).
* ``process_element`` keeps the transaction in its account's state and sets an event-time timer
  at its time; ``on_timer`` judges the account's transactions of that time, in id order, by the
  rules in force then (read-only broadcast state): one alert ``{"id", "account", "rule",
  "version", "ts"}`` per transaction and rule it breaks. A transaction that breaks no rule goes
  to the side output ``cleared`` (``{"id", "account", "ts"}``, its own topic, exactly-once like
  the alerts): every transaction comes out once, as alerts or as cleared.

The result is what :func:`expected_alerts` and :func:`expected_cleared` compute from the two topics alone, whatever the
interleaving, failures and restarts: a rule version is written before any transaction of its time
or later (:func:`feed`), so it is never behind the stage's watermark.

Run it on two topics: ``tidemark jobs run tidemark.examples.fraud_rules:fraud_rules`` (arguments:
the topics, parallelism, workers; see :func:`fraud_rules`).
"""

from __future__ import annotations

import json
import random
from bisect import bisect_right, insort
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from tidemark.api import EventTime, Input, JobSpec, KeyedBroadcastProcessFunction, OutputTag, Stage, StateBackendKind
from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor, MapStateDescriptor
from tidemark.types import CheckpointingMode, JobId

MAX_WINDOW_MS = 60_000
"""The longest velocity window a rule may have (how far back an account's history is kept)."""
OUT_OF_ORDERNESS_MS = 2_000
IDLE_MS = 2_000
RULES = BroadcastStateDescriptor("rules")
"""Rule name -> its versions ``[[ts, definition], ...]`` in time order."""
PENDING = MapStateDescriptor("pending")
"""Per account: event time -> the transactions of that time not judged yet."""
HISTORY = ListStateDescriptor("history")
"""Per account: the event times of its judged transactions, in order (for velocity rules)."""
CLEARED = OutputTag("cleared")
"""The side output of the transactions that broke no rule."""
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _ts(value: Any) -> int:
    return int(value["ts"])


def in_force(versions: list[list[Any]], ts: int) -> list[Any] | None:
    """The version of a rule in force at ``ts`` (``[version ts, definition]``), None before its
    first or after it was deleted."""
    index = bisect_right([v[0] for v in versions], ts)
    if index == 0 or versions[index - 1][1].get("deleted"):
        return None
    return versions[index - 1]


def breaks(definition: dict[str, Any], amount: int, recent: int) -> bool:
    """Whether a transaction of ``amount``, the ``recent``-th of its account within the rule's
    window, breaks the rule."""
    if definition["kind"] == "amount":
        return amount >= definition["limit"]
    return recent > definition["limit"]


class FraudRules(KeyedBroadcastProcessFunction):
    """See the module."""

    def open(self, ctx: Any) -> None:
        self.pending = ctx.get_state(PENDING)
        self.history = ctx.get_state(HISTORY)

    def process_element(self, value: Any, ctx: Any) -> None:
        ts = _ts(value)
        waiting = self.pending.get(ts) or []
        self.pending.put(ts, [*waiting, value])
        ctx.timer_service().register_event_time_timer(ts)

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        rules = ctx.get_broadcast_state(RULES)
        history = self.history.get()
        for txn in sorted(self.pending.get(timestamp_ms) or [], key=lambda t: t["id"]):
            history.append(timestamp_ms)
            flagged = False
            for name, versions in sorted(rules.items()):
                version = in_force(versions, timestamp_ms)
                if version is None:
                    continue
                window = version[1].get("window_ms", 0)
                recent = len(history) - bisect_right(history, timestamp_ms - window)
                if breaks(version[1], txn["amount"], recent):
                    flagged = True
                    ctx.emit(ctx.key, {"id": txn["id"], "account": ctx.key, "rule": name, "version": version[0],
                                       "ts": timestamp_ms})
            if not flagged:
                ctx.output(CLEARED, {"id": txn["id"], "account": ctx.key, "ts": timestamp_ms}, key=ctx.key)
        self.pending.remove(timestamp_ms)
        self.history.update(history[bisect_right(history, timestamp_ms - MAX_WINDOW_MS):])

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        if not value.get("deleted") and not 0 <= value.get("window_ms", 0) <= MAX_WINDOW_MS:
            raise ValueError(f"rule {value.get('rule')!r}: window_ms must be within 0..{MAX_WINDOW_MS}")
        rules = ctx.get_broadcast_state(RULES)
        versions = list(rules.get(value["rule"]) or [])
        if all(v[0] != _ts(value) for v in versions):  # a version is known by its time: once each
            insort(versions, [_ts(value), value], key=lambda v: v[0])
        rules.put(value["rule"], versions)
        # no transaction to come is older than the watermark: history beyond the longest window
        # before it is no one's any more, on accounts that went quiet too
        horizon = ctx.current_watermark() - MAX_WINDOW_MS
        ctx.apply_to_keyed_state(HISTORY, lambda account, history: history.update(
            [t for t in history.get() if t > horizon]))


def fraud_rules(job_id: str = "fraud-rules", transactions_topic: str = "transactions", rules_topic: str = "rules",
                output_topic: str = "fraud-alerts", cleared_topic: str = "fraud-cleared", parallelism: int = 2,
                workers: int = 1, mode: str = "EXACTLY_ONCE", state_backend: str = "heap") -> JobSpec:
    """The job of the module docstring: alerts to ``output_topic``, the side output ``cleared`` to
    ``cleared_topic``."""
    timed = EventTime(_ts, max_out_of_orderness_ms=OUT_OF_ORDERNESS_MS, idle_timeout_ms=IDLE_MS)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("fraud", (Input(transactions_topic, key_by=lambda t: t["account"]),
                                Input(rules_topic, broadcast=True)), None, FraudRules, output_topic,
                      event_time=timed, side_outputs={CLEARED.name: cleared_topic}),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend))


# ---------------------------------------------------------------- input and what it implies


def transactions(n: int, seed: int = 11, first: int = 0, accounts: int = 60, step_ms: int = 250) -> Iterator[bytes]:
    """``n`` transactions from number ``first`` on, one every ``step_ms`` of event time (a few at
    the same time), over ``accounts`` accounts of which a few are busy."""
    rng = random.Random(seed * 1_000_003 + first)
    for i in range(first, first + n):
        account = f"acct-{rng.randrange(5)}" if rng.random() < 0.3 else f"acct-{rng.randrange(accounts)}"
        amount = rng.choice((5, 20, 40, 90, 300, 1200)) + rng.randrange(10)
        yield json.dumps({"id": i, "account": account, "amount": amount,
                          "ts": START_MS + (i // 3) * step_ms * 3}).encode()


def rule_versions(round_: int, at_ms: int) -> list[bytes]:
    """The rule versions of change number ``round_``, in force from ``at_ms``: limits move,
    a rule comes and goes."""
    versions = [{"rule": "large", "ts": at_ms, "kind": "amount", "limit": (1000, 250, 600)[round_ % 3]},
                {"rule": "burst", "ts": at_ms, "kind": "velocity", "limit": 2 + round_ % 3,
                 "window_ms": (5_000, 20_000, MAX_WINDOW_MS)[round_ % 3]}]
    if round_ % 2:
        versions.append({"rule": "mid", "ts": at_ms, "kind": "amount", "limit": 80})
    elif round_:
        versions.append({"rule": "mid", "ts": at_ms, "deleted": True})
    return [json.dumps(v).encode() for v in versions]


def feed(total: int, chunk: int = 100, every: int = 3, seed: int = 11,
         more: Callable[[], bool] | None = None) -> Iterator[tuple[str, list[bytes]]]:
    """What to write, in order: ``("transactions", records)`` chunks of ``chunk`` (at least
    ``total`` records, and on while ``more()`` says so) and, before every ``every``-th chunk,
    ``("rules", versions)`` in force from two chunks ahead in event time (so written before any
    transaction they apply to); last, a version in force after every transaction, so that once
    the inputs are idle the watermark passes them all."""
    step_ms = 250
    first = rounds = 0
    while first < total or (more is not None and more()):
        if (first // chunk) % every == 0:
            yield "rules", rule_versions(rounds, START_MS + (first + 2 * chunk) // 3 * step_ms * 3)
            rounds += 1
        yield "transactions", list(transactions(chunk, seed, first, step_ms=step_ms))
        first += chunk
    yield "rules", rule_versions(rounds, START_MS + first * step_ms + 10 * MAX_WINDOW_MS)


def expected_alerts(transactions: Iterable[bytes], rules: Iterable[bytes]) -> dict[Hashable, dict[str, Any]]:
    """The alerts the job writes once its inputs went idle, computed without its code: by
    (transaction id, rule)."""
    versions: dict[str, list[list[Any]]] = defaultdict(list)
    for raw in rules:
        rule = json.loads(raw)
        if all(v[0] != rule["ts"] for v in versions[rule["rule"]]):
            versions[rule["rule"]].append([rule["ts"], rule])
    for listed in versions.values():
        listed.sort(key=lambda v: v[0])
    txns = sorted((json.loads(raw) for raw in transactions), key=lambda t: (t["ts"], t["id"]))
    seen: dict[str, list[int]] = defaultdict(list)
    alerts: dict[Hashable, dict[str, Any]] = {}
    for txn in txns:
        ts, account = txn["ts"], txn["account"]
        seen[account].append(ts)
        for name in sorted(versions):
            version = in_force(versions[name], ts)
            if version is None:
                continue
            recent = sum(1 for t in seen[account] if t > ts - version[1].get("window_ms", 0))
            if breaks(version[1], txn["amount"], recent):
                alerts[(txn["id"], name)] = {"id": txn["id"], "account": account, "rule": name,
                                             "version": version[0], "ts": ts}
    return alerts


def expected_cleared(transactions: Iterable[bytes], rules: Iterable[bytes]) -> dict[Hashable, dict[str, Any]]:
    """The side output ``cleared`` once the inputs went idle, by transaction id: every transaction
    that has no alert in :func:`expected_alerts`."""
    flagged = {alert["id"] for alert in expected_alerts(transactions, rules).values()}
    return {txn["id"]: {"id": txn["id"], "account": txn["account"], "ts": txn["ts"]}
            for txn in map(json.loads, transactions) if txn["id"] not in flagged}


def alert_identity(value: Any) -> Hashable:
    return (value["id"], value["rule"])
