"""The properties of a run of records, read from their texts (:mod:`formats.properties`)
without decoding each into a dict: what dispatch needs of a batch, a tag and index keys.

Every text of a run ends with the pair separator ``\\x02`` (or is empty), so in the run text,
``\\x02`` + the texts joined, a property name begins a pair exactly where ``\\x02NAME\\x01``
occurs: one search answers for the whole run whether any record names it.

```
 run text  02 | U N I Q _ K E Y 01 a 1 02 | (empty) | T A G S 01 x 02 U N I Q _ K E Y 01 b 2 02
              ^ record 0                   ^ record 1 ^ record 2
```
Lookups give what :func:`formats.properties.decode_properties` would: the last pair of a name
wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import repeat

from formats.tags import tags_code

TAGS_PAIR = b"\x02TAGS\x01"
KEYS_PAIR = b"\x02KEYS\x01"
UNIQ_KEY_PAIR = b"\x02UNIQ_KEY\x01"
_UNIQ_VALUES = re.compile(b"\x02UNIQ_KEY\x01([^\x02]*)")
_TAGS_VALUES = re.compile(b"\x02TAGS\x01([^\x02]*)")


def run_text(texts: Sequence[bytes]) -> bytes | None:
    """The run text of ``texts``, each empty or ending with ``\x02`` (the caller checked), or
    ``None`` when they are not UTF-8 (such records are read one by one)."""
    text = b"\x02" + b"".join(texts)
    if not text.isascii():
        try:
            text.decode()
        except UnicodeDecodeError:
            return None
    return text


def tags_codes(texts: Sequence[bytes], text: bytes) -> list[int] | None:
    """Each record's ConsumeQueue tagsCode; ``None`` when no record has a tag (all 0)."""
    if TAGS_PAIR not in text:
        return None
    tags = _each_once(texts, text, TAGS_PAIR, _TAGS_VALUES)
    if tags is None:
        return [tags_code(value(t, TAGS_PAIR)) for t in texts]
    codes = {tag: tags_code(tag.decode()) for tag in set(tags)}  # a batch's records mostly share a tag
    return [codes[tag] for tag in tags]


def one_key_each(texts: Sequence[bytes], text: bytes) -> list[bytes] | None:
    """Each record's only index key, when every record has a UNIQ_KEY and none has KEYS (what
    producers send); else ``None`` (:func:`index_keys` then)."""
    if KEYS_PAIR in text:
        return None
    values = _each_once(texts, text, UNIQ_KEY_PAIR, _UNIQ_VALUES)
    return values if values is not None and b"" not in values else None


def _each_once(texts: Sequence[bytes], text: bytes, pair: bytes, values: re.Pattern[bytes]) -> list[bytes] | None:
    """Each record's value of ``pair``, when every record names it exactly once; else None.
    When each text holds the name once and the run text holds as many pair starts of it, the
    values found in order are the records' own."""
    count = len(texts)
    if text.count(pair) != count or list(map(bytes.count, texts, repeat(pair[1:]))).count(1) != count:
        return None
    return values.findall(text)


def index_keys(texts: Sequence[bytes], text: bytes) -> list[list[bytes]]:
    """Each record's index keys as :func:`formats.properties.index_keys` gives them: its KEYS
    split on whitespace, then its UNIQ_KEY (UTF-8 bytes)."""
    has_keys, has_uniq = KEYS_PAIR in text, UNIQ_KEY_PAIR in text
    out: list[list[bytes]] = []
    for t in texts:
        raw = value(t, KEYS_PAIR) if has_keys else None
        keys = [key.encode() for key in raw.split()] if raw else []
        uniq = bytes_value(t, UNIQ_KEY_PAIR) if has_uniq else None
        if uniq:
            keys.append(uniq)
        out.append(keys)
    return out


def bytes_value(text: bytes, pair: bytes) -> bytes | None:
    """The value of the last pair named by ``pair`` (``\\x02NAME\\x01``) in one record's text."""
    at = text.rfind(pair)
    if at >= 0:
        at += len(pair)
    elif text.startswith(pair[1:]):
        at = len(pair) - 1
    else:
        return None
    return text[at : text.find(b"\x02", at)]


def value(text: bytes, pair: bytes) -> str | None:
    raw = bytes_value(text, pair)
    return None if raw is None else raw.decode()
