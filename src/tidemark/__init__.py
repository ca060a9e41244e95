"""Tidemark: Flink-grade state management and fault tolerance for PySpark jobs on Kafka."""

from importlib.metadata import PackageNotFoundError, version as _installed_version

try:
    __version__ = _installed_version("tidemark")
    """The installed distribution's version: ``pyproject.toml``'s ``version``, its one source."""
except PackageNotFoundError:  # the sources on a path without the distribution installed
    __version__ = "0+unknown"
