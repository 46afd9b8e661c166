"""A store's epoch file on disk (core/store/epoch_checkpoint.py): kept with a .bak, read from
the .bak when damaged, cut with the log, refusing epochs that go back."""

from __future__ import annotations

import pytest

from core.errors import StoreCorruptError
from core.store.epoch_checkpoint import EPOCH_FILE, EpochCheckpoint
from formats.epoch_file import EpochEntry


def test_epochs_survive_a_reopen_and_the_previous_copy_is_the_bak(tmp_path):
    epochs = EpochCheckpoint(tmp_path)
    assert epochs.entries == [] and epochs.last_epoch == 0
    epochs.begin(1, 0)
    epochs.begin(3, 4096)
    assert EpochCheckpoint(tmp_path).entries == [EpochEntry(1, 0), EpochEntry(3, 4096)]
    assert (tmp_path / EPOCH_FILE).read_bytes().startswith(b"2\n")
    assert (tmp_path / (EPOCH_FILE + ".bak")).read_bytes().endswith(b"\n1-0\n")


def test_a_damaged_file_is_read_from_its_bak_and_both_damaged_is_an_error(tmp_path):
    epochs = EpochCheckpoint(tmp_path)
    epochs.begin(1, 0)
    epochs.begin(2, 100)
    (tmp_path / EPOCH_FILE).write_bytes(b"2\n12345\n1-0\n2-999\n")
    assert EpochCheckpoint(tmp_path).entries == [EpochEntry(1, 0)]  # the copy before the last change
    (tmp_path / (EPOCH_FILE + ".bak")).write_bytes(b"garbage")
    with pytest.raises(StoreCorruptError):
        EpochCheckpoint(tmp_path)


def test_a_cut_log_cuts_the_epochs_that_begin_at_or_past_it(tmp_path):
    epochs = EpochCheckpoint(tmp_path)
    for epoch, start in ((1, 0), (2, 500), (4, 900)):
        epochs.begin(epoch, start)
    epochs.truncate(900)
    assert epochs.entries == [EpochEntry(1, 0), EpochEntry(2, 500)]
    epochs.truncate(700)  # inside epoch 2: it stays
    assert EpochCheckpoint(tmp_path).entries == [EpochEntry(1, 0), EpochEntry(2, 500)]


def test_an_epoch_that_goes_back_is_refused(tmp_path):
    epochs = EpochCheckpoint(tmp_path)
    epochs.begin(2, 100)
    with pytest.raises(ValueError):
        epochs.begin(2, 200)
    with pytest.raises(ValueError):
        epochs.begin(3, 50)
