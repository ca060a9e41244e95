"""Compare a job's committed output with what it should be: duplicates, gaps, wrong values.

Every output record has an *identity*, what tells it apart from the other records the job
writes (``(url, hits)`` for the url-counts example, ``(key, seq)`` for a job numbering its
updates per key, the key alone for a job writing one result per key). The expectation maps each
identity to the value it must carry, or to :data:`ANY_VALUE` when only its presence is checked
(values that legitimately depend on timing). Exactly once means: each expected identity appears
exactly once, no other identity appears, and every checked value is equal.

Pure: no I/O; :func:`compare` takes the records already read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ANY_VALUE: Any = type("AnyValue", (), {"__repr__": lambda self: "ANY_VALUE"})()
"""An expected value that matches every value: only the identity's presence is checked."""

EXAMPLES_PER_KIND = 3  # examples kept per kind of problem


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison. ``examples`` holds up to :data:`EXAMPLES_PER_KIND` readable cases
    per problem kind (``duplicates``, ``missing``, ``wrong values``, ``unexpected``)."""

    records: int  # output records read
    expected_records: int
    duplicates: int  # copies beyond the first of an identity
    missing: int  # expected identities absent from the output (gaps)
    wrong_values: int  # expected identities present with another value
    unexpected: int  # identities in the output that are not expected (their extra copies are duplicates)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.missing or self.wrong_values or self.unexpected)

    @property
    def details(self) -> list[str]:
        """One line per problem kind found, with its examples."""
        return [f"{self.counts()[kind]} {kind}, e.g. {'; '.join(cases)}" for kind, cases in self.examples.items()]

    def counts(self) -> dict[str, int]:
        return {"duplicates": self.duplicates, "missing": self.missing, "wrong values": self.wrong_values,
                "unexpected": self.unexpected}

    def summary(self) -> str:
        return (f"{self.records} records (expected {self.expected_records}): {self.duplicates} duplicates, "
                f"{self.missing} missing, {self.wrong_values} wrong values, {self.unexpected} unexpected")

    def as_dict(self) -> dict[str, Any]:
        return {"exactly_once": self.exactly_once, "records": self.records,
                "expected_records": self.expected_records, "duplicates": self.duplicates,
                "missing": self.missing, "wrong_values": self.wrong_values, "unexpected": self.unexpected,
                "examples": self.examples}


def show(value: Any) -> str:
    """A compact, stable rendering of an identity or value for a report."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def compare(actual: Iterable[tuple[Hashable, Any]], expected: Mapping[Hashable, Any]) -> Verdict:
    """Compare ``actual`` output, ``(identity, value)`` pairs in the order read, with ``expected``
    (identity -> value or :data:`ANY_VALUE`). A duplicate's value is not checked again: the first
    copy's is."""
    counts: Counter[Hashable] = Counter()
    first_value: dict[Hashable, Any] = {}
    for identity, value in actual:
        counts[identity] += 1
        first_value.setdefault(identity, value)
    examples: dict[str, list[str]] = {}

    def note(kind: str, text: str) -> None:
        cases = examples.setdefault(kind, [])
        if len(cases) < EXAMPLES_PER_KIND:
            cases.append(text)

    duplicates = 0
    for identity, n in counts.items():
        if n > 1:
            duplicates += n - 1
            note("duplicates", f"{show(identity)} x{n}")
    missing = 0
    wrong = 0
    for identity, want in expected.items():
        if identity not in counts:
            missing += 1
            note("missing", show(identity))
        elif want is not ANY_VALUE and first_value[identity] != want:
            wrong += 1
            note("wrong values", f"{show(identity)}: got {show(first_value[identity])}, want {show(want)}")
    unexpected = 0
    for identity in counts:
        if identity not in expected:
            unexpected += 1
            note("unexpected", f"{show(identity)}: {show(first_value[identity])}")
    ordered = {kind: examples[kind] for kind in ("duplicates", "missing", "wrong values", "unexpected")
               if kind in examples}
    return Verdict(sum(counts.values()), len(expected), duplicates, missing, wrong, unexpected, ordered)
