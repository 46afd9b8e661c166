"""A run's properties read from their texts together give what decoding each record's
properties gives: tags codes and index keys, for any texts (names repeated, missing, empty
values, names that contain another)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from formats import property_texts
from formats.properties import decode_properties, index_keys
from formats.tags import tags_code

NAMES = ["TAGS", "UNIQ_KEY", "KEYS", "x", "XTAGS", "TAGSX", "UNIQ_KEYS"]
values = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=6)
pairs = st.lists(st.tuples(st.sampled_from(NAMES), values), max_size=4)
# a text as stored: pairs, each NAME \x01 VALUE \x02 (a name may come twice: the last wins)
texts = st.lists(pairs.map(lambda ps: "".join(f"{k}\x01{v}\x02" for k, v in ps).encode()), min_size=1, max_size=8)
shared = st.sampled_from(["TagA", "TagB"]).map(lambda tag: f"TAGS\x01{tag}\x02UNIQ_KEY\x01".encode())


def _check(run: list[bytes]) -> None:
    text = property_texts.run_text(run)
    assert text is not None
    decoded = [decode_properties(t.decode()) for t in run]
    codes = property_texts.tags_codes(run, text)
    expected = [tags_code(props.get("TAGS")) for props in decoded]
    assert (codes if codes is not None else [0] * len(run)) == expected
    keys = [[k.encode() for k in index_keys(props)] for props in decoded]
    assert property_texts.index_keys(run, text) == keys
    one = property_texts.one_key_each(run, text)
    if one is not None:
        assert [[k] for k in one] == keys


@given(texts)
def test_any_texts_read_together_match_each_decoded(run: list[bytes]) -> None:
    _check(run)


@given(st.lists(st.tuples(shared, st.integers(0, 99)), min_size=1, max_size=8))
def test_a_producers_batch_takes_the_one_search_path_and_matches(items) -> None:
    run = [head + b"K%d\x02" % n for head, n in items]
    text = property_texts.run_text(run)
    assert property_texts._each_once(run, text, property_texts.TAGS_PAIR, property_texts._TAGS_VALUES) is not None
    _check(run)
