"""A stage whose input Spark prepares (a :class:`~tidemark.api.SparkStep`): failed requests per
URL owner from the access log (:mod:`tidemark.examples.access_log`) and a static CSV table of URL
owners.

::

    access-log ──Spark: from_json, status >= 400, join owners.csv──> count per owner ──> owner-errors

Spark parses each record with its schema (``from_json``, no JSON decoding in Python), keeps the
failed requests and joins them with the owners table (``url,owner``; a URL without an owner
counts for ``nobody``), on its executors. The stage's function gets one row per failed request,
``{"url", "status", "owner"}``, keyed by the ``owner`` column, counts it in a ValueState and emits
``{"owner", "errors"}`` on every row (an owner's output is 1, 2, ..., n). A record Spark cannot
parse (no ``url``) is dead-lettered with its bytes and origin.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tidemark.api import JobSpec, KeyedProcessFunction, SparkStep, Stage, StateBackendKind
from tidemark.examples.access_log import RECORD_SCHEMA
from tidemark.state import ValueStateDescriptor
from tidemark.types import CheckpointingMode, JobId

NO_OWNER = "nobody"


def failed_requests_by_owner(owners_csv: str, min_status: int = 400) -> SparkStep:
    """The step of the module docstring: the records of requests with ``status >= min_status``,
    parsed, with their URL's owner from ``owners_csv``."""
    def step(frame: Any) -> Any:
        from pyspark.sql import functions as F

        parsed = frame.withColumn("r", F.from_json(F.col("value").cast("string"), RECORD_SCHEMA))
        # an unparsable record stays (its url is null): the required column dead-letters it
        failed = parsed.where(F.col("r.url").isNull() | (F.col("r.status") >= min_status))
        owners = frame.sparkSession.table("owners")
        joined = failed.join(F.broadcast(owners), failed["r.url"] == owners["url"], "left")
        return joined.select("topic", "partition", "offset", "timestamp", "value",
                             F.col("r.url").alias("url"), F.col("r.status").alias("status"),
                             F.coalesce(owners["owner"], F.lit(NO_OWNER)).alias("owner"))

    return SparkStep(step, required=("url",),
                     tables={"owners": lambda spark: spark.read.csv(owners_csv, header=True, schema="url STRING, "
                                                                                                   "owner STRING")})


class CountErrors(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.errors = ctx.get_state(ValueStateDescriptor("errors", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        errors = self.errors.value() + 1
        self.errors.update(errors)
        ctx.emit(ctx.key, {"owner": ctx.key, "errors": errors})


def owner_errors(owners_csv: str, job_id: str = "owner-errors", input_topic: str = "access-log",
                 output_topic: str = "owner-errors", min_status: int = 400, parallelism: int = 2,
                 mode: str = "EXACTLY_ONCE", state_backend: str = "heap") -> JobSpec:
    """The job of the module docstring; ``min_status``: the smallest status that counts as failed."""
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("owner_errors", (input_topic,), "owner", CountErrors, output_topic,
                      spark_step=failed_requests_by_owner(owners_csv, min_status)),),
        mode=CheckpointingMode(mode), parallelism=parallelism, state_backend=StateBackendKind(state_backend))


def write_owners_csv(path: Path, owners: Mapping[str, str]) -> Path:
    """The owners table as the step reads it: a header, then one ``url,owner`` line per URL."""
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["url", "owner"])
        writer.writerows(sorted(owners.items()))
    return path


def expected_owner_errors(records: Iterable[bytes], owners: Mapping[str, str], min_status: int = 400) -> Counter[str]:
    """Failed requests per owner, as the job counts them."""
    found: Counter[str] = Counter()
    for raw in records:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("url") and int(record.get("status") or 0) >= min_status:
            found[owners.get(record["url"], NO_OWNER)] += 1
    return found
