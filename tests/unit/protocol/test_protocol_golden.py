"""Golden encoded samples of every schema version: the newest reader decodes every one of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from protocol_samples import to_jsonable
from tidemark.protocol import codec, messages
from tidemark.protocol.schema_ids import IDS_FILE, LocalSchemaIdTable
from tidemark.protocol.schemas import NAMESPACE, load_catalog

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
CATALOG = load_catalog()
GOLDEN_FILES = sorted(GOLDEN.glob("*/v*.json"))
NEWEST_GOLDEN = [p for p in GOLDEN_FILES if p.stem == f"v{CATALOG.newest(f'{NAMESPACE}.{p.parent.name}').version}"]


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


@pytest.fixture(scope="module")
def local() -> codec.Codec:
    return codec.Codec.local()


def test_every_schema_version_has_golden_samples() -> None:
    have = {(p.parent.name, p.stem) for p in GOLDEN_FILES}
    want = {(v.name, f"v{v.version}") for v in CATALOG.all_versions()}
    assert want <= have, sorted(want - have)
    assert len(GOLDEN_FILES) >= len(messages.MESSAGE_TYPES) + 1  # at least one evolved record


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_newest_reader_decodes_every_golden_sample(local: codec.Codec, path: Path) -> None:
    doc = _load(path)
    assert CATALOG.root is not None
    table = LocalSchemaIdTable.load(CATALOG.root / IDS_FILE)
    entry = next(e for e in table.entries if (e.subject, e.version) == (doc["subject"], doc["version"]))
    assert (entry.id, entry.fingerprint) == (doc["schema_id"], doc["fingerprint"])
    assert doc["samples"]
    for sample in doc["samples"]:
        data = bytes.fromhex(sample["hex"])
        assert int.from_bytes(data[1:5], "big") == doc["schema_id"]
        decoded = local.decode(data)
        assert f"{NAMESPACE}.{type(decoded).__name__}" + "-value" == doc["subject"]
        assert _without_later_defaults(to_jsonable(decoded), sample["expected"]) == sample["expected"]


def _without_later_defaults(decoded: Any, expected: Any) -> Any:
    """``decoded`` without the fields that a schema version newer than the golden file added.

    A golden file records what the newest reader decoded when the file was written; a field added
    later is absent from it, and the newest reader must give that field its declared default.
    """
    if isinstance(decoded, list) and isinstance(expected, list) and len(decoded) == len(expected):
        return [_without_later_defaults(d, e) for d, e in zip(decoded, expected)]
    if not (isinstance(decoded, dict) and isinstance(expected, dict) and "@type" in decoded):
        return decoded
    fields = {f.name: f for f in dataclasses.fields(getattr(messages, decoded["@type"]))}
    kept = {}
    for name, value in decoded.items():
        if name in expected:
            kept[name] = _without_later_defaults(value, expected[name])
            continue
        field = fields[name]
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert value == to_jsonable(default), f"{decoded['@type']}.{name}: {value!r} is not its default"
    return kept


@pytest.mark.parametrize("path", NEWEST_GOLDEN, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_newest_version_samples_re_encode_to_the_same_bytes(local: codec.Codec, path: Path) -> None:
    """Only the newest version is promised to re-encode byte for byte; older ones decode."""
    doc = _load(path)
    for sample in doc["samples"]:
        data = bytes.fromhex(sample["hex"])
        assert local.encode(local.decode(data)) == data


def test_task_ack_v1_reads_processed_bytes_as_its_default(local: codec.Codec) -> None:
    v1 = _load(GOLDEN / "TaskAck" / "v1.json")
    v2 = _load(GOLDEN / "TaskAck" / "v2.json")
    old = local.decode_as(bytes.fromhex(v1["samples"][0]["hex"]), messages.TaskAck)
    new = local.decode_as(bytes.fromhex(v2["samples"][0]["hex"]), messages.TaskAck)
    assert old.timings.processed_bytes == 0 and new.timings.processed_bytes == 65_536
    assert (old.timings.alignment_ms, old.timings.sync_ms, old.timings.async_ms) == (12, 3, 250)
    assert old.task == new.task and old.checkpoint_id == new.checkpoint_id


def test_job_registration_v1_reads_no_changelog_operators(local: codec.Codec) -> None:
    v1 = _load(GOLDEN / "JobRegistration" / "v1.json")
    v2 = _load(GOLDEN / "JobRegistration" / "v2.json")
    old = local.decode_as(bytes.fromhex(v1["samples"][0]["hex"]), messages.JobRegistration)
    new = local.decode_as(bytes.fromhex(v2["samples"][2]["hex"]), messages.JobRegistration)
    assert (old.changelog_operators, old.changelog_partitions) == ((), 0)
    assert (new.changelog_operators, new.changelog_partitions) == (("op-a",), 8)
    assert old.tasks == new.tasks and old.max_parallelism == new.max_parallelism


def test_job_registration_v3_reads_every_task_in_worker_zero(local: codec.Codec) -> None:
    v3 = _load(GOLDEN / "JobRegistration" / "v3.json")
    v4 = _load(GOLDEN / "JobRegistration" / "v4.json")
    old = local.decode_as(bytes.fromhex(v3["samples"][0]["hex"]), messages.JobRegistration)
    new = local.decode_as(bytes.fromhex(v4["samples"][4]["hex"]), messages.JobRegistration)
    assert old.workers == () and len(old.tasks) == 2
    assert new.workers == (0, 0, 1) and [t.task_id for t in new.tasks] == ["op-a#0", "op-a#1", "op-a#2"]
    assert new.tasks[:2] == old.tasks
