"""Column lists from :mod:`formats.columns` to Arrow record batches of the ``commitlog`` schema.

Properties become a map column built from flat name and value arrays and per-record offsets:
converting a Python dict per row is slower than decoding the record."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pyarrow as pa

from formats.columns import Columns
from formats.record_vectors import decode_run
from formats.segments import Buffer
from spark.schema import Fields, arrow_schema


def store_column(store: str, rows: int, kind: pa.DataType) -> pa.Array:
    """The ``store`` column: the same label on every row."""
    return pa.array([store] * rows, kind)


def commitlog_batch(store: str, cols: Columns, fields: Fields) -> pa.RecordBatch:
    """A batch of ``fields`` (all of the ``commitlog`` schema, or the subset a reader asked for)."""
    count = len(cols["topic"])
    arrays = []
    for name, kind, _ in fields:
        if name == "store":
            arrays.append(store_column(store, count, kind))
        elif name == "properties":
            offsets = pa.array(list(itertools.accumulate(cols["prop_counts"], initial=0)), pa.int32())
            arrays.append(pa.MapArray.from_arrays(
                offsets, pa.array(cols["prop_names"], pa.string()), pa.array(cols["prop_values"], pa.string())))
        else:
            arrays.append(pa.array(cols[name], kind))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(fields))


@dataclass(frozen=True, slots=True)
class RunBatches:
    """The run decoder :func:`formats.columns.scan_columns` takes: runs of well-formed records
    decoded as vectors (:mod:`formats.record_vectors`) into batches of ``fields``."""

    store: str
    fields: Fields
    batch_rows: int = 16384

    def __call__(self, buf: Buffer, pos: int, stop: int, base: int) -> tuple[pa.RecordBatch | None, int]:
        with_body = any(name == "body" for name, _, _ in self.fields)
        run, end = decode_run(buf, pos, stop, base, with_body=with_body, max_rows=self.batch_rows)
        if run is None:
            return None, end
        arrays = [store_column(self.store, run.rows, kind) if name == "store" else run.column(name, kind)
                  for name, kind, _ in self.fields]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.fields)), end
