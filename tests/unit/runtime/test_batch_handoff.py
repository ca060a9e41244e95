"""A stage's batches are processed in order, one at a time, while the next is fetched; a batch that
raised fails the next hand-over and the attempt's check."""

import threading
import time

import pytest

from tidemark.runtime.worker.batch_handoff import BatchHandoff


def test_batches_are_processed_in_order_one_at_a_time_in_another_thread():
    seen, running, overlapped = [], [0], []
    caller = threading.get_ident()

    def process(batch):
        running[0] += 1
        overlapped.append(running[0] > 1 or threading.get_ident() == caller)
        time.sleep(0.01)
        seen.append(batch)
        running[0] -= 1

    batches = BatchHandoff(process)
    for n in range(20):
        batches.hand_over(n)
    batches.wait()
    batches.close()
    assert seen == list(range(20))
    assert not any(overlapped)


def test_hand_over_returns_while_its_batch_is_processed_and_waits_for_the_batch_before():
    release = [threading.Event(), threading.Event()]
    started = []

    def process(batch):
        started.append(batch)
        release[batch].wait(5)

    batches = BatchHandoff(process)
    batches.hand_over(0)  # returns at once: the caller goes on fetching the next batch
    handed = threading.Event()
    second = threading.Thread(target=lambda: (batches.hand_over(1), handed.set()))
    second.start()
    time.sleep(0.2)
    assert started == [0] and not handed.is_set()  # back pressure: batch 1 waits for batch 0
    release[0].set()
    assert handed.wait(5)
    release[1].set()
    second.join(5)
    batches.wait()
    batches.close()
    assert started == [0, 1]


def test_a_batch_that_raised_fails_the_check_and_the_next_hand_over_but_not_close():
    def process(batch):
        if batch == "bad":
            raise ValueError("state schema changed")

    batches = BatchHandoff(process)
    batches.hand_over("good")
    batches.wait()
    batches.check()  # nothing raised
    batches.hand_over("bad")
    deadline = time.monotonic() + 5
    with pytest.raises(ValueError, match="state schema changed"):
        while time.monotonic() < deadline:
            batches.check()
            time.sleep(0.01)
    with pytest.raises(ValueError, match="state schema changed"):
        batches.hand_over("next")
    batches.close()


def test_close_lets_the_batch_being_processed_end():
    done = []

    def process(batch):
        time.sleep(0.2)
        done.append(batch)

    batches = BatchHandoff(process)
    batches.hand_over(1)
    batches.close()
    assert done == [1]
