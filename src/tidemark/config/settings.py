"""Settings shared by every Tidemark process.

Sources, highest precedence first: environment variables (``TIDEMARK_`` prefix, ``__`` between
nested keys, e.g. ``TIDEMARK_KAFKA__SECURITY_PROTOCOL``; the bootstrap address is the plain
``KAFKA_BOOTSTRAP_SERVERS``), then the YAML file named by ``TIDEMARK_CONFIG_FILE`` (read by
pydantic-settings' ``YamlConfigSettingsSource``; unset: no file), then defaults.
Unknown keys in the file are errors, and so is a ``TIDEMARK_*`` variable that names no setting
(:mod:`tidemark.config.environment`). :func:`load_settings` turns every validation failure into a
:class:`ConfigurationError` that names the key and the reason; the value given is quoted unless the
field is a secret (declared with ``repr=False``: the API token, the SASL password).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from tidemark.config.environment import unknown_variables

CONFIG_FILE_ENV = "TIDEMARK_CONFIG_FILE"
DEFAULT_HOME = Path(os.environ.get("TIDEMARK_HOME", ".tidemark"))


class ConfigurationError(Exception):
    """Invalid or missing configuration; ``problems`` lists (key, reason) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = "; ".join(f"{key}: {reason}" for key, reason in problems)
        super().__init__(f"invalid configuration: {lines}")


class KafkaSettings(BaseModel):
    """How to reach Kafka; turned into librdkafka and aiokafka settings by tidemark.kafka."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: str | None = Field(None, repr=False)
    ssl_ca_location: str | None = None
    replication_factor: int = Field(1, ge=1, le=16)

    @field_validator("sasl_password")
    @classmethod
    def _password_needs_user(cls, value: str | None, info: Any) -> str | None:
        if value and not info.data.get("sasl_username"):
            raise ValueError("sasl_password given without sasl_username")
        return value


# Where a stage worker's Spark session runs its tasks: local mode (in the worker's own JVM) or a
# Spark standalone cluster (one master, or several for ZooKeeper recovery).
_LOCAL_MASTER = re.compile(r"local\[([1-9][0-9]*|\*)\]")
_STANDALONE_MASTER = re.compile(r"spark://[A-Za-z0-9.-]+:[0-9]{1,5}(,[A-Za-z0-9.-]+:[0-9]{1,5})*")


def is_local_master(master: str) -> bool:
    """True for ``local[N]`` and ``local[*]``: Spark's tasks run in the driver's JVM."""
    return _LOCAL_MASTER.fullmatch(master) is not None


class SparkSettings(BaseModel):
    """How a stage worker's Spark session is started, and where its tasks run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    master: str = Field(
        "local[2]",
        description="where each stage worker's Spark session runs its tasks (the Kafka reads): 'local[N]' or "
                    "'local[*]', in the worker's own JVM with N threads; 'spark://host:port' (or "
                    "'spark://h1:p1,h2:p2' with standby masters), on the executors of a Spark standalone cluster, "
                    "which then must reach the worker at driver_host and import tidemark "
                    "(docs/concepts/what-runs-where.md); the stage's keyed processing stays in the worker",
    )
    driver_host: str = Field(
        "127.0.0.1", pattern=r"^[A-Za-z0-9.:-]{1,253}$",
        description="the address each stage worker's Spark driver binds and advertises (spark.driver.host and "
                    "spark.driver.bindAddress): the loopback suits local mode and a cluster on the same machine; "
                    "with executors on other machines, an address of the worker they reach (the chart sets the "
                    "pod's IP)",
    )
    java_options: str = Field(
        "",
        description="extra JVM options of each stage worker's Spark driver (spark.driver.extraJavaOptions; the "
                    "executors of a cluster take spark.executor.extraJavaOptions in conf); "
                    "empty: the JVM's defaults; the local pipeline (demo, tests) sets -XX:TieredStopAtLevel=1, "
                    "the C1 compiler only, which halves the CPU of a JVM that lives minutes",
    )
    class_archive: bool = Field(
        True,
        description="map the JVM class archive of Spark's classes when it has been built (python -m "
                    "tidemark.spark.class_archive; the image, the demo and the tests build it): the driver "
                    "starts about a third faster; false: the JVM loads every class from the jars",
    )
    trigger_ms: int = Field(
        200, ge=10, le=60_000,
        description="the micro-batch interval of each stage's query (Spark's processingTime trigger): a "
                    "batch costs Spark about 100 ms of CPU whatever its size, so a longer interval costs less "
                    "CPU on a steady trickle of input and adds up to its length to every stage's latency",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="extra Spark configuration of each stage worker's session, applied after Tidemark's own "
                    "(e.g. {\"spark.driver.memory\": \"4g\"}; as JSON in TIDEMARK_SPARK__CONF); every key starts "
                    "with 'spark.'; the local pipeline (demo, tests) turns whole-stage code generation off, whose "
                    "compilations cost a JVM that lives minutes more than they save; on a cluster master the "
                    "executors are sized here too (spark.executor.cores, spark.executor.memory, spark.cores.max, "
                    "spark.executorEnv.*)",
    )
    source: Literal["auto", "kafka", "tidemark-kafka"] = Field(
        "auto",
        description="how a stage's query reads Kafka: 'kafka' is Spark's own Kafka connector (fetched from Maven "
                    "Central), 'tidemark-kafka' Tidemark's Python data source; 'auto': the connector, except on "
                    "the Tansu engine (tidemark.spark.stage_source)",
    )

    @field_validator("master")
    @classmethod
    def _known_master(cls, value: str) -> str:
        if not (is_local_master(value) or _STANDALONE_MASTER.fullmatch(value)):
            raise ValueError("not a Spark master Tidemark runs on: 'local[N]', 'local[*]' or 'spark://host:port'")
        return value

    @field_validator("conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        other = sorted(key for key in value if not key.startswith("spark."))
        if other:
            raise ValueError(f"not Spark configuration keys (each starts with 'spark.'): {other}")
        return value


class RocksDBSettings(BaseModel):
    """The memory of a stage worker's RocksDB state (tidemark.state.rocksdb.options.RocksDBMemory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_bytes: int = Field(
        256 << 20, ge=16 << 20, le=1 << 40,
        description="one budget for every RocksDB database of a worker process's tasks (Flink's managed "
                    "memory): a shared block cache holding data, index and filter blocks, and the memtables "
                    "charged to it; RocksDB's memory stays within it whatever the number of tasks",
    )
    write_buffer_ratio: float = Field(
        0.5, gt=0, le=1, description="the share of memory_bytes the memtables (write buffers) may take")


class IdleWorkerSettings(BaseModel):
    """Warm worker processes a job's run leaves behind for the next job on the machine
    (tidemark.runtime.placement.idle_workers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path | None = Field(
        None,
        description="where idle warm workers register, shared by the jobs of one machine (or pod); unset: "
                    "a run's workers end with it. Set: at the end of a run its workers that ended their attempt "
                    "in place, and its warm standbys, wait there, their SparkSession started, for a later job "
                    "whose workers would start the same session; that job starts in seconds, without a JVM start",
    )
    keep_s: float = Field(60.0, ge=1, le=3600, description="how long an idle worker waits to be taken before it exits")
    max: int = Field(4, ge=1, le=64, description="idle workers kept at most per kind of session; more end")


class _ConfigFileSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, failing with a :class:`ConfigurationError` that names the
    file when it cannot be read, is not YAML or does not hold a mapping."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except OSError as exc:
            raise ConfigurationError([(CONFIG_FILE_ENV, f"cannot read {file_path}: {exc.strerror}")]) from None
        except yaml.YAMLError as exc:
            reason = " ".join(str(exc).split())  # one line: PyYAML's message spans several
            raise ConfigurationError([(CONFIG_FILE_ENV, f"{file_path} is not valid YAML: {reason}")]) from None
        if not isinstance(data, dict):
            raise ConfigurationError([(CONFIG_FILE_ENV, f"{file_path} must hold a mapping")])
        return data


def _config_file_sources(settings_cls: type[BaseSettings]) -> tuple[PydanticBaseSettingsSource, ...]:
    """The YAML file named by TIDEMARK_CONFIG_FILE (unset or empty: no file); a named file must exist."""
    path = os.environ.get(CONFIG_FILE_ENV)
    if not path:
        return ()
    if not Path(path).is_file():
        reason = "is a directory" if Path(path).is_dir() else "no such file"
        raise ConfigurationError([(CONFIG_FILE_ENV, f"cannot read {path}: {reason}")])
    return (_ConfigFileSource(settings_cls, yaml_file=Path(path)),)


class TidemarkSettings(BaseSettings):
    """Settings every service and worker reads; services subclass it with their own keys."""

    model_config = SettingsConfigDict(
        env_prefix="TIDEMARK_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    bootstrap_servers: str | None = Field(
        None,
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "bootstrap_servers"),
        description="Kafka bootstrap address; unset: the embedded broker under home",
    )
    kafka: KafkaSettings = KafkaSettings()
    spark: SparkSettings = SparkSettings()
    broker_engine: Literal["kafka", "tansu"] = Field(
        "kafka", description="embedded broker engine when KAFKA_BOOTSTRAP_SERVERS is unset (tidemark.broker.engine)"
    )
    schema_registry_url: str | None = None
    topic_prefix: str = Field("tidemark", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    home: Path = DEFAULT_HOME
    state_dir: Path | None = None
    checkpoint_storage_url: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = Field(0, ge=0, le=65535)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    shutdown_timeout_s: float = Field(15.0, gt=0, le=600)
    restore_fallback: bool = Field(
        False,
        description="On failover, when the newest checkpoint is corrupted, restore an older one if the "
                    "two-phase-commit markers show that keeps the output exactly once (else the job stops)",
    )
    dead_letter_max_bytes: int = Field(
        1_000_000, ge=10_000, le=100_000_000,
        description="Largest dead letter a stage publishes (key, value and framing); bigger ones are cut "
                    "(keep it at or below the broker's and the dead-letter topic's max.message.bytes)",
    )
    adoption_window_s: float = Field(
        30.0, ge=0, le=600,
        description="How long a job's worker processes whose supervisor died run on, waiting for a "
                    "restarted supervisor to adopt them, before they end their attempt and exit "
                    "(tidemark.runtime.supervisor.adoption)",
    )
    idle_workers: IdleWorkerSettings = IdleWorkerSettings()
    rocksdb: RocksDBSettings = RocksDBSettings()
    api_token: str | None = Field(None, repr=False)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, *_config_file_sources(settings_cls))

    @field_validator("checkpoint_storage_url")
    @classmethod
    def _storage_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("file://", "s3://")):
            raise ValueError("must start with file:// or s3://")
        return value

    @property
    def resolved_state_dir(self) -> Path:
        return self.state_dir or self.home / "state"

    @property
    def resolved_storage_url(self) -> str:
        return self.checkpoint_storage_url or (self.home / "checkpoints").resolve().as_uri()


S = TypeVar("S", bound=TidemarkSettings)


def _key_name(settings_cls: type[BaseSettings], loc: tuple[Any, ...]) -> str:
    if not loc:
        return "<settings>"
    if loc[0] == "bootstrap_servers" or loc[0] == "KAFKA_BOOTSTRAP_SERVERS":
        return "KAFKA_BOOTSTRAP_SERVERS"
    return "TIDEMARK_" + "__".join(str(part).upper() for part in loc)


def _is_secret(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """True when the field at ``loc`` is declared ``repr=False`` (its value must not be shown)."""
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return False
        if not field.repr:
            return True
        if not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return False
        model = field.annotation
    return False


def load_settings(settings_cls: type[S], **overrides: Any) -> S:
    """Build ``settings_cls`` from the environment and file, or raise ConfigurationError (unknown
    ``TIDEMARK_*`` variables first, then every invalid or missing value)."""
    unknown = unknown_variables(settings_cls, os.environ)
    if unknown:
        raise ConfigurationError(unknown)
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(error.get("loc", ()))
            key = _key_name(settings_cls, loc)
            given = error.get("input")
            shown = not isinstance(given, dict) and not _is_secret(settings_cls, loc)
            reason = error["msg"] + (f" (got {given!r})" if shown else "")
            problems.append((key, reason))
        raise ConfigurationError(problems) from None
