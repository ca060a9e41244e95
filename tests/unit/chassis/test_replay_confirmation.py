"""The event-log reader's delivery confirmation (``confirm_delivery``) through a restarting broker:
whatever the end-offsets call raises, it is no confirmation and never the reader's failure (a
coordinator crashed so when the broker it read from was SIGKILLed and started again)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.chassis.replay import EventLogReader

pytestmark = pytest.mark.unit


class _Consumer:
    """The two calls the confirmation makes, answering as a broker that restarts between them."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return 0, answer


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT])
def test_an_end_offsets_call_that_fails_confirms_nothing_and_raises_nothing(code):
    reader = EventLogReader({"bootstrap.servers": "127.0.0.1:1"}, ["control"], confirm_delivery=True)
    reader._boundary = {("control", 0): 5}
    reader._position = {("control", 0): 5}
    reader._ends_client = _Consumer([5, KafkaException(KafkaError(code)), 5, 5])
    reader._confirm_delivery()  # asks; nothing to confirm yet
    reader._confirm_delivery()  # the broker is restarting
    assert reader.delivered_at_ms is None
    reader._confirm_delivery()  # back: the ends asked before were read -> confirmed
    assert reader.delivered_at_ms is not None
