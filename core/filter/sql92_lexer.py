"""Tokens of RocketMQ's SQL92 selector (its SelectorParser.jj), longest match first.

```
keywords (any case)  NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH ENDSWITH
identifier           [A-Za-z_$][A-Za-z0-9_$]*          (a property name; a keyword wins a tie)
integer              0 | [1-9][0-9]*[lL]?
decimal              5.  5.5  .5  5E10  5.5e-3         (no suffix)
string               'it''s'                           ('' inside is one quote)
operators            = <> > >= < <= ( ) , + -
blanks, comments     space \t \n \r \f,  -- to the end of the line,  /* ... */
```

RocketMQ needs a line break after a ``--`` comment (without one, ``--`` lexes as two minus
signs); here a comment may also end the text.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from core.errors import SelectorSyntaxError


class Kind(enum.Enum):
    KEYWORD = "keyword"
    IDENT = "identifier"
    INTEGER = "integer"
    DECIMAL = "decimal"
    STRING = "string"
    OP = "operator"
    END = "end of the expression"


KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # keywords upper-cased; strings decoded; others as written
    position: int  # 0-based index of its first character
    end: int  # index just past its last character

    def shown(self) -> str:
        if self.kind is Kind.END:
            return "the end of the expression"
        if self.kind is Kind.STRING:
            return "'" + self.text.replace("'", "''")[:40] + "'"
        return repr(self.text[:40])


_BLANK = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r|\Z)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"(?P<decimal>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
                     r"|[0-9]+[eE][+-]?[0-9]+)|(?P<integer>0|[1-9][0-9]*[lL]?)")
_STRING = re.compile(r"'((?:''|[^'])*)'")
_OPERATORS = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, ending with an END token; raises SelectorSyntaxError."""
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while True:
        blank = _BLANK.match(text, pos)
        while blank and blank.end() > pos:
            pos = blank.end()
            blank = _BLANK.match(text, pos)
        if pos >= end:
            tokens.append(Token(Kind.END, "", end, end))
            return tokens
        tokens.append(token := _token_at(text, pos))
        pos = token.end


def _token_at(text: str, pos: int) -> Token:
    char = text[pos]
    if char == "'":
        string = _STRING.match(text, pos)
        if string is None:
            raise SelectorSyntaxError("a string literal is not closed with '", pos)
        return Token(Kind.STRING, string.group(1).replace("''", "'"), pos, string.end())
    if char.isascii() and (char.isdigit() or char == "."):
        number = _NUMBER.match(text, pos)
        if number is not None:
            kind = Kind.DECIMAL if number.group("decimal") else Kind.INTEGER
            return Token(kind, number.group(), pos, number.end())
    word = _WORD.match(text, pos)
    if word is not None:
        upper = word.group().upper()
        if upper in KEYWORDS:
            return Token(Kind.KEYWORD, upper, pos, word.end())
        return Token(Kind.IDENT, word.group(), pos, word.end())
    if text.startswith("/*", pos):
        raise SelectorSyntaxError("a /* comment is not closed with */", pos)
    for op in _OPERATORS:
        if text.startswith(op, pos):
            return Token(Kind.OP, op, pos, pos + len(op))
    raise SelectorSyntaxError(f"unexpected character {char!r}", pos)
