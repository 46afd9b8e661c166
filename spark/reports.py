"""The inspection reports: each a function from DataFrames of the ``commitlog`` (and ``consumequeue``)
sources to a small DataFrame an operator reads as a table.

Times are the stored epoch milliseconds. Percentiles are exact (Spark's ``percentile``: linear
interpolation between the closest ranks), so they can be checked against a plain computation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
LATENCY_PERCENTILES = (0.5, 0.9, 0.99, 0.999)
# what must match for two replicas to hold the same record at an offset
SIGNATURE = ("size", "topic", "queue_id", "queue_offset", "body_crc", "sysflag", "born_ts", "store_ts",
             "born_host", "uniq_key")


def topic_volume(records: DataFrame) -> DataFrame:
    """Messages and bytes per topic."""
    return (records.groupBy("topic")
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 F.countDistinct("queue_id").alias("queues"))
            .orderBy(F.desc("bytes"), "topic"))


def queue_volume(records: DataFrame) -> DataFrame:
    """Messages, bytes and queue offsets per topic and queue."""
    return (records.groupBy("topic", "queue_id")
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 F.min("queue_offset").alias("min_offset"), F.max("queue_offset").alias("max_offset"))
            .orderBy("topic", "queue_id"))


def time_histogram(records: DataFrame, bucket_ms: int = 60_000) -> DataFrame:
    """Messages and bytes per store-time bucket (``bucket_start`` in epoch ms)."""
    bucket = (F.floor(F.col("store_ts") / F.lit(bucket_ms)) * F.lit(bucket_ms)).cast("long")
    return (records.groupBy(bucket.alias("bucket_start"))
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"))
            .orderBy("bucket_start"))


def body_sizes(records: DataFrame) -> DataFrame:
    """Messages per body-size class: powers of two, ``[lower, upper)`` bytes (class 0: empty)."""
    # the bit length, from the binary text: exact where a floating log2 is not
    bits = F.when(F.col("body_size") <= 0, F.lit(0)).otherwise(F.length(F.bin("body_size")))
    lower = F.when(bits == 0, F.lit(0)).otherwise(F.pow(F.lit(2), bits - 1)).cast("long")  # exact in a double
    upper = F.pow(F.lit(2), bits).cast("long")
    return (records.groupBy(lower.alias("lower"), upper.alias("upper"))
            .agg(F.count("*").alias("messages"), F.sum("body_size").alias("body_bytes"))
            .orderBy("lower"))


def top_keys(records: DataFrame, limit: int = 20) -> DataFrame:
    """The most frequent message keys."""
    return (records.select(F.explode("keys").alias("key")).groupBy("key")
            .agg(F.count("*").alias("messages")).orderBy(F.desc("messages"), "key").limit(limit))


def top_tags(records: DataFrame, limit: int = 20) -> DataFrame:
    """The most frequent tags (records without a tag are not counted)."""
    return (records.where(F.col("tags").isNotNull()).groupBy(F.col("tags").alias("tag"))
            .agg(F.count("*").alias("messages")).orderBy(F.desc("messages"), "tag").limit(limit))


def producers(records: DataFrame) -> DataFrame:
    """Who wrote the store: messages, bytes and topics per born host."""
    return (records.groupBy("born_host")
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 F.countDistinct("topic").alias("topics"),
                 F.min("born_ts").alias("first_born_ts"), F.max("born_ts").alias("last_born_ts"))
            .orderBy(F.desc("messages"), "born_host"))


def store_latency(records: DataFrame) -> DataFrame:
    """Percentiles of store_ts - born_ts (ms) per topic and over all (topic ``*``)."""
    latency = (F.col("store_ts") - F.col("born_ts")).alias("latency_ms")

    def stats(df: DataFrame, *keys: Column) -> DataFrame:
        aggs = [F.count("*").alias("messages"), F.min("latency_ms").alias("min_ms")]
        aggs += [F.percentile("latency_ms", p).alias(f"p{_pct_name(p)}_ms") for p in LATENCY_PERCENTILES]
        aggs.append(F.max("latency_ms").alias("max_ms"))
        return df.groupBy(*keys).agg(*aggs)

    per_record = records.select("topic", latency)
    overall = stats(per_record).select(F.lit("*").alias("topic"), "*")
    return stats(per_record, F.col("topic")).unionByName(overall).orderBy(F.col("topic") == "*", "topic")


def _pct_name(p: float) -> str:
    return f"{p * 100:g}".replace(".", "")


def retries(records: DataFrame) -> DataFrame:
    """Retry and dead-letter volume per consumer group (``%RETRY%<group>``, ``%DLQ%<group>``)."""
    kind = (F.when(F.col("topic").startswith(RETRY_PREFIX), F.lit("retry"))
            .when(F.col("topic").startswith(DLQ_PREFIX), F.lit("dlq")))
    group = F.regexp_replace("topic", "^%(RETRY|DLQ)%", "")
    return (records.where(kind.isNotNull()).groupBy(kind.alias("kind"), group.alias("group"))
            .agg(F.count("*").alias("messages"), F.sum("size").alias("bytes"),
                 F.max("reconsume_times").alias("max_reconsume_times"))
            .orderBy("kind", "group"))


def duplicates(records: DataFrame) -> DataFrame:
    """UNIQ_KEYs stored more than once (a producer retry after a lost reply stores a message twice)."""
    return (records.where(F.col("uniq_key").isNotNull()).groupBy("uniq_key")
            .agg(F.count("*").alias("copies"), F.min("phys_offset").alias("first_offset"),
                 F.max("phys_offset").alias("last_offset"), F.min("topic").alias("topic"))
            .where(F.col("copies") > 1).orderBy("first_offset"))


def queue_lag(entries: DataFrame, committed: DataFrame) -> DataFrame:
    """Depth of each queue (entries in the ConsumeQueue, the max offset) and, per consumer group
    that committed an offset there, how far behind it is.

    ``committed`` has columns group, topic, queue_id, offset (a broker's consumerOffsets.json)."""
    depth = (entries.groupBy("topic", "queue_id")
             .agg(F.count("*").alias("entries"), F.min("queue_offset").alias("min_offset"),
                  (F.max("queue_offset") + 1).alias("max_offset")))
    return (depth.join(committed, ["topic", "queue_id"], "left")
            .withColumn("lag", F.when(F.col("group").isNull(), F.lit(None))
                        .otherwise(F.greatest(F.col("max_offset") - F.col("offset"), F.lit(0))))
            .select("topic", "queue_id", "entries", "min_offset", "max_offset", "group",
                    F.col("offset").alias("committed"), "lag")
            .orderBy("topic", "queue_id", "group"))


def divergence(first: DataFrame, second: DataFrame) -> DataFrame:
    """Where two replicas of a log disagree: runs of consecutive records missing from one side
    (``only_first``, ``only_second``) or different at the same offset (``differs``), each with its
    ``[from_offset, to_offset)`` (the first record's start, the last one's end) and record count,
    in offset order. No rows: the logs agree."""

    def sig(df: DataFrame, side: str) -> DataFrame:
        return df.select("phys_offset", F.col("size").alias(f"{side}_size"),
                         F.xxhash64(*[F.col(c) for c in SIGNATURE]).alias(f"{side}_sig"))

    joined = sig(first, "a").join(sig(second, "b"), "phys_offset", "full_outer")
    status = (F.when(F.col("b_sig").isNull(), F.lit("only_first"))
              .when(F.col("a_sig").isNull(), F.lit("only_second"))
              .when(F.col("a_sig") != F.col("b_sig"), F.lit("differs")))
    size = F.coalesce("a_size", "b_size")
    # gaps and islands: a run goes on while the status stays and no record lies between (records
    # of a DLedger log are not byte-adjacent: entry headers sit between them)
    order = Window.orderBy("phys_offset")
    diff = (joined.select("phys_offset", status.alias("status"), (F.col("phys_offset") + size).alias("end"),
                          F.row_number().over(order).alias("seq"))
            .where(F.col("status").isNotNull()))
    starts = diff.withColumn(
        "new_run",
        F.when((F.lag("status").over(order) == F.col("status")) & (F.lag("seq").over(order) == F.col("seq") - 1),
               0).otherwise(1))
    runs = starts.withColumn("run", F.sum("new_run").over(order.rowsBetween(Window.unboundedPreceding, 0)))
    return (runs.groupBy("run", "status")
            .agg(F.min("phys_offset").alias("from_offset"), F.max("end").alias("to_offset"),
                 F.count("*").alias("records"))
            .orderBy("from_offset").select("status", "from_offset", "to_offset", "records"))


@dataclass(frozen=True)
class Report:
    name: str
    title: str
    run: Callable[[DataFrame], DataFrame]


# the reports over one set of records (divergence and queue lag take other inputs)
RECORD_REPORTS: tuple[Report, ...] = (
    Report("topics", "Topic volume", topic_volume),
    Report("queues", "Queue volume", queue_volume),
    Report("time", "Messages by store time (per minute)", time_histogram),
    Report("sizes", "Body size distribution", body_sizes),
    Report("keys", "Top keys", top_keys),
    Report("tags", "Top tags", top_tags),
    Report("producers", "Producers by born host", producers),
    Report("latency", "Store latency (store_ts - born_ts, ms)", store_latency),
    Report("retries", "Retry and DLQ volume", retries),
    Report("duplicates", "Duplicate UNIQ_KEYs", duplicates),
)
