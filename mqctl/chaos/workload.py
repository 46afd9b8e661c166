"""A drill's workload: client processes of every kind, and the history they write.

```
 topic ChaosDrill  (8 queues)  <- mqctl producers (direct), C++ producer (through the proxy's 4.x door)
                               -> group chaos-push: orderly push consumers of mqctl and C++ (direct)
 topic ChaosDrill5 (8 queues)  <- the official 5.x producer (proxy, gRPC)
                               -> group chaos-pop: the official 5.x push consumer (POP, proxy, gRPC)
```

Each process is a worker module (mqctl/chaos/worker.py, cpp_worker.py, rmq5_worker.py) that
appends its sends and deliveries to a journal of its own (mqctl/chaos/journal.py); the drill
reads them as they grow. The offered rate is split among the producers by weight. The C++
producer and one of mqctl's send in FIFO streams (one queue each, an answer before the next
send), so their acknowledged offsets must rise in send order; the other mqctl producer sends
in bulk (``send_async``, batched), as an application with volume does.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO

from mqctl.chaos.history import Delivery, SendAttempt
from mqctl.chaos.journal import JournalReader
from mqctl.common.rmq5_client import client_env, client_path

TOPIC = "ChaosDrill"
TOPIC5 = "ChaosDrill5"
PUSH_GROUP = "chaos-push"
POP_GROUP = "chaos-pop"
QUEUES = 8
CLIENTS = ("ours", "cpp", "rmq5")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# shares of the offered rate: the 5.x client costs several times what a 4.x client does
# (docs/benchmarks.md), so it carries the smallest share
WEIGHTS = MappingProxyType({"ours": 0.7, "cpp": 0.22, "rmq5": 0.08})
FIFO_SHARE = 0.25  # of mqctl's share: FIFO streams (a request a message); the rest in bulk, batched
# a stream sends one message after another: enough streams that the rate is offered while
# answers take this long (a loaded 2-core host answers in tens of ms)
STREAM_LATENCY_S = 0.06


def streams_for(rate: float, at_least: int) -> int:
    return max(at_least, math.ceil(rate * STREAM_LATENCY_S))


@dataclass
class Endpoints:
    namesrv: list[str]  # the name servers (direct)
    proxy: str | None = None  # the proxy's 4.x door (a name server address to 4.x clients)
    grpc: str | None = None  # the proxy's gRPC door
    broker: str = "broker-a"


@dataclass
class WorkerSpec:
    name: str
    client: str  # ours | cpp | rmq5
    role: str  # produce | consume
    topic: str
    group: str
    rate: float = 0.0
    streams: int = 0  # a producer's senders, each one message after another
    fifo: bool = False

    @property
    def module(self) -> str:
        return {"ours": "mqctl.chaos.worker", "cpp": "mqctl.chaos.cpp_worker",
                "rmq5": "mqctl.chaos.rmq5_worker"}[self.client]


def missing_clients(clients: tuple[str, ...]) -> dict[str, str]:
    """Of ``clients``, those not installed here, with why."""
    out = {}
    if "cpp" in clients and importlib.util.find_spec("rocketmq") is None:
        out["cpp"] = "the stock C++ client (PyPI rocketmq 0.4.4) is not installed: make install adds it"
    if "rmq5" in clients and not (client_path() / "rocketmq" / "v5").is_dir():
        out["rmq5"] = f"the official 5.x client is not installed in {client_path()}: make install adds it"
    return out


def plan_workload(rate: float, clients: tuple[str, ...], endpoints: Endpoints) -> list[WorkerSpec]:
    """The workers of a drill offering ``rate`` messages a second in all."""
    total = sum(WEIGHTS[c] for c in clients)
    specs: list[WorkerSpec] = []
    if "ours" in clients:
        share = rate * WEIGHTS["ours"] / total
        specs += [WorkerSpec("ours-p0", "ours", "produce", TOPIC, PUSH_GROUP, share * FIFO_SHARE,
                             streams_for(share * FIFO_SHARE, QUEUES), True),
                  WorkerSpec("ours-p1", "ours", "produce", TOPIC, PUSH_GROUP, share * (1 - FIFO_SHARE)),
                  WorkerSpec("ours-c0", "ours", "consume", TOPIC, PUSH_GROUP)]
    if "cpp" in clients:
        cpp = rate * WEIGHTS["cpp"] / total
        specs += [WorkerSpec("cpp-p0", "cpp", "produce", TOPIC, PUSH_GROUP, cpp, streams_for(cpp, QUEUES), True),
                  WorkerSpec("cpp-c0", "cpp", "consume", TOPIC, PUSH_GROUP)]
    if "rmq5" in clients and endpoints.grpc:
        five = rate * WEIGHTS["rmq5"] / total
        specs += [WorkerSpec("rmq5-p0", "rmq5", "produce", TOPIC5, POP_GROUP, five, streams_for(five, 4)),
                  WorkerSpec("rmq5-c0", "rmq5", "consume", TOPIC5, POP_GROUP)]
    return specs


def worker_args(spec: WorkerSpec, endpoints: Endpoints, journal: Path, t0: float) -> dict[str, object]:
    args: dict[str, object] = {"role": spec.role, "name": spec.name, "topic": spec.topic, "group": spec.group,
                               "journal": str(journal), "t0": t0, "broker": endpoints.broker,
                               "rate": spec.rate, "queues": QUEUES, "streams": spec.streams, "fifo": spec.fifo}
    if spec.client == "ours":
        args["namesrv"] = endpoints.namesrv
    elif spec.client == "cpp" and spec.role == "produce":  # the stock 4.x producer through the proxy
        args["namesrv"] = [endpoints.proxy] if endpoints.proxy else endpoints.namesrv
    elif spec.client == "cpp":  # ... and its consumer direct
        args["namesrv"] = endpoints.namesrv
    else:
        args["endpoints"] = endpoints.grpc
    return args


@dataclass
class Running:
    spec: WorkerSpec
    process: subprocess.Popen[str]
    journal: JournalReader
    log: IO[str]


class Workload:
    """The running workers; :meth:`collect` gathers what their journals gained."""

    def __init__(self, specs: list[WorkerSpec], endpoints: Endpoints, directory: Path, t0: float) -> None:
        self.specs = specs
        self.endpoints = endpoints
        self.directory = directory
        self.t0 = t0
        self.running: list[Running] = []
        self.attempts: list[SendAttempt] = []
        self.deliveries: list[Delivery] = []
        self._collecting = threading.Lock()
        self.told_to_stop: set[str] = set()
        # workers whose own shutdown failed once told to stop (the stock C++ client's can hang or
        # crash): reported, not a broken promise; their journals were flushed before it
        self.unclean: dict[str, str] = {}

    def start(self, role: str) -> None:
        """Start the workers of ``role`` and wait until each says it is ready (blocking)."""
        started = []
        for spec in (s for s in self.specs if s.role == role):
            journal = self.directory / f"{spec.name}.jsonl"
            log = open(self.directory / f"{spec.name}.log", "w")  # noqa: SIM115 - closed in stop()
            env = client_env() if spec.client == "rmq5" else None
            argv = [sys.executable, "-m", spec.module, json.dumps(worker_args(spec, self.endpoints, journal, self.t0))]
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                       env=env, cwd=self.directory)
            run = Running(spec, process, JournalReader(journal), log)
            self.running.append(run)
            started.append(run)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for run in started:
            assert run.process.stdout is not None
            line = run.process.stdout.readline().strip()  # ready, or "" when it died
            if line != "ready" or time.monotonic() > deadline:
                raise WorkerFailed(f"{run.spec.name} did not start: {tail(self.directory / f'{run.spec.name}.log')}")

    def collect(self) -> int:
        """Read what the journals gained; the number of rows read. One caller at a time (a
        lock: the drill's loop and the thread stopping the workers both collect), else two
        reads from the same place would record every row twice."""
        with self._collecting:
            return self._collect()

    def _collect(self) -> int:
        read = 0
        for run in self.running:
            for row in run.journal.read_new():
                read += 1
                if row[0] == "a":
                    _, key, started, ended, outcome, queue, offset, why, producer = row
                    self.attempts.append(SendAttempt(key, started, ended, outcome, queue, offset, why, producer))
                else:
                    _, key, queue, offset, at, consumer, ordered = row
                    self.deliveries.append(Delivery(key, queue, offset, at, consumer, bool(ordered)))
        return read

    def stop(self, role: str) -> None:
        """Tell the workers of ``role`` to stop and wait for them (blocking); a worker that
        does not stop in time is killed."""
        runs = [r for r in self.running if r.spec.role == role and r.process.poll() is None]
        for run in runs:
            self.told_to_stop.add(run.spec.name)
            try:
                assert run.process.stdin is not None
                run.process.stdin.write("stop\n")
                run.process.stdin.flush()
            except OSError:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for run in runs:
            try:
                run.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                run.process.kill()
                run.process.wait()
                self.unclean[run.spec.name] = f"did not stop within {STOP_TIMEOUT_S:.0f} s: killed"
            else:
                if run.process.returncode != 0:
                    self.unclean[run.spec.name] = f"exit {run.process.returncode} while stopping"
        self.collect()

    def close(self) -> None:
        for run in self.running:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()
            run.log.close()

    def pids(self) -> dict[str, int]:
        return {r.spec.name: r.process.pid for r in self.running if r.process.poll() is None}

    def died(self) -> list[str]:
        """Workers that ended on their own before they were told to stop, with the end of their
        log: the workload lost a client in the middle of the drill."""
        return [f"{r.spec.name} (exit {r.process.returncode}): {tail(self.directory / f'{r.spec.name}.log')}"
                for r in self.running if r.spec.name not in self.told_to_stop and r.process.poll() is not None]


class WorkerFailed(RuntimeError):
    pass


def tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(no output)"
    except OSError:
        return "(no log)"
