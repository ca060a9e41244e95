"""The exactly-once PostgreSQL sink example (``tidemark.examples.postgres_sink``), the whole job
on the local pipeline, SIGKILLed at each point of its commit protocol while input flows: after
its snapshot (transactions prepared, not acked), after the ack (the checkpoint may complete,
nothing committed), during the completed checkpoint's notification (one task's transactions
committed, the other's not: the sink's commit is its notification) and after it (every one
committed). The table must then hold exactly the rows the input implies, checked by a query: for
each URL the hits 1..n once each, n its count in the input; and no transaction of the job is
left prepared. Then the job is rescaled through a stop-with-savepoint, parallelism 2 on one
worker per stage to 3 with the sink stage on two workers (each reading its share of the
channel's partitions; the sink's operator state redistributed), with more input, and the table
checked again; the last savepoint's operator state, read back with the harness at parallelism 3,
holds the rows written once (even-split) and the table on every task (broadcast). (Operator
state merged back to fewer tasks is the harness's, ``tests/unit/testing/test_function_checkpoint_hooks.py``.)"""

from __future__ import annotations

import psycopg
import pytest

from pipeline_support import killed_at_every_point, pipeline, topics_for, worker_deaths
from tidemark.examples.generator import expected_url_counts, generate, produce
from tidemark.examples.postgres_sink import hits_to_postgres
from tidemark.local.pipeline import InputFeeder, wait_for
from tidemark.storage import open_storage
from tidemark.testing import KeyedProcessFunctionHarness as Harness

pytestmark = pytest.mark.timeout(900)

SINK = "tidemark.examples.postgres_sink:hits_to_postgres"
KILLS = (
    "0@to_postgres@after-snapshot:2",  # transactions prepared, the checkpoint not acked
    "1@to_postgres@after-ack:2",  # acked: the checkpoint may complete, nothing committed
    "2@to_postgres@during-notification:2",  # task 0's transactions committed, task 1's not
    "3@to_postgres@after-notification:2",  # every one committed, nothing after
)


def test_the_postgres_sink_is_exactly_once_across_sigkills_and_rescales(tmp_path, kafka_bootstrap, unique_name,
                                                                        postgres_dsn):
    topics = topics_for(unique_name)
    table = unique_name("hits").replace("-", "_")
    args = {"dsn": postgres_dsn, "job_id": topics.job_id, "table": table, "input_topic": topics.input}
    with pipeline(tmp_path, kafka_bootstrap, unique_name,
                  env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000"}) as pipe, \
            psycopg.connect(postgres_dsn, autocommit=True) as db:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(SINK, args, faults=KILLS, max_restarts=len(KILLS) + 2)
        all_killed = lambda: killed_at_every_point(job, KILLS)  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=2000, chunk=250, pause_s=1.0,
                             until=all_killed).start()
        records = feeder.join(timeout_s=600)
        _wait_for_rows(db, table, len(records))
        failures = worker_deaths(job)
        # then rescaled through a savepoint: parallelism 2 on one worker per stage -> 3, the sink on two
        # workers (each reading its share of the channel's partitions)
        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert done["status"] == "COMPLETED", done
        assert job.wait(timeout_s=120) == 0, "every worker finishes after the savepoint"
        more = list(generate(600, seed=41, first=len(records)))
        produce(kafka_bootstrap, topics.input, more, 4)
        records += more
        job = pipe.start_job(SINK, {**args, "sink_workers": 2}, parallelism=3, from_savepoint=done["metadata_path"])
        _wait_for_rows(db, table, len(records))
        request = client.trigger_savepoint(topics.job_id, stop=True)
        final = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert final["status"] == "COMPLETED", final
        assert job.wait(timeout_s=120) == 0
        found = dict(db.execute(f"SELECT url, array_agg(hits ORDER BY hits) FROM {table} GROUP BY url").fetchall())
        prepared = db.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                              (f"tidemark:{topics.job_id}:%",)).fetchall()
        [attempt, *_] = job.events("starting attempt")
        storage = open_storage((tmp_path / "home" / "checkpoints").resolve().as_uri())
        with Harness.for_stage(hits_to_postgres(postgres_dsn, job_id=topics.job_id, table=table), "to_postgres",
                               parallelism=3).restore_path(storage, final["metadata_path"]) as restored:
            written = [sum(f.written.get()) for f in restored.functions]
            sinks = [dict(f.sink.items()) for f in restored.functions]
    # the operator state of every kind through the kills and rescales (read back from the last savepoint):
    assert sum(written) == len(records)  # even-split: each task's count once, summed
    assert sinks == [{"table": table}] * 3  # broadcast: the same map on every task
    assert len(failures) == len(KILLS), [(f["stage"], f["epoch"]) for f in failures]
    assert (attempt["parallelism"], attempt["workers"]["to_postgres"]) == (3, 2)
    expected = expected_url_counts(records)
    assert found == {url: list(range(1, n + 1)) for url, n in expected.items()}  # no duplicate, no gap
    assert sum(len(hits) for hits in found.values()) == len(records)
    assert prepared == []  # every row is committed, so no transaction holding rows is left prepared


def _wait_for_rows(db: psycopg.Connection, table: str, count: int) -> None:
    def rows() -> int:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    wait_for(lambda: rows() >= count, timeout_s=240, what=f"{count} rows committed")
