"""Operator request bodies: strict parsing, and storage paths that cannot leave the storage."""

from __future__ import annotations

import json

import pytest

from tidemark.admin.request_bodies import (
    MAX_PATH_LENGTH,
    BadRequest,
    RestoreBody,
    RunBody,
    SavepointBody,
    parse_job_id,
    parse_request_id,
    validate_relative_path,
)

ESCAPES = [
    "../../etc/passwd", "..", "a/..", "a/../../b", "/etc/passwd", "//server/share",
    "%2e%2e/%2e%2e/etc/passwd", "..%2Fetc", "a%00b", "a\\..\\b", "a\x00b", "a\nb", "",
    "a//b", "./a", "a/./b", "a/", "file:///etc/passwd", "s3://bucket/key", "C:/windows",
    "x" * (MAX_PATH_LENGTH + 1),
]


@pytest.mark.parametrize("path", ESCAPES)
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(BadRequest):
        validate_relative_path(path, "target")
    with pytest.raises(BadRequest):
        SavepointBody.parse(f'{{"target": {_json(path)}}}'.encode())
    with pytest.raises(BadRequest):
        RestoreBody.parse(f'{{"savepoint_path": {_json(path)}, "parallelism": 1}}'.encode())


def _json(value: str) -> str:
    return json.dumps(value)


@pytest.mark.parametrize("path", ["orders/savepoints/sp-7", "a", "a.b/c-d_e/_metadata", "x" * MAX_PATH_LENGTH])
def test_safe_relative_paths_are_kept(path: str) -> None:
    assert validate_relative_path(path, "target") == path


def test_savepoint_body_defaults_and_fields() -> None:
    assert SavepointBody.parse(b"") == SavepointBody(stop=False, target=None)
    assert SavepointBody.parse(b"{}") == SavepointBody()
    assert SavepointBody.parse(b'{"stop": true, "target": "sp/here"}') == SavepointBody(stop=True, target="sp/here")
    assert SavepointBody.parse(b'{"stop": false, "target": null}') == SavepointBody()


@pytest.mark.parametrize("raw, fragment", [
    (b"{oops", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[]", "must be a JSON object, not list"),
    (b'"stop"', "must be a JSON object, not str"),
    (b'{"stop": 1}', "stop must be true or false"),
    (b'{"stop": "true"}', "stop must be true or false"),
    (b'{"target": ["a"]}', "target must be a string or null"),
    (b'{"stop": true, "format": "NATIVE"}', "unknown field(s): format"),
])
def test_malformed_savepoint_bodies(raw: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as caught:
        SavepointBody.parse(raw)
    assert fragment in str(caught.value)


def test_restore_body_from_checkpoint_or_savepoint() -> None:
    by_id = RestoreBody.parse(b'{"checkpoint_id": 12, "savepoint_path": null, "parallelism": 3}')
    assert (by_id.checkpoint_id, by_id.savepoint_path, by_id.parallelism) == (12, None, 3)
    assert by_id.metadata_path is None
    by_dir = RestoreBody.parse(b'{"savepoint_path": "orders/savepoints/sp-4", "parallelism": 2}')
    assert by_dir.metadata_path == "orders/savepoints/sp-4/_metadata"
    by_file = RestoreBody.parse(b'{"savepoint_path": "orders/savepoints/sp-4/_metadata", "parallelism": 2}')
    assert by_file.metadata_path == "orders/savepoints/sp-4/_metadata"


@pytest.mark.parametrize("raw, fragment", [
    (b"", "must be a JSON object"),
    (b'{"parallelism": 2}', "exactly one of"),
    (b'{"checkpoint_id": 1, "savepoint_path": "a", "parallelism": 2}', "exactly one of"),
    (b'{"checkpoint_id": 0, "parallelism": 2}', "checkpoint_id must be >= 1"),
    (b'{"checkpoint_id": 1.5, "parallelism": 2}', "checkpoint_id must be an integer"),
    (b'{"checkpoint_id": true, "parallelism": 2}', "checkpoint_id must be an integer"),
    (b'{"checkpoint_id": 1}', "parallelism must be"),
    (b'{"checkpoint_id": 1, "parallelism": 0}', "parallelism must be"),
    (b'{"checkpoint_id": 1, "parallelism": 40000}', "parallelism must be"),
    (b'{"checkpoint_id": 1, "parallelism": "2"}', "parallelism must be an integer"),
    (b'{"checkpoint_id": 1, "parallelism": 2, "epoch": 9}', "unknown field(s): epoch"),
])
def test_malformed_restore_bodies(raw: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as caught:
        RestoreBody.parse(raw)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("job", ["..", ".", "a/b", "", "-lead", "a..b", "with space", "%2e%2e"])
def test_job_ids_that_are_not_one_path_segment_are_refused(job: str) -> None:
    with pytest.raises(BadRequest, match="job id not usable"):
        parse_job_id(job)


def test_job_and_request_ids_accepted() -> None:
    assert parse_job_id("orders-v2.eu_1") == "orders-v2.eu_1"
    assert parse_request_id("0f3c9a") == "0f3c9a"
    for bad in ("", "a b", "../x", "x" * 129):
        with pytest.raises(BadRequest):
            parse_request_id(bad)


@pytest.mark.parametrize("model", [SavepointBody, RestoreBody, RunBody])
def test_body_models_match_the_openapi_request_schemas(model) -> None:
    """The published schema and the parser agree: fields, required ones, no others, bounds."""
    from annotated_types import Ge, Le

    from tidemark.admin.request_bodies import _metadata
    from tidemark.services.coordinator.rest_api import openapi_document

    schema = openapi_document()["components"]["schemas"][model.__name__]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(model.model_fields)
    assert set(schema.get("required", ())) == {name for name, field in model.model_fields.items()
                                               if field.is_required()}
    for name, field in model.model_fields.items():
        published = schema["properties"][name]
        bounds = _metadata(field)
        assert published.get("minimum") == next((b.ge for b in bounds if isinstance(b, Ge)), None), name
        assert published.get("maximum") == next((b.le for b in bounds if isinstance(b, Le)), None), name
