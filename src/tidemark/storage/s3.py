"""Checkpoint storage on Amazon S3 or any S3-compatible store (``s3://bucket/prefix``).

Registered as the ``s3`` scheme of :func:`tidemark.storage.open_storage`; boto3 (extra ``s3``)
is imported only when such a URL is opened. Settings come from :meth:`S3Options.from_env`
(``TIDEMARK_S3__ENDPOINT_URL``, ``AWS_REGION``); credentials from the standard AWS chain.

Contract, the same as the filesystem storage's:

- every path is relative to the URL's prefix and validated (non-empty, relative POSIX path, no
  empty, ``.`` or ``..`` part, no NUL or backslash, key at most 1024 bytes), else
  ``InvalidStoragePath``;
- writes are atomic: ``write_bytes`` and small ``write_from`` streams are one PutObject; larger
  streams are one multipart upload by boto3's transfer manager (``upload_fileobj``, up to
  ``upload_concurrency`` parts in flight), whose completion is the single visible step and which
  the transfer manager aborts on any failure, so no partial object and no orphaned parts remain;
- the SHA-256 of the content is returned in the ``StateFile`` and stored as the object's user
  metadata ``sha256``; ``write_from`` hashes the stream before creating the upload (re-reading a
  seekable source, spooling any other to a local temporary file) and hashes it again while
  uploading: a source that changed in between aborts the upload;
- ``read_bytes`` raises ``FileNotFoundError`` for a missing object; ``read_verified`` raises
  ``CorruptStateFile`` naming the file on a size or checksum mismatch;
- ``check_target`` refuses a directory when an object is named like it or a directory above it;
- ``delete`` is idempotent; ``list`` pages through ListObjectsV2 lazily, in key order;
- any other store failure, after botocore's bounded retries, is a ``StorageError``.

One instance shares one botocore client, which is thread-safe; methods may run concurrently.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from tidemark.protocol.messages import StateFile
from tidemark.storage.base import InvalidStoragePath, StorageError, copy_verified, taken_by_file, verified

try:
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("s3:// checkpoint storage needs boto3: install tidemark[s3]") from exc

SHA256_METADATA_KEY = "sha256"
ENDPOINT_URL_ENV = "TIDEMARK_S3__ENDPOINT_URL"
ADDRESSING_STYLE_ENV = "TIDEMARK_S3__ADDRESSING_STYLE"
MIN_PART_SIZE = 5 << 20  # S3's lower bound for every part but the last
MAX_PARTS = 10_000
MAX_KEY_BYTES = 1024
_MIB = 1 << 20
_READ_CHUNK = _MIB  # what a streamed read holds at a time
_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class S3Options:
    """How to reach the store and how to move data; immutable, shared by every call."""

    endpoint_url: str | None = None  # MinIO, Ceph RGW, ...; None: AWS
    region: str | None = None
    addressing_style: str = "auto"  # "path" for most S3-compatible stores
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 5  # botocore "standard" retries: capped exponential backoff, jitter
    max_pool_connections: int = 16
    multipart_threshold: int = 16 * _MIB
    part_size: int = 16 * _MIB
    upload_concurrency: int = 4  # parts of one multipart upload in flight (and held in memory)
    list_page_size: int = 1000

    def __post_init__(self) -> None:
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise ValueError(f"unknown addressing_style {self.addressing_style!r}")
        if self.part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size {self.part_size} is below S3's minimum of {MIN_PART_SIZE}")
        if min(self.multipart_threshold, self.max_attempts, self.max_pool_connections, self.upload_concurrency) < 1:
            raise ValueError("multipart_threshold, max_attempts, max_pool_connections and upload_concurrency "
                             "must be >= 1")
        if not 1 <= self.list_page_size <= 1000:
            raise ValueError(f"list_page_size must be within 1..1000: {self.list_page_size}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> S3Options:
        """Options from ``TIDEMARK_S3__ENDPOINT_URL``, ``TIDEMARK_S3__ADDRESSING_STYLE`` and
        ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``); a custom endpoint defaults to path style."""
        env = os.environ if environ is None else environ
        endpoint = env.get(ENDPOINT_URL_ENV) or None
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        style = env.get(ADDRESSING_STYLE_ENV) or ("path" if endpoint else "auto")
        return cls(endpoint_url=endpoint, region=region, addressing_style=style)

    def client_config(self) -> Config:
        return Config(
            region_name=self.region,
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            max_pool_connections=self.max_pool_connections,
            s3={"addressing_style": self.addressing_style},
        )

    def transfer_config(self, part_size: int) -> TransferConfig:
        """The transfer manager's settings for one upload in parts of ``part_size`` bytes."""
        config = TransferConfig(
            multipart_threshold=self.multipart_threshold, multipart_chunksize=part_size,
            max_concurrency=self.upload_concurrency, preferred_transfer_client="classic",
        )
        config.max_in_memory_upload_chunks = self.upload_concurrency  # s3transfer's bound on parts read ahead
        return config


def validate_path(path: str) -> str:
    """``path`` itself if it is a valid relative storage path, else ``InvalidStoragePath``."""
    if not isinstance(path, str) or not path or "\x00" in path or "\\" in path:
        raise InvalidStoragePath(f"malformed storage path: {path!r}")
    if path.startswith("/"):
        raise InvalidStoragePath(f"absolute storage path refused: {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise InvalidStoragePath(f"storage path with empty, '.' or '..' part: {path!r}")
    return path


def parse_s3_url(url: str) -> tuple[str, str]:
    """``(bucket, key prefix)`` of ``s3://bucket[/prefix]``; the prefix is "" or ends in "/"."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or parsed.query or parsed.fragment or parsed.params:
        raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
    if not _BUCKET.fullmatch(parsed.netloc):
        raise ValueError(f"s3:// URL needs a plain bucket name: {url!r}")
    root = unquote(parsed.path).strip("/")
    if root:
        try:
            validate_path(root)
        except InvalidStoragePath as exc:
            raise ValueError(f"invalid prefix in {url!r}: {exc}") from None
    return parsed.netloc, f"{root}/" if root else ""


def _read_full(source: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at the end of ``source``."""
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = source.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class _VerifiedStream:
    """``source`` as the transfer manager reads it: once, unseekable (so each part is read into
    memory exactly once, in order), every read but the last as long as asked. Reaching the end
    raises ``StorageError`` unless the bytes read hash to ``expected`` (digest, size), so an upload
    of a source that changed since it was hashed fails before it is completed."""

    def __init__(self, path: str, source: BinaryIO, expected: tuple[str, int]) -> None:
        self._path = path
        self._source = source
        self._expected = expected
        self._digest = hashlib.sha256()
        self._size = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int | None = -1) -> bytes:
        wanted = self._expected[1] + 1 - self._size if size is None or size < 0 else size
        chunk = _read_full(self._source, wanted)
        self._digest.update(chunk)
        self._size += len(chunk)
        if len(chunk) < wanted or self._size > self._expected[1]:  # the end, or more than was hashed
            self._verify()
        return chunk

    def _verify(self) -> None:
        digest = self._digest.hexdigest()
        if (digest, self._size) != self._expected:
            raise StorageError(
                f"{self._path}: the source changed while it was uploaded "
                f"({self._size} bytes, sha256 {digest}; expected {self._expected[1]}, {self._expected[0]})"
            )


def _position(source: BinaryIO) -> int | None:
    """Where a seekable ``source`` stands now; None when it cannot be rewound."""
    try:
        return source.tell() if source.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


class S3CheckpointStorage:
    """A ``CheckpointStorage`` under one bucket and key prefix (see the module contract)."""

    def __init__(self, bucket: str, prefix: str = "", options: S3Options | None = None) -> None:
        root = prefix.strip("/")
        self.bucket = bucket
        self.prefix = f"{validate_path(root)}/" if root else ""
        self.options = options if options is not None else S3Options.from_env()
        self.url = f"s3://{bucket}/{root}" if root else f"s3://{bucket}"
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=self.options.endpoint_url, config=self.options.client_config()
        )

    @classmethod
    def from_url(cls, url: str, options: S3Options | None = None) -> S3CheckpointStorage:
        bucket, prefix = parse_s3_url(url)
        return cls(bucket, prefix, options)

    def _key(self, path: str) -> str:
        key = self.prefix + validate_path(path)
        if len(key.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidStoragePath(f"storage path too long for an S3 key: {path!r}")
        return key

    @contextmanager
    def _store_errors(self, action: str, path: str) -> Iterator[None]:
        """Translate botocore failures: a missing object -> FileNotFoundError, else StorageError."""
        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in _MISSING:
                raise FileNotFoundError(f"{path}: no such file in {self.url}") from exc
            raise StorageError(
                f"{action} {path!r} in {self.url} failed: {code} {error.get('Message', '')}".rstrip()
            ) from exc
        except BotoCoreError as exc:
            raise StorageError(f"{action} {path!r} in {self.url} failed: {exc}") from exc

    # ---------------------------------------------------------------- writes

    def write_bytes(self, path: str, data: bytes, *, shared: bool = False) -> StateFile:
        key = self._key(path)
        digest = hashlib.sha256(data).hexdigest()
        self._put(path, key, data, digest)
        return StateFile(path=path, size_bytes=len(data), sha256=digest, shared=shared)

    def write_from(self, path: str, source: BinaryIO, *, shared: bool = False) -> StateFile:
        key = self._key(path)
        start = _position(source)
        head = _read_full(source, self.options.multipart_threshold)
        if len(head) < self.options.multipart_threshold:
            return self.write_bytes(path, head, shared=shared)
        if start is not None:
            digest, size = self._hash_rest(head, source)
            del head
            source.seek(start)
            self._multipart_put(path, key, source, digest, size)
        else:
            with tempfile.TemporaryFile(prefix="tidemark-s3-") as spool:
                digest, size = self._hash_rest(head, source, copy_to=spool)
                del head
                spool.seek(0)
                self._multipart_put(path, key, spool, digest, size)  # type: ignore[arg-type]
        return StateFile(path=path, size_bytes=size, sha256=digest, shared=shared)

    def _hash_rest(
        self, head: bytes, source: BinaryIO, copy_to: BinaryIO | None = None
    ) -> tuple[str, int]:
        """SHA-256 and size of ``head`` followed by the rest of ``source`` (copied if asked)."""
        digest = hashlib.sha256()
        size = 0
        chunk = head
        while chunk:
            digest.update(chunk)
            size += len(chunk)
            if copy_to is not None:
                copy_to.write(chunk)
            chunk = source.read(_MIB)
        return digest.hexdigest(), size

    def _put(self, path: str, key: str, data: bytes, digest: str) -> None:
        with self._store_errors("write", path):
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType=_CONTENT_TYPE,
                Metadata={SHA256_METADATA_KEY: digest},
            )

    def _multipart_put(self, path: str, key: str, stream: BinaryIO, digest: str, size: int) -> None:
        """Upload ``size`` bytes hashing to ``digest`` as one multipart upload (boto3's transfer
        manager, which aborts it on any failure)."""
        part_size = max(self.options.part_size, -(-size // MAX_PARTS))
        with self._store_errors("write", path):
            self._client.upload_fileobj(
                _VerifiedStream(path, stream, (digest, size)), self.bucket, key,
                ExtraArgs={"ContentType": _CONTENT_TYPE, "Metadata": {SHA256_METADATA_KEY: digest}},
                Config=self.options.transfer_config(part_size),
            )

    # ---------------------------------------------------------------- reads

    def read_bytes(self, path: str) -> bytes:
        key = self._key(path)
        with self._store_errors("read", path):
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            return bytes(response["Body"].read())

    def read_verified(self, ref: StateFile) -> bytes:
        return verified(ref, self.read_bytes(ref.path))

    def read_verified_into(self, ref: StateFile, out: BinaryIO) -> None:
        key = self._key(ref.path)
        with self._store_errors("read", ref.path):
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            copy_verified(ref, body.iter_chunks(_READ_CHUNK), out)

    def located(self, path: str) -> str:
        return path

    def exists(self, path: str) -> bool:
        key = self._key(path)
        try:
            with self._store_errors("check", path):
                self._client.head_object(Bucket=self.bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def check_target(self, directory: str) -> None:
        """No object may be named ``directory`` or one of its parent directories (a key the
        filesystem storage could not hold beside files under it); S3 has no symlinks."""
        parts = validate_path(directory).split("/")
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth])
            if self.exists(name):
                raise taken_by_file(directory, name)

    def delete(self, path: str) -> None:
        key = self._key(path)
        try:
            with self._store_errors("delete", path):
                self._client.delete_object(Bucket=self.bucket, Key=key)
        except FileNotFoundError:  # stores that answer 404 instead of S3's 204
            return

    def list(self, prefix: str = "") -> Iterator[str]:
        """Every file whose relative path starts with ``prefix``, in key order, paged lazily."""
        if prefix.startswith("/") or ".." in prefix.split("/") or "\x00" in prefix:
            raise InvalidStoragePath(f"invalid listing prefix: {prefix!r}")
        return self._list_keys(self.prefix + prefix)

    def _list_keys(self, key_prefix: str) -> Iterator[str]:
        paginator = self._client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.bucket, Prefix=key_prefix,
            PaginationConfig={"PageSize": self.options.list_page_size},
        )
        with self._store_errors("list", key_prefix[len(self.prefix):] or "(root)"):
            for page in pages:
                for item in page.get("Contents", ()):
                    yield item["Key"][len(self.prefix):]
