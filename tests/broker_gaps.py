"""``@tansu_gap("...")`` marks a test that asserts behaviour Tansu lacks (docs/architecture.md, "What
differs if you choose Tansu"): it runs strictly on Apache Kafka (the default embedded broker) and on
any other cluster named by ``KAFKA_BOOTSTRAP_SERVERS``, and is a strict xfail only when
``TIDEMARK_BROKER_ENGINE=tansu`` says the broker is Tansu."""

from __future__ import annotations

import pytest

from tidemark.broker.engine import tansu_selected


def tansu_gap(gap: str) -> pytest.MarkDecorator:
    """Strict xfail on Tansu, which lacks ``gap``; a plain test everywhere else."""
    return pytest.mark.xfail(tansu_selected(), strict=True,
                             reason=f"Tansu lacks {gap} (docs/architecture.md); runs on Apache Kafka")
