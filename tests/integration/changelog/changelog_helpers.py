"""Random keyed-state workloads and what a user can see of them (shared by the changelog tests)."""

from __future__ import annotations

import random
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from state_operations import DESCRIPTORS
from tidemark.state import KeyGroupRange, KeyNotInRangeError, assign_to_key_group

MAX_P = 128
KEYS: list[Any] = [*range(-20, 40), *(f"user-{i}" for i in range(40)), b"\x00", b"k"]
NAMESPACES = [None, "w1", ("w", 2)]


def keys_in(key_groups: KeyGroupRange) -> list[Any]:
    return [k for k in KEYS if assign_to_key_group(k, MAX_P) in key_groups]


def random_ops(rng: random.Random, keys: list[Any], count: int) -> list[tuple[Any, ...]]:
    """Operations over every state kind; list ``add`` makes replays non-idempotent on purpose."""
    ops: list[tuple[Any, ...]] = []
    for _ in range(count):
        key, ns = rng.choice(keys), rng.choice(NAMESPACES)
        value = rng.choice([rng.randint(-1000, 1000), f"s{rng.randint(0, 99)}", b"\x01\x02",
                            [1, "x"], {"a": 1.5}])
        ops.append(rng.choice([
            ("value.update", key, ns, value),
            ("value.update", key, ns, None),
            ("list.add", key, ns, value),
            ("list.add", key, ns, rng.randint(0, 9)),
            ("list.update", key, ns, [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]),
            ("map.put", key, ns, rng.choice(["a", "b", 3]), value),
            ("map.remove", key, ns, rng.choice(["a", "b", 3])),
            ("map.clear", key, ns),
            ("sum.add", key, ns, rng.randint(-50, 50)),
        ]))
    return ops


def visible(backend: Any, keys: list[Any] = KEYS) -> dict[Any, Any]:
    """Everything a user can read, for the keys of ``keys`` that the backend owns."""
    states = {name: backend.get_state(d) for name, d in DESCRIPTORS.items()}
    seen: dict[Any, Any] = {}
    for key in keys:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        for ns in NAMESPACES:
            for name, state in states.items():
                state.set_current_namespace(ns)
                if name == "map":
                    got: Any = sorted(state.items(), key=repr)
                elif name == "value":
                    got = state.value()
                else:
                    got = state.get()
                if got not in (None, [], ()):
                    seen[(repr(key), repr(ns), name)] = got
    return seen


def restrict(state: dict[Any, Any], key_groups: KeyGroupRange) -> dict[Any, Any]:
    """The entries of a ``visible`` dict whose key belongs to ``key_groups``."""
    wanted = {repr(k) for k in keys_in(key_groups)}
    return {slot: v for slot, v in state.items() if slot[0] in wanted}


def read_offsets(client: dict[str, Any], topic: str, partition: int, end: int) -> list[int]:
    """Offsets of every record of a partition below ``end`` (read directly, for assertions)."""
    consumer = Consumer({**client, "group.id": "changelog-test-unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        offsets: list[int] = []
        deadline = time.monotonic() + 10
        while not offsets or offsets[-1] < end - 1:
            assert time.monotonic() < deadline, f"{topic}/{partition}: no record after {offsets[-1:]}"
            offsets.extend(m.offset() for m in consumer.consume(10_000, 0.2) if m.error() is None)
        return [o for o in offsets if o < end]
    finally:
        consumer.close()
