"""A lab: hosts made of network namespaces, joined by a bridge that lives in a namespace of its
own, so the machine's own interfaces, routes and firewall are never touched.

```
  namespace mqlab<N>-sw:   bridge br0 ── mq<N>s0 ── mq<N>s1 ── ...        (the switch)
                                           │          │
  namespace mqlab<N>-<h0>:      mq<N>h0 10.231.<N>.10/24
  namespace mqlab<N>-<h1>:                 mq<N>h1 10.231.<N>.11/24      (one host each)
```
Every address is inside a namespace the lab made (10.231.<N>.0/24, <N> the lab number, so labs
of parallel test workers do not meet); each host has its loopback up too. A process joins a
host with ``ip netns exec`` (:meth:`Lab.command`). Deleting the namespaces deletes their
links: :meth:`Lab.destroy` leaves nothing behind, and :func:`remove_leftovers` clears the labs of
processes that died without it.

Needs root (CAP_NET_ADMIN) and iproute2; :func:`unavailable` says in one line why a lab
cannot be made here.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "mqlab"
SUBNET = "10.231"  # 10.231.<lab>.0/24: private, and only ever inside the lab's namespaces
FIRST_HOST_OCTET = 10
LABS_MAX = 200
HOSTS_MAX = 200
OWNER_DIR = "/run/mqctl-labs"  # <lab>.pid: the process that made each lab
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
CLONE_NEWNET = 0x40000000  # setns(2): the network namespace


class LabError(RuntimeError):
    """A lab could not be made or changed; says which command failed and what it printed."""


def run_ip(*args: str) -> str:
    """Run ``ip ARGS``; its output, or LabError naming the command and its error."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def unavailable() -> str | None:
    """Why a lab cannot be made on this machine (None: it can)."""
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); this process runs as uid " + str(os.geteuid())
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        run_ip("netns", "add", probe)
    except LabError as exc:
        return f"network namespaces cannot be made here: {exc}"
    run_ip("netns", "del", probe)
    return None


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    namespace: str
    address: str  # without the prefix length
    link: str  # its end of the veth pair, inside its namespace


@dataclass
class Lab:
    """Hosts named ``names`` on lab number ``number`` (:func:`create_lab` picks a free one)."""

    number: int
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.number}-sw"

    def host(self, name: str) -> Host:
        try:
            return self.hosts[name]
        except KeyError:
            raise LabError(f"lab {self.number} has no host {name!r} (it has {', '.join(self.hosts)})") from None

    def command(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host`` (inside its namespace)."""
        return ["ip", "netns", "exec", self.host(host).namespace, *argv]

    def add_host(self, name: str, octet: int | None = None) -> Host:
        """A new host on the switch: its namespace, loopback, veth pair and address
        (10.231.<lab>.<octet>; the next one from 10 when not given)."""
        if not _HOST_NAME.fullmatch(name):
            raise LabError(f"host name {name!r}: letters, digits, '.', '_' and '-', at most 32")
        if name in self.hosts:
            raise LabError(f"lab {self.number} has a host {name!r} already")
        n = len(self.hosts)
        if n >= HOSTS_MAX:
            raise LabError(f"a lab holds {HOSTS_MAX} hosts at most")
        octet = FIRST_HOST_OCTET + n if octet is None else octet
        if not 2 <= octet <= 254 or any(h.address == f"{SUBNET}.{self.number}.{octet}" for h in self.hosts.values()):
            raise LabError(f"host {name!r}: address {SUBNET}.{self.number}.{octet} is not free in lab {self.number}")
        host = Host(name, f"{PREFIX}{self.number}-{name}", f"{SUBNET}.{self.number}.{octet}", f"mq{self.number}h{n}")
        port = f"mq{self.number}s{n}"
        run_ip("netns", "add", host.namespace)
        self.hosts[name] = host  # from here on destroy() removes it
        run_ip("-n", host.namespace, "link", "set", "lo", "up")
        run_ip("link", "add", host.link, "netns", host.namespace, "type", "veth", "peer", "name", port,
               "netns", self.switch)
        run_ip("-n", self.switch, "link", "set", port, "master", "br0")
        run_ip("-n", self.switch, "link", "set", port, "up")
        run_ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.link)
        run_ip("-n", host.namespace, "link", "set", host.link, "up")
        return host

    def destroy(self) -> None:
        """Delete every namespace of the lab (their links go with them)."""
        for host in list(self.hosts.values()):
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, check=False, timeout=30)
        self.hosts.clear()
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True, check=False, timeout=30)
        _owner_file(self.number).unlink(missing_ok=True)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def enter(namespace: str) -> None:
    """Move this process into ``namespace``'s network: call it before any thread starts
    (a thread keeps the network it was started in; threads started later take the new one,
    and so do child processes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise LabError(f"cannot enter {namespace}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def create_lab(names: list[str], number: int | None = None, owner: str | None = None) -> Lab:
    """A lab with a host for each of ``names``, on lab ``number`` (LabError when it is taken)
    or the lowest free one. A number is taken by creating its owner file (``OWNER_DIR/<N>.pid``,
    exclusively), then its switch namespace: parallel makers never share one. The owner file
    holds this process's pid (the lab goes with it: :func:`remove_leftovers`), or ``owner``
    (a config's path: the lab outlives the process that made it)."""
    remove_leftovers()
    Path(OWNER_DIR).mkdir(parents=True, exist_ok=True)
    for n in range(LABS_MAX) if number is None else [number]:
        lab = Lab(n)
        if not _claim(n, owner):
            if number is not None:
                raise LabError(f"lab {number} is taken (its owner: {_owner_file(number).read_text().strip()!r})")
            continue  # another live lab's
        try:
            run_ip("netns", "add", lab.switch)
        except LabError:
            _owner_file(n).unlink(missing_ok=True)
            if number is not None:
                raise
            continue  # a name this machine uses otherwise
        try:
            run_ip("-n", lab.switch, "link", "add", "br0", "type", "bridge")
            run_ip("-n", lab.switch, "link", "set", "br0", "up")
            for name in names:
                lab.add_host(name)
        except BaseException:
            lab.destroy()
            raise
        return lab
    raise LabError(f"no free lab number below {LABS_MAX}")


def open_lab(number: int) -> Lab | None:
    """Lab ``number`` as it stands (made by another process), or None when it is not up."""
    listed = run_ip("netns", "list")
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    lab = Lab(number)
    if lab.switch not in names:
        return None
    for name in names:
        if name.startswith(f"{PREFIX}{number}-") and name != lab.switch:
            host = name[len(f"{PREFIX}{number}-"):]
            addrs = run_ip("-n", name, "-o", "-4", "addr", "show")
            match = re.search(rf"(\S+)\s+inet ({re.escape(SUBNET)}\.{number}\.\d+)/", addrs)
            if match:
                lab.hosts[host] = Host(host, name, match.group(2), match.group(1).split("@")[0])
    return lab


def remove_leftovers() -> list[int]:
    """Delete the labs whose maker is gone (killed before it could destroy them); their numbers."""
    removed = []
    listed = run_ip("netns", "list") if shutil.which("ip") else ""
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    numbers = {int(m.group(1)) for n in names if (m := re.match(rf"{PREFIX}(\d+)-", n))}
    owners = Path(OWNER_DIR).glob("*.pid") if Path(OWNER_DIR).is_dir() else []
    numbers |= {int(p.stem) for p in owners if p.stem.isdigit()}
    for number in sorted(numbers):
        try:
            text = _owner_file(number).read_text().strip()
        except FileNotFoundError:
            text = ""  # namespaces without an owner: a maker that died (the file goes last)
        if text and not text.isdigit():
            continue  # a config's lab: it lives until `mqctl stop`
        if text and _alive(int(text)):
            continue
        for name in names:
            if name.startswith(f"{PREFIX}{number}-"):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False, timeout=30)
        _owner_file(number).unlink(missing_ok=True)
        removed.append(number)
    return removed


def _claim(number: int, owner: str | None = None) -> bool:
    """Take lab ``number``: its owner file appears whole, holding this process's pid (or
    ``owner``), or not at all (written aside, then linked into place, which fails when the
    file exists)."""
    aside = Path(OWNER_DIR) / f".{number}.{os.getpid()}"
    aside.write_text(owner or str(os.getpid()))
    try:
        os.link(aside, _owner_file(number))
    except FileExistsError:
        return False
    finally:
        aside.unlink(missing_ok=True)
    return True


def _owner_file(number: int) -> Path:
    return Path(OWNER_DIR) / f"{number}.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
