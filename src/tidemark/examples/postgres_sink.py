"""An exactly-once sink to PostgreSQL written with the public job API only (Flink's XA JDBC sink
design): the proof that the operator state and checkpoint hooks suffice for a sink of one's own.

:func:`hits_to_postgres` counts hits per URL (``count_hits``, keyed, as
:func:`tidemark.examples.access_log.url_counts`) and writes every ``{"url", "hits"}`` result as a
row of ``table`` (``url text, hits bigint``) from a second stage without a key
(``to_postgres``), whose :class:`PostgresSink` function works in three steps per checkpoint:

1. ``process``: the rows of the records since the last checkpoint go into one open database
   transaction of the task (opened at the first row);
2. ``snapshot_state`` (the checkpoint's snapshot): ``PREPARE TRANSACTION`` with a global id that
   names the job, the stage, the task and the checkpoint, and the id into union list state: the
   rows are durable in PostgreSQL, invisible, and either side can finish them later; the task's
   count of rows written grows by the transaction's (even-split list state: summed over every
   task, the rows the checkpoint's state has committed or will commit);
3. ``notify_checkpoint_complete(id)``: ``COMMIT PREPARED`` of every prepared transaction of a
   checkpoint up to ``id`` (an aborted checkpoint's transaction waits for the next completed one,
   as its records are not read again), then they leave the state. The notification comes while
   the next checkpoint's transaction may already be open, and PostgreSQL finishes a prepared
   transaction only outside a transaction block, so the task finishes them on a second
   connection of its own (a prepared transaction belongs to no session).

On a restore (``initialize_state`` with ``is_restored``) the restored state lists the prepared
transactions of the restored checkpoint and before: they are committed (one already committed is
no longer prepared and is passed over); every other prepared transaction of this job and stage
was prepared after the restored checkpoint and is rolled back, since its records are read again.
Every task of a restore sees every old task's list (union state), so a rescale commits and
rolls back exactly the same set; two tasks finishing one transaction is harmless (the second
finds it gone). A fresh start rolls back whatever an earlier run of the job left prepared. The
table is broadcast state: a restore into a job writing another table is refused.

The server must allow prepared transactions (``max_prepared_transactions`` > 0). The table is
created if missing. See ``docs/guide/writing-a-job.md``, "An exactly-once sink of your own".
"""

from __future__ import annotations

import functools
from typing import Any

from tidemark.api import CheckpointedFunction, CheckpointListener, JobSpec, ProcessFunction, Stage
from tidemark.examples.access_log import CountHits
from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor
from tidemark.types import JobId

PREPARED = ListStateDescriptor("prepared_transactions")
"""Union list state: ``[checkpoint id, global transaction id]`` of each prepared transaction."""
WRITTEN = ListStateDescriptor("rows_written")
"""Even-split list state: row counts whose sum over every task is the rows the job's checkpoints
committed (a task keeps one item, its running total; after a rescale it may get several, or
none, and sums them at its next snapshot)."""
SINK = BroadcastStateDescriptor("sink")
"""Broadcast state: ``{"table": ...}``, what the job writes; a restore into another table is refused."""


def _connect(dsn: str) -> Any:
    import psycopg  # only a job that writes to PostgreSQL needs the driver

    return psycopg.connect(dsn, autocommit=True)  # transactions begin and end by hand


def _sql(text: str, *names: str, literal: str | None = None) -> Any:
    """``text`` with ``{}`` filled by identifiers (a table) or a literal (a transaction id: the
    transaction commands take no parameters)."""
    from psycopg import sql

    parts = [sql.Identifier(name) for name in names] + ([sql.Literal(literal)] if literal is not None else [])
    return sql.SQL(text).format(*parts)


class PostgresSink(ProcessFunction, CheckpointedFunction, CheckpointListener):
    """See the module. ``job`` and ``stage`` name the transactions; ``table`` takes the rows."""

    def __init__(self, dsn: str, table: str, job: str, stage: str) -> None:
        self.dsn, self.table, self.prefix = dsn, table, f"tidemark:{job}:{stage}:"
        self.connection: Any = None  # the rows' transactions
        self.finisher: Any = None  # COMMIT / ROLLBACK PREPARED, outside the open transaction
        self.open_transaction = False
        self.rows = 0  # in the open transaction

    def initialize_state(self, ctx: Any) -> None:
        self.connection, self.finisher = _connect(self.dsn), _connect(self.dsn)
        self.connection.execute(_sql("CREATE TABLE IF NOT EXISTS {} (url text NOT NULL, hits bigint NOT NULL)",
                                     self.table))
        self.insert = _sql("INSERT INTO {} (url, hits) VALUES (%s, %s)", self.table)
        self.task = ctx.subtask_index
        self.written = ctx.get_list_state(WRITTEN)
        self.sink = ctx.get_broadcast_state(SINK)
        if self.sink.get("table") not in (None, self.table):
            raise ValueError(f"the restored state is of a job writing table {self.sink.get('table')!r}, not "
                             f"{self.table!r}: its rows are there")
        self.sink.put("table", self.table)
        self.prepared = ctx.get_union_list_state(PREPARED)
        restored = [tuple(entry) for entry in self.prepared.get()] if ctx.is_restored() else []
        for _, gid in restored:  # the restored checkpoint completed: its transactions commit
            self._finish("COMMIT PREPARED", gid)
        keep = {gid for _, gid in restored}
        for gid in self._prepared_here():  # prepared after it: their records are read again
            if gid not in keep:
                self._finish("ROLLBACK PREPARED", gid)
        self.prepared.clear()

    def process(self, value: Any, ctx: Any) -> None:
        if not self.open_transaction:
            self.connection.execute("BEGIN")
            self.open_transaction, self.rows = True, 0
        self.connection.execute(self.insert, (value["url"], value["hits"]))
        self.rows += 1

    def snapshot_state(self, ctx: Any) -> None:
        if not self.open_transaction:
            return
        gid = f"{self.prefix}{self.task}:{ctx.checkpoint_id}"
        self.connection.execute(_sql("PREPARE TRANSACTION {}", literal=gid))  # durable, invisible; anyone may finish it
        self.open_transaction = False
        self.prepared.add([ctx.checkpoint_id, gid])
        self.written.update([sum(self.written.get()) + self.rows])

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pending = [tuple(entry) for entry in self.prepared.get()]
        for prepared_at, gid in pending:
            if prepared_at <= checkpoint_id:
                self._finish("COMMIT PREPARED", gid)
        self.prepared.update([list(entry) for entry in pending if entry[0] > checkpoint_id])

    def close(self) -> None:
        for connection in (self.connection, self.finisher):
            if connection is not None:
                connection.close()  # an open transaction rolls back; prepared ones stay prepared

    def _prepared_here(self) -> list[str]:
        rows = self.finisher.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s AND database = "
                                       "current_database()", (self.prefix.replace("%", r"\%") + "%",)).fetchall()
        return [row[0] for row in rows]

    def _finish(self, command: str, gid: str) -> None:
        """``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` ``gid``; one no longer prepared (finished
        before, by this task or another) is passed over."""
        import psycopg

        try:
            self.finisher.execute(_sql(command + " {}", literal=gid))
        except psycopg.errors.UndefinedObject:
            pass


def hits_to_postgres(dsn: str, job_id: str = "hits-to-postgres", table: str = "url_hits",
                     input_topic: str = "access-log", parallelism: int = 2, workers: int = 1,
                     sink_workers: int | None = None) -> JobSpec:
    """Hits per URL into ``table`` of the PostgreSQL database ``dsn``, exactly once (see the
    module); ``sink_workers``: the sink stage's worker processes (default: ``workers``)."""
    sink = "to_postgres"
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("count_hits", (input_topic,), lambda value: value["url"], CountHits, f"{job_id}.hits"),
                Stage(sink, (f"{job_id}.hits",), None, functools.partial(PostgresSink, dsn, table, job_id, sink),
                      f"{job_id}.none", workers=sink_workers)),  # the sink stage writes nothing to Kafka
        parallelism=parallelism, workers=workers)
