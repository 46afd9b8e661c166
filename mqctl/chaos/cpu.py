"""CPU spent by each process of a drill over its load (from /proc), so a drill's report says what
each node and client cost per acknowledged message beside the throughput."""

from __future__ import annotations

from mqctl.nodes.processes import cpu_seconds


class CpuMeter:
    """CPU seconds per named process between :meth:`begin` and :meth:`end`. A process that was
    restarted in between (a killed node) counts its new life only."""

    def __init__(self) -> None:
        self._at_begin: dict[str, tuple[int, float]] = {}
        self.spent: dict[str, float] = {}

    def begin(self, pids: dict[str, int]) -> None:
        self._at_begin = {name: (pid, cpu) for name, pid in pids.items() if (cpu := cpu_seconds(pid)) is not None}

    def end(self, pids: dict[str, int]) -> None:
        for name, pid in pids.items():
            cpu = cpu_seconds(pid)
            if cpu is None:
                continue
            before_pid, before = self._at_begin.get(name, (pid, 0.0))
            self.spent[name] = round(cpu - before if before_pid == pid else cpu, 2)

    def per_message(self, messages: int) -> dict[str, dict[str, float]]:
        """Each process's CPU seconds and microseconds per message (``messages`` acknowledged)."""
        return {name: {"cpu_s": s, "us_per_ack": round(s * 1e6 / messages, 1) if messages else 0.0}
                for name, s in sorted(self.spent.items())}
