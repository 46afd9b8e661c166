"""Epoch files (formats/epoch_file.py) and where a returning replica's log agrees with its new
master's (replication/controller/epochs.py)."""

from __future__ import annotations

import pytest

from formats.epoch_file import EpochEntry, EpochFileError, decode_epoch_file, encode_epoch_file
from replication.controller.epochs import consistent_point


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


def test_the_epoch_file_is_rocketmqs_text_with_its_crc():
    data = encode_epoch_file(entries((7, 7000), (8, 8000)))
    assert data == b"2\n773307083\n7-7000\n8-8000\n"  # RocketMQ's CheckpointFile example
    assert decode_epoch_file(data) == entries((7, 7000), (8, 8000))
    assert decode_epoch_file(b"1\n0\n3-0\n") == entries((3, 0))  # CRC 0: not checked


@pytest.mark.parametrize("damaged", [
    b"2\n773307083\n7-7000\n8-8001\n",  # a changed offset: CRC
    b"3\n0\n7-7000\n8-8000\n",  # count
    b"2\n0\n8-7000\n7-8000\n",  # epochs going back
    b"2\n0\n7-7000\n8-6000\n",  # starts going back
    b"1\n0\n7_7000\n",
    b"x\n0\n",
    b"99999999999\n0\n",
    b"\xff\n",
])
def test_a_damaged_epoch_file_is_refused(damaged):
    with pytest.raises(EpochFileError):
        decode_epoch_file(damaged)


def test_a_replica_cuts_where_the_newest_shared_epoch_ends_on_the_shorter_side():
    master = entries((1, 0), (2, 500), (4, 900))
    # a slave of epoch 2 that reached 800: the master's epoch 2 went on to 900, all shared
    assert consistent_point(entries((1, 0), (2, 500)), 800, master, 1200) == 800
    # the old master of epoch 3 (never seen by the new one) wrote past the shared epoch 2
    assert consistent_point(entries((1, 0), (2, 500), (3, 700)), 1000, master, 1200) == 700
    # a replica that had epoch 4 too is cut to the shorter end
    assert consistent_point(entries((1, 0), (2, 500), (4, 900)), 1500, master, 1200) == 1200


def test_an_epoch_that_began_elsewhere_is_not_shared():
    # epoch 2 began at 600 here and at 500 there: they last agreed in epoch 1, which ended at 500
    assert consistent_point(entries((1, 0), (2, 600)), 900, entries((1, 0), (2, 500)), 900) == 500


def test_no_shared_epoch_and_no_epochs_at_all():
    assert consistent_point(entries((5, 0)), 100, entries((6, 0)), 100) is None
    assert consistent_point([], 4096, entries((1, 0)), 100) == 4096


def test_an_empty_log_agrees_with_any_master():
    # a master killed before anything was written, back as a slave of one that took over empty
    assert consistent_point(entries((1, 0)), 0, entries((2, 0)), 0) == 0
    assert consistent_point(entries((1, 0)), 0, entries((2, 0)), 500) == 0
