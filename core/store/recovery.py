"""Recovery of a classic store (the :class:`core.store.interfaces.Recovery` of a CommitLog):
scan the CommitLog from the checkpoint and cut a torn tail, drop queue and index entries past
the end, then dispatch every record from the checkpoint's dispatch offset on (docs/store.md,
"Recovery"). Runs before the store serves (blocking)."""

from __future__ import annotations

from core.errors import StoreCorruptError, StoreError
from core.store.checkpoint import read_checkpoint
from core.store.dispatch import DispatchRequest
from core.store.dispatcher import Dispatcher
from core.store.files import StoreFiles
from core.store.layout import ABORT_FILE, CHECKPOINT_FILE, holds_unsealed_raft
from core.store.store_types import RecoveryReport
from formats.errors import RecordError
from formats.record import decode_record, is_blank


class CommitLogRecovery:
    """Recovers the CommitLog under ``files`` and catches ``dispatcher`` up with it."""

    def __init__(self, files: StoreFiles, dispatcher: Dispatcher) -> None:
        self.files = files
        self.dispatcher = dispatcher

    def recover(self) -> RecoveryReport:
        files, root = self.files, self.files.root
        root.mkdir(parents=True, exist_ok=True)
        clean = not (root / ABORT_FILE).exists()
        checkpoint = read_checkpoint(root / CHECKPOINT_FILE)
        floor = files.log_floor()
        if holds_unsealed_raft(root):
            raise StoreError(f"{root} holds raft (DLedger) entries that were never sealed: start it with "
                             "replication.mode = \"dledger\", or switch the group with `mqctl restart` after "
                             "`mqctl config set replication.mode ...`")
        commitlog = files.commitlog
        log_recovery = commitlog.recover(checkpoint, cut_damage=files.config.recover_cut_damage, floor=floor or 0)
        end = log_recovery.end
        files.recover_derived(end)
        start = max(commitlog.min_offset, floor or 0)
        if checkpoint is not None:
            start = max(start, min(checkpoint.dispatched_offset, end))
        self.dispatcher.reput_offset = start
        return RecoveryReport(clean, log_recovery, self._catch_up())

    def _catch_up(self) -> int:
        """Dispatch every record between the reput cursor and the end of the log."""
        count = 0
        log_ = self.files.commitlog
        dispatcher = self.dispatcher
        delay_levels_ms = dispatcher.delay_levels_ms
        while dispatcher.reput_offset < log_.write_offset:
            reput = dispatcher.reput_offset
            seg = log_.segment_of(reput)
            if seg is None:
                raise StoreCorruptError("reput cursor outside the log", offset=reput)
            pos = reput - seg.start
            if is_blank(seg.view, pos):
                dispatcher.reput_offset = seg.end
                continue
            try:
                rec = decode_record(seg.view, pos, limit=min(seg.size, log_.write_offset - seg.start),
                                    check_crc=False, with_body=False)
            except RecordError as exc:
                raise StoreCorruptError(f"cannot dispatch: {exc.reason}", seg.path, reput) from exc
            dispatcher.dispatch_found(DispatchRequest.of(rec, reput, rec.total_size, delay_levels_ms=delay_levels_ms))
            dispatcher.reput_offset = reput + rec.total_size
            count += 1
        return count
