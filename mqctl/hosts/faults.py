"""Kernel-level faults between the hosts of a lab (mqctl/hosts/lab.py), each inside the
namespaces it concerns:

| fault | how |
|---|---|
| partition a -> b (one way), a <-> b, groups, bridge | nftables: ``ip daddr`` drops in the sender's output chain |
| isolate a host | nftables: everything but its loopback dropped, both ways |
| random loss of N% | nftables: ``numgen random mod 100 < N drop``, input and output |
| rate limit | tc tbf on the host's link (egress), inside its namespace |

All rules live in one table of the host's own namespace (``inet mqlab``), so :meth:`Faults.heal`
is a flush, and a destroyed lab takes them with it. The kernel here has no netem: delay,
reordering and duplication go through userspace (docs/reliability.md).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

from mqctl.hosts.lab import Lab, LabError, run_ip

TABLE = "mqlab"
_CHAINS = (f"""table inet {TABLE} {{
  chain input {{ type filter hook input priority 0; policy accept; }}
  chain output {{ type filter hook output priority 0; policy accept; }}
}}
""")


def nft_missing() -> str | None:
    """Why nftables faults cannot be made here (None: they can)."""
    return None if shutil.which("nft") else "nftables' nft command is not installed (make install adds it as root)"


class Faults:
    """The faults of one lab; every method applies at once."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self._ready: set[str] = set()
        self._rated: set[str] = set()

    def partition(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Packets from ``a`` to ``b`` are dropped (and from ``b`` to ``a`` unless one way)."""
        self._drop_to(a, [b])
        if not one_way:
            self._drop_to(b, [a])

    def split(self, groups: Iterable[Iterable[str]]) -> None:
        """Hosts in different groups no longer reach each other (majority/minority, halves);
        a host in two groups reaches both (a bridge)."""
        sides = [set(g) for g in groups]
        for i, side in enumerate(sides):
            others = set().union(*(s for j, s in enumerate(sides) if j != i)) - side
            for host in side:
                unreachable = [h for h in others if not any(host in s and h in s for s in sides)]
                self._drop_to(host, unreachable)

    def isolate(self, host: str) -> None:
        """``host`` reaches no other host and none reaches it."""
        self._nft(host, f"add rule inet {TABLE} output oifname != lo drop")
        self._nft(host, f"add rule inet {TABLE} input iifname != lo drop")

    def loss(self, host: str, percent: int) -> None:
        """Each packet into or out of ``host`` is dropped with ``percent`` % chance (1..99;
        all of them: :meth:`isolate`)."""
        if not 0 < percent < 100:
            raise LabError(f"loss must be 1..99 percent, not {percent} (100: isolate the host)")
        for chain in ("input", "output"):
            name = "iifname" if chain == "input" else "oifname"
            self._nft(host, f"add rule inet {TABLE} {chain} {name} != lo numgen random mod 100 < {percent} drop")

    def rate(self, host: str, kbit: int) -> None:
        """What ``host`` sends leaves at ``kbit`` kbit/s at most (tc tbf)."""
        link = self.lab.host(host).link
        ns = self.lab.host(host).namespace
        burst = max(16, kbit // 8)  # a burst of an eighth of a second's bytes, in KiB (tbf wants >= MTU)
        run_ip("netns", "exec", ns, "tc", "qdisc", "replace", "dev", link, "root", "tbf", "rate", f"{kbit}kbit",
               "burst", f"{burst}kb", "latency", "400ms")
        self._rated.add(host)

    def heal(self, host: str | None = None) -> None:
        """Every fault of ``host`` (of every host when None) gone."""
        for name in ([host] if host else list(self.lab.hosts)):
            if name in self._ready:
                self._nft(name, f"flush table inet {TABLE}")
            if name in self._rated:
                h = self.lab.host(name)
                subprocess.run(["ip", "netns", "exec", h.namespace, "tc", "qdisc", "del", "dev", h.link, "root"],
                               capture_output=True, check=False, timeout=30)
                self._rated.discard(name)

    def _drop_to(self, host: str, targets: Iterable[str]) -> None:
        for target in targets:
            self._nft(host, f"add rule inet {TABLE} output ip daddr {self.lab.host(target).address} drop")

    def _nft(self, host: str, command: str) -> None:
        missing = nft_missing()
        if missing:
            raise LabError(missing)
        ns = self.lab.host(host).namespace
        if host not in self._ready:
            self._run(ns, ["nft", "-f", "-"], _CHAINS)
            self._ready.add(host)
        self._run(ns, ["nft", *command.split()], None)

    @staticmethod
    def _run(ns: str, argv: list[str], stdin: str | None) -> None:
        done = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True,
                              timeout=30, check=False)
        if done.returncode != 0:
            raise LabError(f"{' '.join(argv)} in {ns}: {done.stderr.strip() or f'exit {done.returncode}'}")
