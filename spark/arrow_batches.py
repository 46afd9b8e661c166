"""Column lists from :mod:`formats.columns` to Arrow record batches of the ``commitlog`` schema.

Properties become a map column built from flat name and value arrays and per-record offsets:
converting a Python dict per row is slower than decoding the record."""

from __future__ import annotations

import itertools

import pyarrow as pa

from formats.columns import Columns
from spark.schema import Fields, arrow_schema


def commitlog_batch(store: str, cols: Columns, fields: Fields) -> pa.RecordBatch:
    """A batch of ``fields`` (all of the ``commitlog`` schema, or the subset a reader asked for)."""
    count = len(cols["topic"])
    arrays = []
    for name, kind, _ in fields:
        if name == "store":
            arrays.append(pa.array([store] * count, kind))
        elif name == "properties":
            offsets = pa.array(list(itertools.accumulate(cols["prop_counts"], initial=0)), pa.int32())
            arrays.append(pa.MapArray.from_arrays(
                offsets, pa.array(cols["prop_names"], pa.string()), pa.array(cols["prop_values"], pa.string())))
        else:
            arrays.append(pa.array(cols[name], kind))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(fields))
