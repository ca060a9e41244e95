"""The registry-backed codec (confluent-kafka's SchemaRegistryClient), against an in-test HTTP server.

No Confluent-compatible registry can be installed here (Karapace is not on the reachable package
indexes), so :class:`FakeConfluentRegistry` implements the documented REST endpoints the client
uses, with real BACKWARD_TRANSITIVE checks done by ``avro.compatibility``.
"""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import avro.io
import avro.schema
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from confluent_kafka.schema_registry import Schema

from protocol_samples import SAMPLES
from tidemark.protocol import codec
from tidemark.protocol import messages as m
from tidemark.protocol.errors import SchemaRegistryError, SchemaRegistryUnavailable, UnknownSchemaId
from tidemark.protocol.datum import to_datum
from tidemark.protocol.schema_ids import registry_call, registry_client, without_credentials
from tidemark.protocol.schemas import load_catalog, parse_version, strip_logical_types

FIRST_ID = 100_001


class FakeConfluentRegistry(ThreadingHTTPServer):
    """The subset of the Confluent Schema Registry REST API that Tidemark uses."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.config: dict[str, str] = {}
        self.requests: list[str] = []
        self.authorizations: list[str | None] = []
        self.delay_s = 0.0
        self.fail_with: int | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out closed its end: nothing to report

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def register(self, subject: str, text: str) -> tuple[int, dict[str, Any]]:
        try:
            candidate = avro.schema.parse(text)
        except Exception as exc:  # noqa: BLE001 - the registry answers 422 for any invalid schema
            return 422, {"error_code": 42201, "message": f"Invalid schema: {exc}"}
        for schema_id in self.subjects.get(subject, []):
            if json.loads(self.schemas[schema_id]) == json.loads(text):
                return 200, {"id": schema_id}
        if not self.compatible(subject, candidate):
            return 409, {"error_code": 409, "message": "Schema being registered is incompatible"}
        schema_id = next((i for i, t in self.schemas.items() if json.loads(t) == json.loads(text)), None)
        if schema_id is None:
            schema_id = FIRST_ID + len(self.schemas)
            self.schemas[schema_id] = text
        self.subjects.setdefault(subject, []).append(schema_id)
        return 200, {"id": schema_id}

    def compatible(self, subject: str, candidate: avro.schema.Schema) -> bool:
        existing = self.subjects.get(subject, [])
        if self.config.get(subject, "BACKWARD") == "BACKWARD_TRANSITIVE":
            writers = existing
        else:
            writers = existing[-1:]
        checker = ReaderWriterCompatibilityChecker()
        return all(checker.get_compatibility(candidate, avro.schema.parse(self.schemas[w])).compatibility
                   is SchemaCompatibilityType.compatible for w in writers)


class _Handler(BaseHTTPRequestHandler):
    server: FakeConfluentRegistry

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _route(self, method: str) -> None:
        server = self.server
        server.requests.append(f"{method} {urlsplit(self.path).path}")
        server.authorizations.append(self.headers.get("Authorization"))
        time.sleep(server.delay_s)
        if server.fail_with:
            return self._reply(server.fail_with, {"error_code": server.fail_with * 100, "message": "boom"})
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        if method == "POST" and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            return self._reply(*server.register(parts[1], body["schema"]))
        if method == "GET" and parts[:2] == ["schemas", "ids"] and len(parts) == 3:
            text = server.schemas.get(int(parts[2]))
            if text is None:
                return self._reply(404, {"error_code": 40403, "message": "Schema not found"})
            return self._reply(200, {"schema": text})
        if method == "PUT" and parts[0] == "config" and len(parts) == 2:
            server.config[parts[1]] = body["compatibility"]
            return self._reply(200, {"compatibility": body["compatibility"]})
        if method == "POST" and parts[:2] == ["compatibility", "subjects"] and parts[3:] == ["versions", "latest"]:
            ok = server.compatible(parts[2], avro.schema.parse(body["schema"]))
            return self._reply(200, {"is_compatible": ok})
        return self._reply(404, {"error_code": 404, "message": "Not found"})

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")


@pytest.fixture()
def registry() -> Iterator[FakeConfluentRegistry]:
    server = FakeConfluentRegistry()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_codec_registers_every_version_and_writes_registry_ids(registry: FakeConfluentRegistry) -> None:
    registry_codec = codec.Codec.with_registry(registry.url)
    catalog = load_catalog()
    assert len(registry.schemas) == len(catalog.all_versions())
    assert set(registry.config.values()) == {"BACKWARD_TRANSITIVE"}
    assert len(registry.subjects["tidemark.protocol.TaskAck-value"]) == 2
    for samples in SAMPLES.values():
        for message in samples:
            data = registry_codec.encode(message)
            schema_id = struct.unpack(">I", data[1:5])[0]
            subject = f"tidemark.protocol.{type(message).__name__}-value"
            assert schema_id == registry.subjects[subject][-1] >= FIRST_ID
            assert registry_codec.decode(data) == message


def test_registration_is_idempotent_across_restarts(registry: FakeConfluentRegistry) -> None:
    first = codec.Codec.with_registry(registry.url).encode(SAMPLES[m.TaskAck][0])
    second = codec.Codec.with_registry(registry.url)
    assert second.encode(SAMPLES[m.TaskAck][0]) == first
    assert len(registry.schemas) == len(load_catalog().all_versions())


def test_a_newer_writer_schema_is_fetched_by_id_and_resolved(registry: FakeConfluentRegistry) -> None:
    """Another producer registered TaskDecline v2 (a field we do not know); we still read it."""
    reader_codec = codec.Codec.with_registry(registry.url)
    newer = json.loads(json.dumps(load_catalog().newest("tidemark.protocol.TaskDecline").schema_json))
    newer["fields"].append({"name": "retryable", "type": "boolean", "default": False, "doc": "may be retried"})
    client = registry_client(registry.url)
    assert client.test_compatibility("tidemark.protocol.TaskDecline-value", Schema(json.dumps(newer), "AVRO"))
    new_id = client.register_schema("tidemark.protocol.TaskDecline-value", Schema(json.dumps(newer), "AVRO"))
    decline = SAMPLES[m.TaskDecline][0]
    out = io.BytesIO()
    out.write(b"\x00" + struct.pack(">I", new_id))
    physical = parse_version(newer, None).physical
    avro.io.DatumWriter(physical).write({**to_datum(decline), "retryable": True}, avro.io.BinaryEncoder(out))
    fetches = len(registry.requests)
    assert reader_codec.decode(out.getvalue()) == decline
    assert registry.requests[fetches:] == [f"GET /schemas/ids/{new_id}"]
    assert reader_codec.decode(out.getvalue()) == decline
    assert len(registry.requests) == fetches + 1  # cached
    assert strip_logical_types(newer)["fields"][-1]["name"] == "retryable"


def test_unknown_ids_raise_and_are_remembered(registry: FakeConfluentRegistry) -> None:
    registry_codec = codec.Codec.with_registry(registry.url)
    data = b"\x00" + struct.pack(">I", 7) + b"\x00"
    for _ in range(3):
        with pytest.raises(UnknownSchemaId):
            registry_codec.decode(data)
    assert registry.requests.count("GET /schemas/ids/7") == 1


def test_a_record_encoded_with_local_ids_is_unknown_to_a_registry_codec(registry: FakeConfluentRegistry) -> None:
    with pytest.raises(UnknownSchemaId):
        codec.Codec.with_registry(registry.url).decode(codec.Codec.local().encode(SAMPLES[m.Barrier][0]))


def test_an_incompatible_schema_is_refused_with_the_registry_error(registry: FakeConfluentRegistry) -> None:
    codec.Codec.with_registry(registry.url)
    breaking = json.loads(json.dumps(load_catalog().newest("tidemark.protocol.TaskDecline").schema_json))
    breaking["fields"].append({"name": "attempt", "type": "long", "doc": "required, no default"})
    client = registry_client(registry.url)
    schema = Schema(json.dumps(breaking), "AVRO")
    assert not client.test_compatibility("tidemark.protocol.TaskDecline-value", schema)
    with pytest.raises(SchemaRegistryError) as caught:
        registry_call("register", lambda: client.register_schema("tidemark.protocol.TaskDecline-value", schema))
    assert caught.value.status == 409 and caught.value.error_code == 409
    assert not isinstance(caught.value, SchemaRegistryUnavailable)


def test_server_errors_are_unavailable_not_decode_errors(registry: FakeConfluentRegistry) -> None:
    registry_codec = codec.Codec.with_registry(registry.url)
    registry.fail_with = 503
    with pytest.raises(SchemaRegistryUnavailable) as caught:
        registry_codec.decode(b"\x00" + struct.pack(">I", 9) + b"\x00")
    assert caught.value.status == 503


def test_a_slow_registry_times_out(registry: FakeConfluentRegistry) -> None:
    registry.delay_s = 3.0
    started = time.perf_counter()
    with pytest.raises(SchemaRegistryUnavailable, match="unreachable"):
        registry_call("get schema 1", lambda: registry_client(registry.url, timeout_s=0.2).get_schema(1))
    assert time.perf_counter() - started < 2.5  # the client's timeout ended the call, not the answer (a wide
    # margin: the suite runs three lanes on two cores)


def test_an_unreachable_registry_fails_fast_and_clearly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SchemaRegistryUnavailable, match=f"127.0.0.1:{port}"):
        codec.Codec.with_registry(f"http://127.0.0.1:{port}", timeout_s=1.0)


def test_default_codec_uses_the_configured_registry(registry: FakeConfluentRegistry,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(codec.REGISTRY_URL_ENV, registry.url)
    monkeypatch.setattr(codec, "_default", None)
    data = codec.encode(SAMPLES[m.StateChange][0])
    assert struct.unpack(">I", data[1:5])[0] >= FIRST_ID
    assert codec.decode_as(data, m.StateChange) == SAMPLES[m.StateChange][0]
    monkeypatch.setattr(codec, "_default", None)


def test_credentials_in_the_url_are_sent_as_basic_auth(registry: FakeConfluentRegistry) -> None:
    url = registry.url.replace("http://", "http://api-key:s%40cret@")
    assert without_credentials(url) == registry.url
    with pytest.raises(SchemaRegistryError) as caught:
        registry_call("get schema", lambda: registry_client(url).get_schema(424_242))
    assert caught.value.status == 404 and caught.value.error_code == 40403
    assert registry.authorizations == ["Basic YXBpLWtleTpzQGNyZXQ="]  # base64("api-key:s@cret")
