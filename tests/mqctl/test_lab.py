"""Hosts in network namespaces on a bridge of their own, and kernel-level faults between them:
real namespaces, real TCP between processes inside them; the machine's own links and addresses
are the same before and after."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mqctl.hosts.faults import Faults, nft_missing
from mqctl.hosts.lab import PREFIX, create_lab, remove_leftovers, unavailable

WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no lab on this machine: {WHY_NOT}")
PORT = 7411
# an echo server: each connection gets back what it sent; it serves until killed
SERVER = ("import socket\n"
          "s = socket.create_server((HOST, 7411))\n"
          "print('up', flush=True)\n"
          "while True:\n"
          "    c, _ = s.accept()\n"
          "    c.sendall(c.recv(64)); c.close()\n")
CLIENT = ("import socket, sys\n"
          "try:\n"
          "    c = socket.create_connection((sys.argv[1], 7411), timeout=1.0)\n"
          "    c.sendall(b'ping'); sys.exit(0 if c.recv(64) == b'ping' else 2)\n"
          "except OSError:\n"
          "    sys.exit(1)\n")


def _host_view() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout + \
        subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout


def test_hosts_talk_over_the_bridge_and_partitions_loss_and_rates_apply_and_heal() -> None:
    if nft_missing():
        pytest.skip(nft_missing())
    before = _host_view()
    lab = create_lab(["a", "b", "c"])
    server = None
    try:
        a = lab.host("a").address
        server = subprocess.Popen(lab.command("a", [sys.executable, "-c", SERVER.replace("HOST", repr(a))]),
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "up"

        def reaches(host: str) -> bool:
            done = subprocess.run(lab.command(host, [sys.executable, "-c", CLIENT, a]), timeout=10, check=False)
            assert done.returncode in (0, 1), "an answer that is not the echo"
            return done.returncode == 0

        assert reaches("b") and reaches("c") and reaches("a")
        # a client on b names itself by b's address on the bridge (its message ids carry it)
        named = subprocess.run(lab.command("b", [sys.executable, "-c", "from core.client.runtime import "
                                                 f"local_ip_towards; print(local_ip_towards('{a}:9876'))"]),
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        assert named == lab.host("b").address
        faults = Faults(lab)
        faults.partition("a", "b")
        assert not reaches("b") and reaches("c")
        faults.heal()
        assert reaches("b")
        faults.split([["a", "b"], ["c"]])  # a majority and a minority
        assert reaches("b") and not reaches("c")
        faults.heal()
        faults.loss("a", 99)  # a handshake and an echo through 99% loss each way, within 1 s: no
        assert not reaches("b")
        faults.heal("a")
        faults.isolate("c")
        assert not reaches("c") and reaches("b")
        faults.heal("c")
        faults.rate("b", 1000)
        ns, link = lab.host("b").namespace, lab.host("b").link
        shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", link],
                               capture_output=True, text=True, check=True).stdout
        assert "tbf" in shown and "1Mbit" in shown
        assert reaches("b")  # slower, not cut
        faults.heal()
        assert reaches("b") and reaches("c")
    finally:
        if server is not None:
            server.kill()
            server.wait()
        lab.destroy()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}{lab.number}-" not in listed  # every namespace of the lab is gone
    assert _host_view() == before  # the machine's own links and addresses untouched


def test_parallel_labs_get_their_own_numbers_and_subnets() -> None:
    first = create_lab(["x"])
    try:
        second = create_lab(["x"])
        try:
            assert first.number != second.number
            assert first.host("x").address != second.host("x").address
            assert first.host("x").namespace != second.host("x").namespace
        finally:
            second.destroy()
    finally:
        first.destroy()


def test_a_lab_whose_maker_was_killed_is_cleared_by_the_next_one() -> None:
    maker = subprocess.Popen([sys.executable, "-c", "from mqctl.hosts.lab import create_lab\n"
                              "lab = create_lab(['z'])\nprint(lab.number, flush=True)\nimport time\ntime.sleep(60)\n"],
                             stdout=subprocess.PIPE, text=True)
    assert maker.stdout is not None
    number = int(maker.stdout.readline())
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}{number}-z" in listed
    maker.kill()  # SIGKILL: no destroy()
    maker.wait()
    remove_leftovers()  # (a lab made meanwhile by a parallel test may have cleared it first)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{PREFIX}{number}-" not in listed
