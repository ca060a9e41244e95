"""The settings of stage workers that live minutes: the demo, the tests, a developer's machine.

A production worker runs for days, so what it spends at its start is paid once and its JIT and
code generation pay back; a worker of the demo or of a test lives a few minutes, mostly waiting
for a trickle of input, and what it spends at its start and on each idle micro-batch is most of
its CPU. The local pipeline (:class:`~tidemark.local.pipeline.LocalPipeline`) runs its jobs with
these, and a chart installed for development can set them as the worker's ``extraEnv``:

* the C1 compiler only (``tidemark.jvm.QUICK_START_JVM_OPTIONS``);
* no whole-stage code generation: Spark compiles each query's generated Java with Janino when the
  query starts; a stage's query only reads Kafka into Arrow, which the interpreted expressions do
  as well. Measured on the 2-core machine (three SIGKILL tests side by side): 618 -> 587 CPU-s;
* a micro-batch every second instead of every 200 ms: a batch costs Spark about the same CPU
  whatever its size, and so does each trigger that finds no new input (an offset lookup on the
  broker). A 4-worker job idling: 50% -> 38% of a core; the three tests: 587 -> 558 CPU-s. Each
  stage adds up to a second to the latency.
"""

from __future__ import annotations

import json

from tidemark.jvm import QUICK_START_JVM_OPTIONS

QUICK_START_SPARK_CONF = {"spark.sql.codegen.wholeStage": "false"}
QUICK_START_TRIGGER_MS = 1000

QUICK_START_ENV = {
    "TIDEMARK_SPARK__JAVA_OPTIONS": QUICK_START_JVM_OPTIONS,
    "TIDEMARK_SPARK__CONF": json.dumps(QUICK_START_SPARK_CONF),
    "TIDEMARK_SPARK__TRIGGER_MS": str(QUICK_START_TRIGGER_MS),
}
