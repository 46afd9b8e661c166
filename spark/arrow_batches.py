"""Column lists from :mod:`formats.columns` to Arrow record batches of the ``commitlog`` schema.

Properties become a map column built from flat name and value arrays and per-record offsets:
converting a Python dict per row is slower than decoding the record."""

from __future__ import annotations

import itertools

import pyarrow as pa

from formats.columns import Columns
from spark.schema import arrow_schema, commitlog_fields


def commitlog_batch(store: str, cols: Columns, with_body: bool) -> pa.RecordBatch:
    fields = commitlog_fields(with_body)
    schema = arrow_schema(fields)
    count = len(cols["topic"])
    offsets = pa.array(list(itertools.accumulate(cols["prop_counts"], initial=0)), pa.int32())
    properties = pa.MapArray.from_arrays(
        offsets, pa.array(cols["prop_names"], pa.string()), pa.array(cols["prop_values"], pa.string()))
    arrays = []
    for name, kind, _ in fields:
        if name == "store":
            arrays.append(pa.array([store] * count, kind))
        elif name == "properties":
            arrays.append(properties)
        else:
            arrays.append(pa.array(cols[name], kind))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
