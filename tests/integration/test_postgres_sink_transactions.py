"""The exactly-once PostgreSQL sink example (``tidemark.examples.postgres_sink``) on a real server,
its stage run by the harness (the runtime's own tasks and operators, no Kafka): rows are
committed when their checkpoint completes and not before; an aborted checkpoint's rows wait for
the next completed one; a restore commits what the restored checkpoint prepared and rolls back
what was prepared after it, also at another parallelism. The whole job under SIGKILLs is
``tests/e2e/test_postgres_sink.py``."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest

from tidemark.examples.postgres_sink import hits_to_postgres
from tidemark.testing import KeyedProcessFunctionHarness as Harness


@pytest.fixture
def sink(postgres_dsn: str) -> Iterator[tuple[str, str, str]]:
    """(dsn, job, table) of a fresh table and job."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield postgres_dsn, f"job-{name}", name
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        for (gid,) in db.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"tidemark:job-{name}:%",)):
            db.execute(f"ROLLBACK PREPARED '{gid}'")
        db.execute(f"DROP TABLE IF EXISTS {name}")


def _harness(sink: tuple[str, str, str], parallelism: int = 2) -> Harness:
    dsn, job, table = sink
    return Harness.for_stage(hits_to_postgres(dsn, job_id=job, table=table), "to_postgres", parallelism=parallelism)


def _feed(harness: Harness, url: str, first: int, last: int) -> None:
    for hits in range(first, last + 1):
        harness.process({"url": url, "hits": hits}, partition=hits)


def _rows(sink: tuple[str, str, str]) -> Counter[tuple[str, int]]:
    dsn, _, table = sink
    with psycopg.connect(dsn) as db:
        return Counter(db.execute(f"SELECT url, hits FROM {table}").fetchall())


def _prepared(sink: tuple[str, str, str]) -> list[str]:
    dsn, job, _ = sink
    with psycopg.connect(dsn) as db:
        return sorted(row[0] for row in db.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                                   (f"tidemark:{job}:%",)))


def _expected(url: str, last: int) -> Counter[tuple[str, int]]:
    return Counter((url, hits) for hits in range(1, last + 1))


def test_rows_commit_with_their_checkpoint_and_an_aborted_ones_with_the_next(sink) -> None:
    job = sink[1]
    with _harness(sink) as harness:
        _feed(harness, "/a", 1, 4)
        harness.snapshot(1, savepoint=False)
        assert _rows(sink) == Counter()  # prepared, not visible
        assert _prepared(sink) == [f"tidemark:{job}:to_postgres:0:1", f"tidemark:{job}:to_postgres:1:1"]
        harness.notify_checkpoint_complete(1)
        assert _rows(sink) == _expected("/a", 4) and _prepared(sink) == []
        _feed(harness, "/a", 5, 6)
        harness.snapshot(2, savepoint=False)
        harness.notify_checkpoint_aborted(2)  # its records are not read again: they wait
        _feed(harness, "/a", 7, 7)
        harness.snapshot(3, savepoint=False)
        assert _rows(sink) == _expected("/a", 4)
        harness.notify_checkpoint_complete(3)
        assert _rows(sink) == _expected("/a", 7) and _prepared(sink) == []


def test_a_completion_arriving_while_the_next_rows_are_open_commits_only_the_prepared_ones(sink) -> None:
    """The runtime delivers a completed checkpoint's notification between micro-batches, when the
    task may already hold rows of the next checkpoint in an open transaction (in the whole job the
    worker failed there: PostgreSQL finishes a prepared transaction only outside a transaction
    block)."""
    with _harness(sink, parallelism=1) as harness:
        _feed(harness, "/a", 1, 4)
        harness.snapshot(1, savepoint=False)
        _feed(harness, "/a", 5, 6)  # the next checkpoint's transaction, open
        harness.notify_checkpoint_complete(1)
        assert _rows(sink) == _expected("/a", 4)
        _feed(harness, "/a", 7, 7)  # still the same open transaction
        harness.snapshot(2, savepoint=False)
        harness.notify_checkpoint_complete(2)
        assert _rows(sink) == _expected("/a", 7) and _prepared(sink) == []


@pytest.mark.parametrize("parallelism", [2, 3, 1])
def test_a_restore_commits_the_restored_checkpoints_rows_and_rolls_back_later_ones(sink, parallelism: int) -> None:
    first = _harness(sink).open()
    _feed(first, "/a", 1, 3)
    first.snapshot(1, savepoint=False)
    first.notify_checkpoint_complete(1)
    _feed(first, "/a", 4, 6)
    restored_from = first.snapshot(2, savepoint=False)  # completes, but the notification never arrives
    _feed(first, "/a", 7, 9)
    first.snapshot(3, savepoint=False)  # prepared; the checkpoint never completes
    assert len(_prepared(sink)) == 4
    first.close()  # the attempt dies: what it prepared stays prepared

    with _harness(sink, parallelism).restore(restored_from) as second:
        assert _rows(sink) == _expected("/a", 6)  # checkpoint 2's transactions committed, 3's rolled back
        assert _prepared(sink) == []
        _feed(second, "/a", 7, 9)  # read again from checkpoint 2's positions
        second.snapshot(4, savepoint=False)
        second.notify_checkpoint_complete(4)
    assert _rows(sink) == _expected("/a", 9)


def test_a_fresh_start_rolls_back_what_an_earlier_run_left_prepared(sink) -> None:
    first = _harness(sink).open()
    _feed(first, "/b", 1, 2)
    first.snapshot(1, savepoint=False)
    first.close()
    assert len(_prepared(sink)) == 2
    with _harness(sink):
        assert _prepared(sink) == [] and _rows(sink) == Counter()


def test_a_restore_into_a_job_writing_another_table_is_refused(sink) -> None:
    dsn, job, _ = sink
    with _harness(sink) as first:
        _feed(first, "/c", 1, 2)
        snapshot = first.snapshot(1, savepoint=False)
        first.notify_checkpoint_complete(1)
        assert sum(sum(f.written.get()) for f in first.functions) == 2
    other = Harness.for_stage(hits_to_postgres(dsn, job_id=job, table="another_table"), "to_postgres", parallelism=2)
    with pytest.raises(ValueError, match="of a job writing table"):
        other.restore(snapshot).open()
    other.close()
