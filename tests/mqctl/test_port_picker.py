"""PortPicker: ports for clusters made on the spot. One picker never hands a port out twice;
pickers of side-by-side processes (test workers) take disjoint shares of the range."""

from __future__ import annotations

import pytest

from mqctl.nodes.port_holders import PortPicker


def test_one_picker_never_hands_out_a_port_twice() -> None:
    picker = PortPicker()
    ports = [picker.take(span=3) for _ in range(200)]
    spans = [set(range(p, p + 3)) for p in ports]
    assert len(set().union(*spans)) == 3 * len(ports)


def test_pickers_of_different_shares_never_meet() -> None:
    taken = []
    for picker in (PortPicker(0, 3), PortPicker(1, 3), PortPicker(2, 3)):
        firsts = [picker.take() for _ in range(100)]
        taken.append({p for first in firsts for p in (first, first + 1)})
    assert max(taken[0]) < min(taken[1]) and max(taken[1]) < min(taken[2])


def test_a_share_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError):
        PortPicker(3, 3)
