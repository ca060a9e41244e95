"""The ``tidemark-kafka`` Python data source: one name for the Kafka source and sink.

Lifecycle: :func:`register` once per SparkSession; Spark then instantiates
:class:`TidemarkKafkaDataSource` with the options of each ``readStream``/``read``/``writeStream``
and asks it for a reader or writer. Options are validated when the reader or writer is created;
problems raise :class:`~tidemark.spark.options.InvalidOptionError` naming the option.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

from tidemark.spark.arrow import SOURCE_SCHEMA
from tidemark.spark.kafka_sink import KafkaStreamWriter
from tidemark.spark.kafka_source import KafkaBatchReader, KafkaStreamReader
from tidemark.spark.options import KafkaSinkOptions, KafkaSourceOptions

FORMAT = "tidemark-kafka"


class TidemarkKafkaDataSource(DataSource):
    """Kafka records as rows (see :data:`tidemark.spark.arrow.SOURCE_SCHEMA`), and rows to Kafka."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(KafkaSourceOptions.parse(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.parse(self.options, streaming=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(KafkaSinkOptions.parse(self.options), schema)


def register(spark: SparkSession) -> None:
    """Make ``format("tidemark-kafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(TidemarkKafkaDataSource)
