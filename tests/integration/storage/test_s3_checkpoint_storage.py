"""S3 specifics against a real moto S3 server; the shared contract runs in
tests/unit/storage/test_storage_contract.py (its ``s3`` case)."""

from __future__ import annotations

import hashlib
import io
import os
import time
from dataclasses import replace

import pytest
from moto_s3_server import raw_client

from tidemark.processes import free_port
from tidemark.storage import open_storage
from tidemark.storage.base import CorruptStateFile, StorageError
from tidemark.storage.s3 import (
    MIN_PART_SIZE,
    SHA256_METADATA_KEY,
    S3CheckpointStorage,
    S3Options,
    parse_s3_url,
)

SMALL_PARTS = {"multipart_threshold": MIN_PART_SIZE, "part_size": MIN_PART_SIZE}
BIG = MIN_PART_SIZE * 2 + 12345  # three parts: 5 MiB, 5 MiB, 12345 bytes


def storage_on(bucket: str, prefix: str = "root", **overrides: object) -> S3CheckpointStorage:
    return S3CheckpointStorage(bucket, prefix, replace(S3Options.from_env(), **overrides))


def no_pending_uploads(endpoint: str, bucket: str) -> bool:
    return not raw_client(endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads")


class Unseekable(io.RawIOBase):
    """A pipe-like stream: readable once, no tell/seek."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


class FailsOnSecondPass(io.BytesIO):
    """Seekable; once rewound, the read that reaches ``fail_at`` fails (a disk error mid-upload)."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        super().__init__(data)
        self.fail_at = fail_at
        self.rewound = False

    def seek(self, offset: int, whence: int = 0) -> int:
        self.rewound = True
        return super().seek(offset, whence)

    def read(self, size: int | None = -1) -> bytes:
        if self.rewound and self.tell() + (size or 0) > self.fail_at:
            raise OSError("disk on fire")
        return super().read(size)


class ChangesOnSecondPass(io.BytesIO):
    """Seekable; rewinding it flips the last byte, as if the file were rewritten meanwhile."""

    def seek(self, offset: int, whence: int = 0) -> int:
        view = self.getbuffer()
        view[-1] ^= 0xFF
        del view
        return super().seek(offset, whence)


def test_registry_opens_s3_urls_with_settings_from_env(s3_bucket: str, s3_env: str) -> None:
    storage = open_storage(f"s3://{s3_bucket}/jobs/a/")
    assert isinstance(storage, S3CheckpointStorage)
    assert storage.url == f"s3://{s3_bucket}/jobs/a" and storage.prefix == "jobs/a/"
    assert storage.options.endpoint_url == s3_env and storage.options.addressing_style == "path"
    storage.write_bytes("x", b"1")
    keys = [o["Key"] for o in raw_client(s3_env).list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["jobs/a/x"]


@pytest.mark.parametrize("source", ["seekable", "unseekable"])
def test_large_streams_go_as_one_multipart_upload(s3_bucket: str, s3_env: str, source: str) -> None:
    storage = storage_on(s3_bucket, **SMALL_PARTS)
    data = os.urandom(BIG)
    stream = io.BytesIO(data) if source == "seekable" else Unseekable(data)
    ref = storage.write_from("shared/big.sst", stream, shared=True)  # type: ignore[arg-type]
    assert (ref.size_bytes, ref.sha256, ref.shared) == (BIG, hashlib.sha256(data).hexdigest(), True)
    head = raw_client(s3_env).head_object(Bucket=s3_bucket, Key="root/shared/big.sst")
    assert head["ETag"].strip('"').endswith("-3")  # three parts, completed as one object
    assert head["Metadata"][SHA256_METADATA_KEY] == ref.sha256
    assert storage.read_verified(ref) == data
    assert no_pending_uploads(s3_env, s3_bucket)


def test_single_put_stores_sha256_metadata(s3_bucket: str, s3_env: str) -> None:
    storage = storage_on(s3_bucket)
    ref = storage.write_from("a/small", io.BytesIO(b"abc"))
    head = raw_client(s3_env).head_object(Bucket=s3_bucket, Key="root/a/small")
    assert head["Metadata"][SHA256_METADATA_KEY] == ref.sha256 == hashlib.sha256(b"abc").hexdigest()
    assert "-" not in head["ETag"]


def test_failure_mid_upload_aborts_and_leaves_the_old_object(s3_bucket: str, s3_env: str) -> None:
    storage = storage_on(s3_bucket, **SMALL_PARTS)
    old = storage.write_bytes("f", b"old")
    with pytest.raises(OSError, match="disk on fire"):
        storage.write_from("f", FailsOnSecondPass(os.urandom(BIG), fail_at=MIN_PART_SIZE + 1))
    assert storage.read_verified(old) == b"old"
    with pytest.raises(OSError):
        storage.write_from("g", FailsOnSecondPass(os.urandom(BIG), fail_at=MIN_PART_SIZE + 1))
    assert not storage.exists("g")
    assert no_pending_uploads(s3_env, s3_bucket)


def test_a_source_changed_between_hash_and_upload_is_refused(s3_bucket: str, s3_env: str) -> None:
    storage = storage_on(s3_bucket, **SMALL_PARTS)
    with pytest.raises(StorageError, match="changed while it was uploaded"):
        storage.write_from("moving", ChangesOnSecondPass(os.urandom(BIG)))
    assert not storage.exists("moving")
    assert no_pending_uploads(s3_env, s3_bucket)


class ResizedOnSecondPass(io.BytesIO):
    """Seekable; rewinding it makes it ``size`` bytes long (a file truncated or appended to)."""

    def __init__(self, data: bytes, size: int) -> None:
        super().__init__(data)
        self.size = size

    def seek(self, offset: int, whence: int = 0) -> int:
        self.truncate(self.size)
        if self.size > len(self.getvalue()):
            end = super().seek(0, 2)
            self.write(os.urandom(self.size - end))
        return super().seek(offset, whence)


@pytest.mark.parametrize("size", [MIN_PART_SIZE // 2, BIG - 1, BIG + 1, BIG + MIN_PART_SIZE])
def test_a_source_resized_between_hash_and_upload_is_refused(s3_bucket: str, s3_env: str, size: int) -> None:
    storage = storage_on(s3_bucket, **SMALL_PARTS)
    with pytest.raises(StorageError, match="changed while it was uploaded"):
        storage.write_from("resized", ResizedOnSecondPass(os.urandom(BIG), size))
    assert not storage.exists("resized")
    assert no_pending_uploads(s3_env, s3_bucket)


def test_list_pages_through_every_key_in_order(s3_bucket: str) -> None:
    storage = storage_on(s3_bucket, list_page_size=2)
    paths = [f"op/chk-{i}/f" for i in range(7)]
    for path in reversed(paths):
        storage.write_bytes(path, b"x")
    storage_on(s3_bucket, prefix="other").write_bytes("op/chk-0/f", b"y")
    requests: list[str] = []
    storage._client.meta.events.register(  # count the ListObjectsV2 calls actually made
        "before-call.s3.ListObjectsV2", lambda **_: requests.append("list"))
    assert list(storage.list("op/")) == sorted(paths)
    assert len(requests) == 4  # 7 keys, 2 per page
    assert list(storage_on(s3_bucket, prefix="other").list()) == ["op/chk-0/f"]


def test_tampered_object_fails_verification(s3_bucket: str, s3_env: str) -> None:
    storage = storage_on(s3_bucket)
    ref = storage.write_bytes("chk-1/state", b"good state")
    raw_client(s3_env).put_object(Bucket=s3_bucket, Key="root/chk-1/state", Body=b"evil state")
    with pytest.raises(CorruptStateFile, match="chk-1/state"):
        storage.read_verified(ref)


def test_missing_bucket_is_a_storage_error_not_a_missing_file(s3_env: str) -> None:
    storage = storage_on("tm-no-such-bucket")
    with pytest.raises(StorageError, match="NoSuchBucket"):
        storage.write_bytes("x", b"1")
    with pytest.raises(StorageError, match="NoSuchBucket"):
        storage.read_bytes("x")
    with pytest.raises(StorageError, match="NoSuchBucket"):
        list(storage.list())


def test_unreachable_store_fails_after_bounded_retries(s3_env: str) -> None:
    options = replace(S3Options.from_env(), endpoint_url=f"http://127.0.0.1:{free_port()}",
                      max_attempts=2, connect_timeout_s=0.5, read_timeout_s=0.5)
    storage = S3CheckpointStorage("bucket", "root", options)
    started = time.monotonic()
    with pytest.raises(StorageError, match="write 'x' in s3://bucket/root failed: Could not connect"):
        storage.write_bytes("x", b"1")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("url", ["s3://", "s3:///x", "file:///x", "s3://b/../x", "s3://b/a//c",
                                 "s3://b/p?x=1", "s3://user@b/p", "s3://b:9000/p"])
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_s3_url(url)


def test_url_and_env_parsing() -> None:
    assert parse_s3_url("s3://b") == ("b", "")
    assert parse_s3_url("s3://b/") == ("b", "")
    assert parse_s3_url("s3://b/a/b/") == ("b", "a/b/")
    env = {"TIDEMARK_S3__ENDPOINT_URL": "http://minio:9000", "AWS_REGION": "eu-west-1"}
    assert S3Options.from_env(env) == S3Options("http://minio:9000", "eu-west-1", "path")
    assert S3Options.from_env({"AWS_DEFAULT_REGION": "us-west-2"}).addressing_style == "auto"
    assert S3Options.from_env({"AWS_DEFAULT_REGION": "us-west-2"}).region == "us-west-2"
    with pytest.raises(ValueError):
        S3Options(part_size=MIN_PART_SIZE - 1)
    with pytest.raises(ValueError):
        S3Options(list_page_size=0)
