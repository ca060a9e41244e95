"""``tidemark verify``: check a job's output topic for exactly-once.

The expectation comes from an example job's input topic (``--example NAME --input TOPIC``, see
:mod:`tidemark.examples.verify`) or from an expectation file (``--expect FILE``, see
:mod:`tidemark.verification.expectation_file`). The output is read read_committed; the report
gives the counts of duplicates, missing records (gaps), wrong values and unexpected records, with
a few examples of each. Exit status 0 when the output is exactly once, 1 when it is not; the
other codes are :mod:`tidemark.admin.kafka_connection`'s.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Optional

import typer
from confluent_kafka import KafkaException

from tidemark.examples.verify import EXAMPLES, example_expectation
from tidemark.kafka.reachability import short_reason
from tidemark.exit_codes import EXIT_FAILED, EXIT_USAGE
from tidemark.admin.kafka_connection import fail, kafka_client
from tidemark.verification.committed_reader import UnknownTopic
from tidemark.verification.comparison import Verdict
from tidemark.verification.expectation_file import ExpectationFileError, load_expectation, output_identity
from tidemark.verification.output_check import Identify, check_output

Example = enum.Enum("Example", {name: name for name in EXAMPLES}, type=str)  # type: ignore[misc]


def report(topic: str, against: str, verdict: Verdict) -> str:
    """The text ``tidemark verify`` prints: what was compared, the counts, examples, the verdict."""
    lines = [f"{topic}: {verdict.records} records read (expected {verdict.expected_records}), {against}",
             "  " + ", ".join(f"{kind} {count}" for kind, count in verdict.counts().items())]
    lines += [f"  {kind}, e.g. {'; '.join(cases)}" for kind, cases in verdict.examples.items()]
    lines.append("exactly once" if verdict.exactly_once else "NOT exactly once")
    return "\n".join(lines)


def _check_usage(example: Optional[Example], input_topic: Optional[str], expect: Optional[Path],
                 id_field: Optional[str]) -> None:
    if (example is None) == (expect is None):
        fail("verify", "give --example NAME --input TOPIC (an example job) or --expect FILE (your job)", EXIT_USAGE)
    if expect is not None and input_topic is not None:
        fail("verify", "--input goes with --example; --expect FILE holds the expectation itself", EXIT_USAGE)
    if example is not None and input_topic is None:
        fail("verify", f"--example {example.value} needs --input TOPIC, the job's input topic", EXIT_USAGE)
    if example is not None and id_field is not None:
        fail("verify", "--id-field goes with --expect; an example knows its records' identity", EXIT_USAGE)


def _file_expectation(expect: Path, id_field: Optional[str]) -> tuple[dict[Any, Any], Identify, str]:
    try:
        expected = load_expectation(expect, id_field)
    except ExpectationFileError as exc:
        fail("verify", str(exc), EXIT_USAGE)
    return expected, lambda key, value: output_identity(key, value, id_field), f"against {expect}"


def _example_expectation(client: dict[str, Any], example: str, input_topic: str
                         ) -> tuple[dict[Any, Any], Identify, str]:
    try:
        inputs, expected = example_expectation(client, example, input_topic)
    except UnknownTopic as exc:
        fail("verify", f"--input: {exc}", EXIT_USAGE)
    except KafkaException as exc:
        fail("verify", f"{input_topic}: {short_reason(exc)}", EXIT_FAILED)
    against = f"against the {example} example on {input_topic} ({inputs} input records)"
    return expected, EXAMPLES[example].identify, against


def verify(
    topic: str = typer.Argument(..., help="The job's output topic."),
    example: Optional[Example] = typer.Option(None, "--example", help="An example job of "
                                              "tidemark.examples.access_log: compute the expectation from --input."),
    input_topic: Optional[str] = typer.Option(None, "--input", help="The example job's input topic."),
    expect: Optional[Path] = typer.Option(None, "--expect", help="Expectation file: JSON lines "
                                          '{"key": ..., "value": ...} (docs/guide/running-locally.md).'),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="With --expect: the value field that tells "
                                           "apart the records of one key (default: one record per key)."),
    wait_s: float = typer.Option(0.0, "--wait", min=0, help="Seconds to wait for the topic to exist and the "
                                 "output to match (default 0: check what it holds now)."),
    settle_s: float = typer.Option(3.0, "--settle", min=0, help="With --wait: seconds to go on reading after a "
                                   "match, to catch late duplicates."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
) -> None:
    """Check an output topic for exactly-once: duplicates, gaps and wrong values; exit 0 only when exact."""
    _check_usage(example, input_topic, expect, id_field)
    file_expectation = _file_expectation(expect, id_field) if expect is not None else None
    _, client = kafka_client("verify")
    if file_expectation is not None:
        expected, identify, against = file_expectation
    else:
        assert example is not None and input_topic is not None
        expected, identify, against = _example_expectation(client, example.value, input_topic)
    try:
        verdict = check_output(client, topic, expected, identify, wait_s=wait_s,
                               settle_s=settle_s if wait_s > 0 else 0.0)
    except UnknownTopic as exc:
        fail("verify", f"{exc}" + (f" after waiting {wait_s:g}s" if wait_s else " (--wait S waits for it)"),
             EXIT_USAGE)
    except KafkaException as exc:
        fail("verify", f"{topic}: {short_reason(exc)}", EXIT_FAILED)
    typer.echo(json.dumps({"topic": topic, **verdict.as_dict()}, indent=2) if as_json
               else report(topic, against, verdict))
    raise typer.Exit(0 if verdict.exactly_once else EXIT_FAILED)


def install(app: typer.Typer) -> None:
    app.command("verify")(verify)
