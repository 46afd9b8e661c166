"""Shared fixtures: small store geometry so tests exercise segment rolls and file limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.config import StoreConfig

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_store_config() -> StoreConfig:
    return StoreConfig(
        segment_size_bytes=64 * 1024,
        cq_entries_per_file=64,
        index_slots=97,
        index_entries=200,
        flush_interval_ms=50,
        checkpoint_interval_ms=100,
        retention_check_interval_ms=100,
        disk_check_interval_ms=100,
        prefault_window_bytes=32 * 1024,
    )


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child processes running our code from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
