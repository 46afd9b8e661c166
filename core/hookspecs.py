"""Every hook of mqctl, with its contract. Hook names start with ``mq_``.

Plugins implement them with the exported :data:`hookimpl` marker. Core code never calls
``pm.hook`` directly: it goes through :class:`core.plugin_manager.PluginHost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from core.store.dispatch import DispatchRequest

PROJECT = "mqctl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mq_records_dispatched(store_dir: Path, requests: Sequence[DispatchRequest]) -> None:
    """Records became visible to consumers.

    Called by the store of ``store_dir`` on the event loop after ``requests`` were written to
    their ConsumeQueues and the key index, in CommitLog order. Long polling and metrics listen
    here. Must be cheap and must not block: it runs on every append. Return value ignored.
    """


@hookspec
def mq_segment_retired(segment: Path, archive: Path | None) -> None:
    """A CommitLog segment left the store.

    Called by the store's retention task after ``segment`` was deleted because it outlived the
    retention time; ``archive`` is the ``.zst`` copy when archiving is on, else ``None``.
    Return value ignored.
    """
