"""Starting, finding and stopping a config's nodes as background processes.

Each node runs ``python -m mqctl.nodes.node``; its pid file is ``data_dir/run/<node>.pid`` and its log
``data_dir/logs/<node>.log``. A pid file only counts while its process is still an mqctl node
of that name (a reused pid does not).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from core.config import Config
from mqctl.common.errors import CliError
from mqctl.hosts.placement import node_argv

NODE_MODULE = "mqctl.nodes.node"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    kind: str  # "nameserver" | "broker" | "proxy"
    listen: str
    registered: str = ""  # a broker's address in the routes (``advertise`` or ``listen``)


def nodes_of(config: Config, names: list[str] | None = None) -> list[NodeSpec]:
    """The config's nodes, name servers first, proxies last (the order to start in)."""
    specs = [NodeSpec(ns.name, "nameserver", ns.listen) for ns in config.nameservers]
    specs += [NodeSpec(b.node, "broker", b.listen, b.registered_address) for b in config.brokers]
    specs += [NodeSpec(p.name, "proxy", p.listen) for p in config.proxies]
    if names:
        unknown = sorted(set(names) - {s.name for s in specs})
        if unknown:
            raise CliError(f"no node named {', '.join(unknown)} (nodes: {', '.join(s.name for s in specs)})")
        specs = [s for s in specs if s.name in names]
    return specs


def run_dir(config: Config) -> Path:
    return config.data_dir / "run"


def log_path(config: Config, node: str) -> Path:
    return config.data_dir / "logs" / f"{node}.log"


def pid_path(config: Config, node: str) -> Path:
    return run_dir(config) / f"{node}.pid"


def running_pid(config: Config, node: str) -> int | None:
    """The pid of the live process serving ``node``, or ``None``."""
    path = pid_path(config, node)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if not _is_node_process(pid, node):
        path.unlink(missing_ok=True)
        return None
    return pid


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far (from /proc), or ``None``
    when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node_cpu_seconds(config: Config) -> dict[str, float]:
    """CPU seconds each running node of ``config`` has used so far, by node name."""
    out: dict[str, float] = {}
    for node in config.node_names():
        pid = running_pid(config, node)
        seconds = cpu_seconds(pid) if pid is not None else None
        if seconds is not None:
            out[node] = seconds
    return out


def _is_node_process(pid: int, node: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return False
    modules = (NODE_MODULE.encode(), b"mqctl.node")  # the second: nodes started by the old spelling
    return state != "Z" and any(m in cmdline for m in modules) and node.encode() in cmdline


def spawn(config: Config, spec: NodeSpec) -> int:
    """Start ``spec`` in the background, detached from this terminal; returns its pid."""
    assert config.source is not None
    logs = log_path(config, spec.name)
    logs.parent.mkdir(parents=True, exist_ok=True)
    run_dir(config).mkdir(parents=True, exist_ok=True)
    with open(logs, "ab") as log:
        proc = subprocess.Popen(
            node_argv(config, spec.name, [sys.executable, "-m", NODE_MODULE, "--config", str(config.source),
                                          "--node", spec.name]),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=config.source.parent,
        )
    pid_path(config, spec.name).write_text(f"{proc.pid}\n")
    return proc.pid


def wait_exited(pid: int, timeout_s: float) -> bool:
    """Whether ``pid`` has exited, waiting up to ``timeout_s`` (0: look once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
        except ChildProcessError:
            pass
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def stop(config: Config, spec: NodeSpec, *, force: bool, timeout_s: float = STOP_TIMEOUT_S) -> str:
    """Stop one node: SIGTERM (graceful) or SIGKILL; returns what happened."""
    pid = running_pid(config, spec.name)
    if pid is None:
        return "not running"
    try:
        os.kill(pid, signal.SIGKILL if force else signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not wait_exited(pid, timeout_s):
        raise CliError(f"{spec.name} (pid {pid}) did not stop within {timeout_s:.0f}s; try --force")
    pid_path(config, spec.name).unlink(missing_ok=True)
    return "killed" if force else "stopped"


def tail_of_log(config: Config, node: str, lines: int = 15) -> str:
    try:
        return "\n".join(log_path(config, node).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
