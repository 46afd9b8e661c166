from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.stores import broker_store, diverged_copy, encoder_store


@pytest.fixture(scope="session")
def analysis_stores(tmp_path_factory) -> dict[str, Path]:
    """Node directories: ``broker`` (our store), ``raft`` (the independent encoder's, DLedger
    layout, first segment archived) and ``raft-diverged`` (a differing record, a shorter log)."""
    root = tmp_path_factory.mktemp("stores")
    broker_store(root / "broker")
    encoder_store(root / "raft")
    diverged_copy(root / "raft", root / "raft-diverged", changed_offset=DIVERGED_AT, cut_from=CUT_FROM)
    return {"broker": root / "broker", "raft": root / "raft", "raft-diverged": root / "raft-diverged"}


@pytest.fixture(scope="session")
def logs(analysis_stores) -> dict[str, Path]:
    """The ``broker`` and ``raft`` stores' CommitLog directories."""
    return {kind: analysis_stores[kind] / "commitlog" for kind in ("broker", "raft")}


# record starts in the raft store's later segments (checked by the divergence test)
DIVERGED_AT = 32768 + 48
CUT_FROM = 65536 + 48


@pytest.fixture(scope="session")
def spark():
    from spark.session import start_session

    # small tables: two shuffle partitions instead of eight save a task wave per report
    session = start_session("local[2]", "mqctl tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
