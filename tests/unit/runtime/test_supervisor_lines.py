"""What a stage worker process reads from its supervisor: assignments in order, releases by epoch,
and the end of input (runtime.worker.process)."""

import io
from pathlib import Path

from tidemark.runtime.job.attempt import Assignment, Attempt, release_line
from tidemark.runtime.worker.process import SupervisorLines
from tidemark.types import Epoch


def _assignment(epoch: int) -> Assignment:
    return Assignment(Attempt("m:j", "top_urls", Epoch(epoch), 2, Path("run"), workers={"top_urls": 2}, worker=1),
                      fault="after-ack" if epoch == 3 else None, http_port=9400 + epoch)


def _lines(*lines: bytes) -> SupervisorLines:
    reader = SupervisorLines(io.StringIO(b"".join(lines).decode()))
    reader.start()
    reader.join(5)
    return reader


def test_a_release_names_its_epoch_and_releases_every_older_one():
    reader = _lines(release_line(3))
    assert reader.released(3) and reader.released(2)
    assert not reader.released(4)


def test_assignments_come_in_order_and_the_end_stays_the_end():
    reader = _lines(release_line(1), _assignment(2).to_line(), release_line(2), _assignment(3).to_line())
    assert reader.arrived.is_set()
    assert reader.next_assignment() == _assignment(2)
    assert reader.next_assignment() == _assignment(3)
    assert reader.released(2) and not reader.released(3)
    assert reader.next_assignment() is None
    assert reader.next_assignment() is None


def test_nothing_written_is_the_end_of_input():
    reader = _lines()
    assert reader.arrived.is_set() and reader.next_assignment() is None
    assert not reader.released(1)


def test_blank_and_unreadable_lines_are_skipped():
    reader = _lines(b"\n", b"{not json\n", b"release soon\n", _assignment(5).to_line())
    assert reader.next_assignment() == _assignment(5)
    assert not reader.released(1)
    assert reader.next_assignment() is None
