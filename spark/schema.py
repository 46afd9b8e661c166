"""The columns the ``commitlog`` and ``consumequeue`` data sources give, as Spark DDL and as the
Arrow schema their record batches are built with (the two must agree field by field)."""

from __future__ import annotations

import functools

import pyarrow as pa

Fields = tuple[tuple[str, pa.DataType, str], ...]  # (name, Arrow type, Spark SQL type)

COMMITLOG_FIELDS: Fields = (
    ("store", pa.string(), "STRING"),  # which store the row came from (the path or label given)
    ("topic", pa.string(), "STRING"),
    ("queue_id", pa.int32(), "INT"),
    ("queue_offset", pa.int64(), "BIGINT"),
    ("phys_offset", pa.int64(), "BIGINT"),
    ("size", pa.int32(), "INT"),
    ("body_size", pa.int32(), "INT"),
    ("body_crc", pa.int32(), "INT"),
    ("body_crc_ok", pa.bool_(), "BOOLEAN"),
    ("flag", pa.int32(), "INT"),
    ("sysflag", pa.int32(), "INT"),
    ("compressed", pa.bool_(), "BOOLEAN"),
    ("born_ts", pa.int64(), "BIGINT"),  # epoch milliseconds, as stored
    ("store_ts", pa.int64(), "BIGINT"),
    ("born_host", pa.string(), "STRING"),
    ("store_host", pa.string(), "STRING"),
    ("reconsume_times", pa.int32(), "INT"),
    ("tags", pa.string(), "STRING"),
    ("keys", pa.list_(pa.string()), "ARRAY<STRING>"),
    ("uniq_key", pa.string(), "STRING"),
    ("raft_index", pa.int64(), "BIGINT"),  # DLedger-wrapped logs only
    ("raft_term", pa.int64(), "BIGINT"),
    ("properties", pa.map_(pa.string(), pa.string()), "MAP<STRING, STRING>"),
)
BODY_FIELD = ("body", pa.binary(), "BINARY")

CONSUMEQUEUE_FIELDS: Fields = (
    ("store", pa.string(), "STRING"),
    ("topic", pa.string(), "STRING"),
    ("queue_id", pa.int32(), "INT"),
    ("queue_offset", pa.int64(), "BIGINT"),  # the entry's logical offset in its queue
    ("phys_offset", pa.int64(), "BIGINT"),
    ("size", pa.int32(), "INT"),
    ("tags_code", pa.int64(), "BIGINT"),
)


def commitlog_fields(with_body: bool) -> Fields:
    return COMMITLOG_FIELDS + ((BODY_FIELD,) if with_body else ())


def chosen_fields(names: list[str]) -> Fields:
    """The fields a reader was asked for by a user schema (``.schema("topic STRING, size INT")``),
    in its order: only those are built and shipped to the JVM."""
    known = {f[0]: f for f in (*COMMITLOG_FIELDS, BODY_FIELD)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"commitlog has no column {', '.join(unknown)}; it has {', '.join(known)}")
    return tuple(known[n] for n in names)


def ddl(fields: Fields) -> str:
    return ", ".join(f"{name} {sql}" for name, _, sql in fields)


@functools.lru_cache(maxsize=16)
def arrow_schema(fields: Fields) -> pa.Schema:
    return pa.schema([pa.field(name, kind) for name, kind, _ in fields])
