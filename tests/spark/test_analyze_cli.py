"""``mqctl analyze`` end to end: its refusals (no Spark started), and a broker group's stores (our
store's files) found from the config and analyzed on a standalone Spark master with one worker on
loopback: the same results as local mode and as plain Python, with files and charts written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from spark import jobs
from tests.conftest import free_port, write_cluster_config
from tests.spark import plain_reports as plain


def analyze(*args: str, env: dict[str, str], config: Path | None = None, timeout: float = 240):
    cmd = [sys.executable, "-m", "mqctl", *(["--config", str(config)] if config else []), "analyze", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def test_refusals_are_clear_and_start_no_spark(analysis_stores, subprocess_env, tmp_path):
    store = str(analysis_stores["broker"])
    cases = [
        (["-r", "topics,nonsense", store], "unknown report nonsense"),
        (["--format", "xml", store], "--format must be one of"),
        (["--format", "parquet", store], "give --out DIR"),
        (["--json", "--format", "csv", store], "give --json or --format csv, not both"),
        ([str(tmp_path / "nowhere")], "no such store"),
    ]
    for args, message in cases:
        done = analyze(*args, env=subprocess_env)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
        assert "starting Spark" not in done.stderr
    no_java = dict(subprocess_env, PATH=str(Path(sys.executable).parent), HOME=str(tmp_path))
    no_java.pop("JAVA_HOME", None)
    done = analyze(store, env=no_java)
    assert done.returncode == 2 and "Spark needs Java 17" in done.stderr and "JAVA_HOME" in done.stderr


@pytest.fixture
def standalone_master(tmp_path, subprocess_env):
    """A Spark standalone master and one worker on loopback, started with the pyspark wheel's scripts."""
    home = Path(pyspark.__file__).parent
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = dict(subprocess_env, SPARK_HOME=str(home), SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOCAL_IP="127.0.0.1")
    logs = open(tmp_path / "standalone.log", "wb")
    spark_class = str(home / "bin" / "spark-class")
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env, stdout=logs, stderr=logs)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--host", "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui)],
                              env=env, stdout=logs, stderr=logs)
    try:
        deadline = time.monotonic() + 90
        while True:  # the master's JSON status lists the worker once it registered
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as reply:
                    if json.load(reply).get("aliveworkers", 0) >= 1:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "standalone.log").read_text()[-2000:]
            assert master.poll() is None and worker.poll() is None, (tmp_path / "standalone.log").read_text()[-2000:]
            time.sleep(0.3)
        yield f"spark://127.0.0.1:{port}", env
    finally:
        for proc in (worker, master):
            proc.terminate()
        for proc in (worker, master):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        logs.close()


@pytest.mark.slow  # make test-long; make test's short form of a Spark cluster is the spark-submit job below
def test_a_configs_stores_on_a_standalone_master_match_plain_python(
        standalone_master, analysis_stores, tmp_path, subprocess_env):
    url, spark_env = standalone_master
    # a config whose broker group's two nodes hold our store's files (the replica a copy)
    conf = tmp_path / "conf.toml"
    write_cluster_config(conf, broker_ids=(0, 1))
    master, slave = tmp_path / "data" / "broker-a-0", tmp_path / "data" / "broker-a-1"
    shutil.copytree(analysis_stores["broker"], master)
    shutil.copytree(analysis_stores["broker"], slave)
    out = tmp_path / "out"
    # the reports that read both data sources and a replica pair; every report is compared
    # row for row between local mode and plain Python in test_reports.py
    reports = ["topics", "lag", "divergence"]
    done = analyze("--master", url, "--out", str(out), "--format", "parquet", "-r", ",".join(reports),
                   env=dict(subprocess_env, HOME=str(tmp_path), **{k: v for k, v in spark_env.items()
                                                                   if k.startswith("SPARK_")}), config=conf)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"on {url}" in done.stderr and "== Topic volume (5 rows)" in done.stdout
    assert "WARN" not in done.stderr and "log4j" not in done.stderr.lower()  # Spark's noise went to its log
    assert (out / "spark.log").stat().st_size > 0

    # as plain Python computes them from the files
    recs = plain.records(master / "commitlog")
    topics = {r["topic"]: (r["messages"], r["bytes"], r["queues"]) for r in pq.read_table(out / "topics.parquet").to_pylist()}
    assert topics == plain.topics(recs)
    lag = pq.read_table(out / "lag-broker-a-0.parquet").to_pylist()
    expected_lag = {(t, q, g): (hi, *groups[g]) for (t, q), (_, _, hi, groups) in plain.queue_lag(master).items()
                    for g in groups}
    assert {(r["topic"], r["queue_id"], r["group"]): (r["max_offset"], r["committed"], r["lag"]) for r in lag
            if r["group"]} == expected_lag and expected_lag
    assert pq.read_table(out / "divergence-broker-a-0-vs-broker-a-1.parquet").num_rows == 0  # the copy agrees


@pytest.mark.slow  # 46 s; make test keeps test_reports.py's local-mode comparison of the same report
def test_a_report_job_under_spark_submit_matches_plain_python(analysis_stores, tmp_path, subprocess_env):
    """``spark-submit spark/jobs/divergence.py A B --out O``, as the README shows it. (Local mode
    is compared with plain Python for this report in test_reports.py.)"""
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    job = Path(jobs.__file__).parent / "divergence.py"
    first, second = analysis_stores["raft"], analysis_stores["raft-diverged"]
    env = dict(subprocess_env, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", "spark.sql.shuffle.partitions=2", str(job), str(first), str(second),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    got = pq.read_table(tmp_path / "out" / "divergence-raft-vs-raft-diverged").to_pylist()
    expected = plain.divergence(plain.records(first / "commitlog"), plain.records(second / "commitlog"))
    assert [(r["status"], r["from_offset"], r["to_offset"], r["records"]) for r in got] == expected
    assert {r["status"] for r in got} >= {"differs", "only_first"}
