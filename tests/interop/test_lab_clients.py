"""The stock C++ 4.x client and the official 5.x client against a cluster whose nodes are hosts
of a lab (``[cluster] lab = N``): the clients run on the lab's client host, the C++ client asks
the name server across the bridge, the 5.x client goes through the proxy's gRPC door on a host
of its own, and a sync slave on a third host keeps what they sent. ACL holds across the lab:
both clients sign, and a wrong signature is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mqctl.hosts.lab import PREFIX, unavailable
from tests.conftest import INTEROP
from tests.interop.rmq5_client import client_env
from tests.mqctl.test_lab_cluster import free_lab_number, lab_conf

WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no lab on this machine: {WHY_NOT}")
COUNT = 50
ACL_FILE = """\
accounts:
  - accessKey: lab-key
    secretKey: lab-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"""
ACL = 'enabled = true\nfile = "plain_acl.yml"\naccess_key = "admin-key"\nsecret_key = "admin-secret"'


def _on_client_host(number: int, argv: list[str], env: dict[str, str], timeout: float = 120) -> list[dict]:
    done = subprocess.run(["ip", "netns", "exec", f"{PREFIX}{number}-client", *argv], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow  # 16 s: make test is near its 10 minutes; the lab itself is in make test (tests/mqctl/test_lab*.py)
def test_the_stock_4x_and_official_5x_clients_work_across_the_lab(tmp_path, subprocess_env):
    number = free_lab_number()
    net = f"10.231.{number}"
    conf = tmp_path / "conf.toml"
    conf.write_text(lab_conf(number, proxy=True, acl=ACL))
    (tmp_path / "plain_acl.yml").write_text(ACL_FILE)
    env = dict(subprocess_env, HOME=str(tmp_path))  # the C++ client logs under $HOME/logs
    signed = dict(env, ROCKETMQ_ACCESS_KEY="lab-key", ROCKETMQ_SECRET_KEY="lab-secret",
                  RMQ5_ACCESS_KEY="lab-key", RMQ5_SECRET_KEY="lab-secret")

    def mqctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", "-c", str(conf), *args], capture_output=True,
                              text=True, env=env, timeout=120, check=False)

    try:
        started = mqctl("start")
        assert started.returncode == 0, started.stderr
        for name in ("LabCpp", "LabRmq5"):
            made = mqctl("topic", "create", name, "--queues", "4")
            assert made.returncode == 0, made.stderr
        cpp = [sys.executable, str(INTEROP / "cpp_client.py")]
        sent = _on_client_host(number, [*cpp, "produce", f"{net}.10:9876", "LabCpp", str(COUNT)], signed)
        assert [r.get("status") for r in sent] == [0] * COUNT, sent[:3]  # SEND_OK
        forged = _on_client_host(number, [*cpp, "produce", f"{net}.10:9876", "LabCpp", "3", "1000"],
                                 dict(signed, ROCKETMQ_SECRET_KEY="not-the-secret"))
        assert len(forged) == 3 and all("error" in r for r in forged), forged  # refused across the lab too
        got = _on_client_host(number, [*cpp, "consume", f"{net}.10:9876", "LabCppG", "LabCpp", "*", str(COUNT), "60"],
                              signed)
        assert sorted({int(r["idx"]) for r in got}) == list(range(COUNT))  # at least once each
        rmq5 = [sys.executable, str(INTEROP / "rmq5_client.py")]
        specs = [{"body": f"five {i}", "tag": "T"} for i in range(COUNT)]
        produced = _on_client_host(number, [*rmq5, "produce", f"{net}.13:8091", "LabRmq5", json.dumps(specs)],
                                   client_env(signed))
        assert len([r for r in produced if r["event"] == "sent"]) == COUNT, produced[:3]
        received = _on_client_host(number, [*rmq5, "consume", f"{net}.13:8091", "LabRmq5G", "LabRmq5",
                                            json.dumps({"count": COUNT, "wait_s": 60})], client_env(signed))
        bodies = sorted(bytes.fromhex(r["body"]).decode() for r in received if r["event"] == "received")
        assert bodies == sorted(s["body"] for s in specs)
        status = mqctl("status")
        assert status.returncode == 0 and "in sync" in status.stdout, status.stdout
    finally:
        mqctl("stop")
