"""Where the official RocketMQ 5 Python client lives, and the environment its processes run in.

``make install`` puts rocketmq-python-client in a folder of its own: its package is named
``rocketmq``, as the stock C++ client's is, so it stays out of the venv's site-packages and is
first on PYTHONPATH only in the child processes that run it (``mqctl bench grpc``, the chaos
drills' 5.x workers, the interop tests).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mqctl.common.errors import CliError

REPO = Path(__file__).resolve().parents[2]


def client_path() -> Path:
    return Path(sys.prefix) / "clients" / "rocketmq5"


def client_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (else this process's) with the 5.x client first on PYTHONPATH."""
    folder = client_path()
    if not (folder / "rocketmq" / "v5").is_dir():
        raise CliError(f"the RocketMQ 5 client is not installed in {folder}: run `make install`")
    return dict(os.environ if env is None else env, PYTHONPATH=f"{folder}{os.pathsep}{REPO}")
