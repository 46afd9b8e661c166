"""The folders the store makes from names that reach it from outside: a ConsumeQueue's
``consumequeue/<topic>/<queueId>``. The broker checks every name where it enters; the store
checks again, whatever the caller, so no name can make it open a path outside its root."""

from __future__ import annotations

from pathlib import Path

from core.errors import UnsafePathError
from core.topic_names import shown, topic_problem

QUEUE_ID_MAX = (1 << 31) - 1  # a Java int, as on the wire


def queue_dir(root: Path, topic: str, queue_id: int) -> Path:
    """The folder of ``topic``'s queue ``queue_id`` under ``root``; raises
    :class:`UnsafePathError` for a name that is not a valid topic or a queue id out of range,
    and for a folder that would resolve outside ``root`` (a symlink planted in the store)."""
    problem = topic_problem(topic)
    if problem is not None:
        raise UnsafePathError(f"no ConsumeQueue for this name: {problem}")
    if not 0 <= queue_id <= QUEUE_ID_MAX:
        raise UnsafePathError(f"no ConsumeQueue for queue id {queue_id} of topic {shown(topic)}")
    return inside(root, root / topic / str(queue_id))


def inside(root: Path, path: Path) -> Path:
    """``path`` if it resolves inside ``root`` (following symlinks), else :class:`UnsafePathError`."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise UnsafePathError(f"{shown(str(path))} resolves outside the store's folder {root}")
    return path
