"""``mqctl top`` under tmux shows the rate and the lag of known traffic; --json gives one snapshot."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO, Cluster
from tests.interop.test_proxy_failover import wait_for

RATE_PER_S = 40
PACED = textwrap.dedent("""
    import sys, time, trio
    from core.client.producer import Message, Producer
    from core.client.runtime import open_client

    async def main(namesrv, topic, rate, stop):
        async with open_client([namesrv]) as client:
            producer = Producer(client, "top-pacer")
            start = time.monotonic()
            for i in range(int(rate) * 120):  # at most two minutes
                await producer.send(Message(topic, b"paced"))
                if await trio.Path(stop).exists():
                    return
                await trio.sleep(max(0.0, start + (i + 1) / float(rate) - time.monotonic()))

    trio.run(main, *sys.argv[1:])
""")


def screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def row(text: str, first: str, second: str | None = None) -> list[str] | None:
    """The cells of the table row starting with ``first`` (and ``second``)."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == first and (second is None or (len(cells) > 1 and cells[1] == second)):
            return cells
    return None


def test_top_in_a_terminal_shows_the_rate_and_lag_of_known_traffic(cluster: Cluster, tmp_path: Path) -> None:
    assert shutil.which("tmux"), "tmux is needed"
    for topic in ("TopBacklog", "TopRate"):
        assert cluster.mqctl("topic", "create", topic).returncode == 0
    assert cluster.mqctl("send", "TopBacklog", "old", "--count", "40").returncode == 0
    assert cluster.mqctl("tail", "TopBacklog", "--group", "TopGroup", "--count", "40").returncode == 0
    assert cluster.mqctl("send", "TopBacklog", "new", "--count", "25").returncode == 0  # not consumed: lag 25
    stop = tmp_path / "pacer.stop"
    pacer = subprocess.Popen([sys.executable, "-c", PACED, cluster.namesrv, "TopRate", str(RATE_PER_S), str(stop)],
                             env=cluster.env, cwd=REPO, stderr=subprocess.PIPE)
    session = f"mqctl-top-{tmp_path.name}"[:60]
    command = f"{sys.executable} -m mqctl --config {cluster.config} top --interval 1"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "60",
                    f"env PYTHONPATH={cluster.env['PYTHONPATH']} {command}"], check=True)
    try:
        def shows_both() -> tuple[float, int] | None:
            text = screen(session)
            rate, lag = row(text, "TopRate"), row(text, "TopGroup", "TopBacklog")
            if rate is None or lag is None or float(rate[1]) < RATE_PER_S / 2:
                return None
            return float(rate[1]), int(lag[2])
        rate, lag = wait_for(shows_both, 30, "top showing TopRate's rate and TopGroup's lag")  # type: ignore[misc]
        assert RATE_PER_S / 2 <= rate <= RATE_PER_S * 2, screen(session)
        assert lag == 25, screen(session)
        snapshot = cluster.mqctl("top", "--json", "--interval", "1")
        assert snapshot.returncode == 0, snapshot.stderr
        view = json.loads(snapshot.stdout)
        assert next(g for g in view["groups"] if g["group"] == "TopGroup" and g["topic"] == "TopBacklog")["lag"] == 25
        assert RATE_PER_S / 2 <= next(t for t in view["topics"] if t["topic"] == "TopRate")["in_per_s"] <= RATE_PER_S * 2
        assert all(n["up"] for n in view["nodes"]), view["nodes"]
    finally:
        stop.touch()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        pacer.wait(timeout=30)
