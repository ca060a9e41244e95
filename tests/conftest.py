"""Suite-wide fixtures: one real Kafka broker per test session and unique topic names.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set (any real Kafka), otherwise the embedded Tansu
broker, started once for the session on a free port and killed with the session (also when the
test process itself is killed).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.kafka.topics import TopicNames


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with kafka_or_embedded(tmp_path_factory.mktemp("embedded-broker")) as (bootstrap, _):
        yield bootstrap


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> a topic/group name no other test uses."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    run = uuid.uuid4().hex[:8]

    def make(base: str) -> str:
        return f"t-{test}-{run}-{base}"

    return make


@pytest.fixture
def topic_names(unique_name: Callable[[str], str]) -> TopicNames:
    """A fresh set of deployment topic names (control, acks, dead letters, ...)."""
    return TopicNames(prefix=unique_name("tm"))
