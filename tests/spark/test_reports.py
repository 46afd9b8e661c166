"""Every report of spark/reports.py equals a plain-Python computation over formats/ on the same
files: a store our broker wrote, and a DLedger-layout store from the independent encoder with an
archived segment."""

from __future__ import annotations

import pytest

from spark import reports
from spark.analysis import StoreRef, build_reports, load_records
from tests.spark import plain_reports as plain
from tests.spark.conftest import CUT_FROM, DIVERGED_AT
from tests.spark.stores import SEGMENT


@pytest.fixture(scope="module", params=["broker", "raft"])
def case(request, spark, analysis_stores):
    node = analysis_stores[request.param]
    # tiny ranges: the stores' segments are read in several pieces each
    frame = load_records(spark, [StoreRef(request.param, node)], range_mb=0.01).cache()
    return frame, plain.records(node / "commitlog"), request.param


def rows(frame):
    return [r.asDict(recursive=True) for r in frame.collect()]


def test_the_source_reads_every_record_once(case, analysis_stores):
    frame, recs, name = case
    assert frame.rdd.getNumPartitions() >= 4
    got = sorted((r["phys_offset"], r["topic"], r["queue_offset"], r["uniq_key"], r["raft_index"]) for r in rows(frame))
    assert got == sorted((r.offset, r.record.topic, r.record.queue_offset, r.record.uniq_key,
                          r.entry.raft_index if r.entry else None) for r in recs)
    assert len(got) == (420 if name == "broker" else 260)
    one = frame.where(frame.compressed).first() if name == "broker" else frame.first()
    assert one is not None and one["body_crc_ok"] and one["properties"]["UNIQ_KEY"] == one["uniq_key"]


def test_volumes(case):
    frame, recs, _ = case
    assert {r["topic"]: (r["messages"], r["bytes"], r["queues"]) for r in rows(reports.topic_volume(frame))} == \
        plain.topics(recs)
    assert {(r["topic"], r["queue_id"]): (r["messages"], r["bytes"], r["min_offset"], r["max_offset"])
            for r in rows(reports.queue_volume(frame))} == plain.queues(recs)


def test_time_and_size_distributions(case):
    frame, recs, _ = case
    for bucket in (1000, 60_000):
        got = {r["bucket_start"]: (r["messages"], r["bytes"]) for r in rows(reports.time_histogram(frame, bucket))}
        assert got == plain.time_histogram(recs, bucket)
    sizes = rows(reports.body_sizes(frame))
    assert {(r["lower"], r["upper"]): (r["messages"], r["body_bytes"]) for r in sizes} == plain.sizes(recs)
    assert [r["lower"] for r in sizes] == sorted(r["lower"] for r in sizes)


def test_top_keys_tags_and_producers(case):
    frame, recs, _ = case
    assert [(r["key"], r["messages"]) for r in rows(reports.top_keys(frame, 5))] == plain.keys(recs, 5)
    assert [(r["tag"], r["messages"]) for r in rows(reports.top_tags(frame))] == plain.tags(recs)
    assert {r["born_host"]: (r["messages"], r["bytes"], r["topics"], r["first_born_ts"], r["last_born_ts"])
            for r in rows(reports.producers(frame))} == plain.producers(recs)


def test_store_latency_percentiles(case):
    frame, recs, _ = case
    expected = plain.latency(recs, reports.LATENCY_PERCENTILES)
    got = rows(reports.store_latency(frame))
    assert [r["topic"] for r in got][-1] == "*"
    for r in got:
        values = (r["messages"], r["min_ms"], *[r[f"p{reports._pct_name(p)}_ms"] for p in reports.LATENCY_PERCENTILES],
                  r["max_ms"])
        assert values == pytest.approx(expected[r["topic"]], abs=1e-6)
    assert len(got) == len(expected)


def test_retries_and_duplicates(case):
    frame, recs, name = case
    got = {(r["kind"], r["group"]): (r["messages"], r["bytes"], r["max_reconsume_times"])
           for r in rows(reports.retries(frame))}
    assert got == plain.retries(recs)
    dupes = {r["uniq_key"]: (r["copies"], r["first_offset"], r["last_offset"]) for r in rows(reports.duplicates(frame))}
    assert dupes == plain.duplicates(recs)
    if name == "broker":
        assert got and dupes  # the broker store has both, so the comparison above means something


def test_queue_lag_against_the_consume_queues_and_committed_offsets(spark, analysis_stores):
    node = analysis_stores["broker"]
    [table] = build_reports(spark, [StoreRef("broker", node)], ["lag"])
    got: dict = {}
    for r in rows(table.frame):
        *_, groups = got.setdefault((r["topic"], r["queue_id"]), (r["entries"], r["min_offset"], r["max_offset"], {}))
        if r["group"] is not None:
            groups[r["group"]] = (r["committed"], r["lag"])
    expected = plain.queue_lag(node)
    assert got == expected
    assert expected[("Orders", 1)][3] == {"billing": (11, expected[("Orders", 1)][2] - 11), "audit": (1000, 0)}


def test_divergence_of_two_raft_replicas(spark, analysis_stores):
    a, b = analysis_stores["raft"], analysis_stores["raft-diverged"]
    [table] = build_reports(spark, [StoreRef("a", a), StoreRef("b", b)], ["divergence"])
    got = [(r["status"], r["from_offset"], r["to_offset"], r["records"]) for r in rows(table.frame)]
    expected = plain.divergence(plain.records(a / "commitlog"), plain.records(b / "commitlog"))
    assert got == expected
    assert got[0][:2] == ("differs", DIVERGED_AT)
    # the zeroed rest of a segment is one run, across the entry headers between its records
    [hole] = [r for r in got if r[0] == "only_first"]
    segment_end = (CUT_FROM // SEGMENT + 1) * SEGMENT
    assert hole[1] == CUT_FROM and hole[3] == sum(CUT_FROM <= r.offset < segment_end
                                                  for r in plain.records(a / "commitlog")) > 50
    [same] = build_reports(spark, [StoreRef("a", a), StoreRef("a2", a)], ["divergence"])
    assert same.frame.count() == 0


def test_a_schema_naming_some_columns_reads_only_those(spark, analysis_stores):
    node = analysis_stores["broker"]
    frame = spark.read.format("commitlog").schema("size INT, topic STRING").load(str(node))
    assert frame.columns == ["size", "topic"]
    got = {r["topic"]: r["bytes"] for r in frame.groupBy("topic").agg({"size": "sum"})
           .withColumnRenamed("sum(size)", "bytes").collect()}
    assert got == {t: b for t, (_, b, _) in plain.topics(plain.records(node / "commitlog")).items()}
    with pytest.raises(Exception, match="no column nonsense"):
        spark.read.format("commitlog").schema("nonsense INT").load(str(node)).count()
