"""Tidemark: Flink-grade state management and fault tolerance for PySpark jobs on Kafka."""

__version__ = "0.1.0"
