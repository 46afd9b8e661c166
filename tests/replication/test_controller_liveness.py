"""When the controller counts a broker gone (replication/controller/liveness.py): a dropped
connection that stays dropped, silence past the timeout, or a late master whose every slave lost
it; never a pause that keeps the connections."""

from __future__ import annotations

from replication.controller.liveness import Liveness, LivenessSettings

S = LivenessSettings(heartbeat_interval_ms=200, heartbeat_timeout_ms=3000, drop_grace_ms=150)


def group(now: int = 0) -> Liveness:
    live = Liveness(S)
    for broker_id in (0, 1, 2):
        live.beat("g", broker_id, now, epoch=1, max_offset=100 * broker_id)
    return live


def test_a_killed_broker_is_gone_once_its_dropped_connection_stays_dropped():
    live = group()
    live.dropped("g", 0, 1000)
    assert live.alive("g", 0, 1100)  # within the grace: a reconnect would keep it
    assert not live.alive("g", 0, 1150)


def test_a_broker_that_reconnects_within_the_grace_stays():
    live = group()
    live.dropped("g", 0, 1000)
    live.beat("g", 0, 1080, epoch=1, max_offset=0)
    assert live.alive("g", 0, 1500)


def test_a_pause_of_300_ms_is_not_death():
    live = group()
    for broker_id in (1, 2):  # the slaves go on beating, their links up
        live.beat("g", broker_id, 600, epoch=1, max_offset=0)
    assert live.alive("g", 0, 600, followers=frozenset({1, 2}))  # 600 ms since the master's beat


def test_silence_past_the_timeout_is_death():
    live = group()
    assert live.alive("g", 0, 2999)
    assert not live.alive("g", 0, 3000)


def test_a_late_master_every_slave_lost_is_gone_before_the_timeout():
    live = group()
    for broker_id in (1, 2):
        live.beat("g", broker_id, 450, epoch=1, max_offset=0, master_link_down_since_ms=420)
    assert not live.alive("g", 0, 450, followers=frozenset({1, 2}))
    assert live.alive("g", 0, 350, followers=frozenset({1, 2}))  # not late by two intervals yet
    live.beat("g", 2, 460, epoch=1, max_offset=0)  # one slave still has its link: not gone
    assert live.alive("g", 0, 470, followers=frozenset({1, 2}))


def test_candidates_carry_what_the_heartbeats_said():
    live = group()
    live.dropped("g", 0, 0)
    candidates = live.candidates("g", 500, master_id=0, followers=frozenset({1, 2}))
    assert {b: (c.alive, c.max_offset) for b, c in candidates.items()} == {0: (False, 0), 1: (True, 100), 2: (True, 200)}
