"""What every ``spark/jobs/<report>.py`` runs under spark-submit: the session spark-submit made
(its ``--master``), our data sources registered, one report over the stores named, shown or
written as Parquet by Spark's own writer (so a cluster job writes where its executors can)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spark.analysis import StoreRef, build_reports


def main(report: str) -> None:
    parser = argparse.ArgumentParser(prog=f"spark/jobs/{report}.py", description=f"The {report} report.")
    parser.add_argument("stores", nargs="+", type=Path, help="node directories, CommitLog directories or segments")
    parser.add_argument("--out", help="write the report as Parquet under this directory (any Hadoop path)")
    parser.add_argument("--rows", type=int, default=50, help="rows to show when not writing")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    from spark.sources import SOURCES

    spark = SparkSession.builder.appName(f"mqctl {report}").getOrCreate()
    for source in SOURCES:
        spark.dataSource.register(source)
    stores = [StoreRef.of(p) for p in args.stores]
    for table in build_reports(spark, stores, [report]):
        if args.out:
            table.frame.coalesce(1).write.mode("overwrite").parquet(f"{args.out}/{table.stem}")
        else:
            print(f"== {table.title}")
            table.frame.show(args.rows, truncate=False)
    spark.stop()
