"""Tidemark's PySpark edges: the ``tidemark-kafka`` source and sink and the session factory."""

from tidemark.spark.datasource import FORMAT, TidemarkKafkaDataSource, register

__all__ = ["FORMAT", "TidemarkKafkaDataSource", "register"]
