"""The Spark SQL type of an Avro schema, for state whose serializer records one.

:func:`spark_type` maps records to structs, arrays, maps (string keys), enums to strings, fixed
and bytes to binary, a union of ``null`` and one type to that type (nullable), and the logical
types ``date``, ``timestamp-millis``/``-micros``, ``decimal`` and ``uuid``; it returns ``None``
for anything else (another union, ``time-*``), and the caller falls back to JSON text. A value
the Avro serializer decodes (records as dicts) is then a value of that Spark type as it is.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "bytes": BinaryType(), "string": StringType(), "enum": StringType(),
    "fixed": BinaryType(),
}


def spark_type(schema: str | dict[str, Any] | list[Any]) -> DataType | None:
    """The Spark type of values of the Avro ``schema`` (JSON text, a primitive's name, or parsed),
    or ``None``."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            pass  # a primitive's name, as Avro accepts it
    return _type(schema, {})


def _type(schema: Any, named: dict[str, DataType | None]) -> DataType | None:
    if isinstance(schema, str):
        return _PRIMITIVES.get(schema, named.get(schema))
    if isinstance(schema, list):
        others = [s for s in schema if s != "null"]
        return _type(others[0], named) if len(others) == 1 else None
    logical = schema.get("logicalType")
    if logical == "date":
        return DateType()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if logical == "decimal":
        return DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical == "uuid":
        return StringType()
    if logical is not None and logical.startswith("time-"):
        return None
    kind = schema.get("type")
    if kind == "record":
        fields = []
        for field in schema["fields"]:
            field_type = _type(field["type"], named)
            if field_type is None:
                return None
            fields.append(StructField(field["name"], field_type, nullable=True))
        struct = StructType(fields)
        named[schema["name"]] = named[schema["name"].rsplit(".", 1)[-1]] = struct
        return struct
    if kind == "array":
        items = _type(schema["items"], named)
        return None if items is None else ArrayType(items, containsNull=True)
    if kind == "map":
        values = _type(schema["values"], named)
        return None if values is None else MapType(StringType(), values, valueContainsNull=True)
    if kind in ("enum", "fixed"):
        named[schema["name"]] = _PRIMITIVES[kind]
        return _PRIMITIVES[kind]
    return _type(kind, named) if kind is not None else None
