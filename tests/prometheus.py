"""A real Prometheus server for the tests: Debian's ``prometheus`` package (``make install``
unpacks it into .venv/prometheus when the machine has none), scraping 127.0.0.1 only, with its
own data folder, queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

REPO = Path(__file__).resolve().parent.parent
UNPACKED = REPO / ".venv" / "prometheus" / "usr" / "bin" / "prometheus"


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or (str(UNPACKED) if UNPACKED.exists() else None)
    if found is None:
        raise AssertionError("no prometheus binary: `make install` unpacks Debian's prometheus package into "
                             ".venv/prometheus (or: apt-get install prometheus)")
    return found


class Prometheus:
    def __init__(self, address: str) -> None:
        self.address = address

    def api(self, path: str, **params: str) -> dict:
        url = f"http://{self.address}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def value(self, expr: str) -> float | None:
        """The value of an instant query that yields one series (None: no series)."""
        result = self.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr: str, check, timeout_s: float, what: str) -> float:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = self.value(expr)
            if last is not None and check(last):
                return last
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}: {expr} = {last}")


@contextmanager
def running_prometheus(folder: Path, targets_file: Path) -> Iterator[Prometheus]:
    """Prometheus scraping the file_sd targets in ``targets_file`` every second."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mqctl
    file_sd_configs:
      - files: ["{targets_file}"]
        refresh_interval: 1s
""")
    address = f"127.0.0.1:{free_port()}"
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen([prometheus_binary(), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                             f"--web.listen-address={address}", "--storage.tsdb.retention.time=1h"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (folder / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus not ready within 30 s"
            time.sleep(0.1)
        yield Prometheus(address)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
