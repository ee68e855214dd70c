"""Code <-> words: how the compact syntax writes Python text as TinyAgent's words, and reads it back.

Code words are what `Read` shows: the tokens of `CODE_TOKEN` (the rules of `ops.compact_source`,
plus `<file>.py` names and a few multi-character operators), `<nl>` between lines, and at a
line's start one `<indent>` per 4 spaces (`<sp>` per leftover space, `<tab>` per tab).
`words_to_code` joins them back with fixed PEP 8 spacing (`join_code_words`), so the words
`<indent> return load < cap` are exactly the text `    return load < cap`, and `return min ( a ,
b )` is `return min(a, b)`. The Edit tool still does exact string replacement on the file: the
words only say which string.

A file view is exact (`code_to_words_exact`): a string literal is one word, the literal's text
with `%` and whitespace escaped (`"a%20b"` is `"a b"`), and a line that the PEP 8 spacing would not
rebuild (an open triple quote, a comment after two spaces, trailing blanks) is one such word
after its indentation, so the words of any line, copied into an Edit, give back exactly that line.
The words that are call syntax inside an Edit, `new` and `;`, are written escaped there (`%6Eew`,
`%3B`), so that a name `new` or a `;` in the code can be copied too.
Program output is shown readably instead (`code_to_words`: CODE_TOKEN words only), which the
words do not always rebuild.
"""

from __future__ import annotations

import keyword
import re

CODE_TOKEN = re.compile(
    r"\w+\.py\b|\d+|\w+|\*\*=|//=|>>=|<<=|\*\*|//|<=|>=|==|!=|\+=|-=|\*=|/=|%=|&=|\|=|\^=|->|:=|<<|>>|\S")
NEWLINE, INDENT, SPACE, TAB = "<nl>", "<indent>", "<sp>", "<tab>"
_LEAD_TEXT = {INDENT: "    ", SPACE: " ", TAB: "\t"}
LAYOUT_WORDS = (NEWLINE, INDENT, SPACE, TAB)

_NO_SPACE_BEFORE = frozenset(") ] } , : . ;".split())
_NO_SPACE_AFTER = frozenset("( [ { . ~".split())
_MAYBE_UNARY = frozenset({"-", "+", "*", "**", "@"})
_VALUE_KEYWORDS = frozenset({"True", "False", "None"})


def _ends_value(word: str) -> bool:
    """A word after which `(`/`[` is a call/subscript and `-` is binary."""
    if word in (")", "]", "}") or word in _VALUE_KEYWORDS or is_string_word(word):
        return True
    return (word[0].isalnum() or word[0] == "_") and not keyword.iskeyword(word)


# ---- text words: a string literal, or a line the spacing rules do not rebuild, as one escaped word

_ESCAPED = re.compile(r"%(?:u([0-9A-F]{4})|([0-9A-F]{2}))")
_STRING_PREFIXES = frozenset({"", "r", "u", "f", "b", "br", "rb", "fr", "rf"})  # lower-cased
_QUOTES = "'\""


def escape_text(text: str) -> str:
    """text as one word: `%` and each whitespace character (what str.split splits at) become `%XX`
    (`%uXXXX` past 0xFF), so `"a b"` is `"a%20b"`. No CODE_TOKEN word holds `%` before two hex digits,
    so unescape_word leaves every other word as it is."""
    return "".join(c if c != "%" and not c.isspace() else f"%{ord(c):02X}" if ord(c) < 0x100 else f"%u{ord(c):04X}"
                   for c in text)


def unescape_word(word: str) -> str:
    """The text a word stands for: escape_text undone (every other word is its own text)."""
    if "%" not in word:
        return word
    return _ESCAPED.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), word)


def is_string_word(word: str) -> bool:
    """A whole string literal as one word (`'a'`, `f"x%20{y}"`), not a lone quote."""
    head = word[:3].lower()
    quote = next((i for i, c in enumerate(head) if c in _QUOTES), -1)
    return len(word) > quote + 1 and quote >= 0 and head[:quote] in _STRING_PREFIXES


def _string_end(line: str, start: int, unclosed: set) -> int:
    """The end of the string literal that starts at line[start] (with its prefix), or -1 when none
    does or it does not close on this line. `unclosed` holds the kinds (quote, triple) already seen
    unclosed on this line: a later one of the same kind cannot close either (whether a quote is
    escaped depends only on the backslashes before it), so each kind is scanned to the end once and
    a line costs linear time whatever the model wrote."""
    quote_at = start
    while quote_at < len(line) and quote_at - start < 2 and line[quote_at].isalpha():
        quote_at += 1
    if quote_at >= len(line) or line[quote_at] not in _QUOTES or line[start:quote_at].lower() not in _STRING_PREFIXES:
        return -1
    quote = line[quote_at]
    triple = line.startswith(quote * 3, quote_at)
    kind = (quote, triple)
    if kind in unclosed:
        return -1
    at = quote_at + (3 if triple else 1)
    while at < len(line):
        if line[at] == "\\":
            at += 2
        elif triple and line.startswith(quote * 3, at):
            return at + 3
        elif not triple and line[at] == quote:
            return at + 1
        else:
            at += 1
    unclosed.add(kind)
    return -1


def join_code_words(words: list[str]) -> str:
    """One line's code words -> text with PEP 8 spacing (`min ( a , - 1 )` -> `min(a, -1)`).

    No space before `) ] } , : . ;` or after `( [ { . ~` and unary operators; none before a call's or
    subscript's bracket, around `=` inside a call's parentheses, or after `:` inside brackets `[ ]`
    (slices); one space everywhere else.
    """
    out: list[str] = []
    brackets: list[tuple[str, bool]] = []  # (opening bracket, opened a call/subscript)
    prev, prev_unary = None, False
    for word in map(unescape_word, words):  # an escaped word spaces as its text does
        if prev is not None:
            call_paren = bool(brackets) and brackets[-1] == ("(", True)
            space = not (word in _NO_SPACE_BEFORE or prev in _NO_SPACE_AFTER or prev_unary
                         or (word in ("(", "[") and _ends_value(prev))
                         or ((word == "=" or prev == "=") and call_paren)
                         or (prev == ":" and bool(brackets) and brackets[-1][0] == "["))
            if space:
                out.append(" ")
        out.append(word)
        if word in ("(", "[", "{"):
            brackets.append((word, prev is not None and _ends_value(prev)))
        elif word in (")", "]", "}") and brackets:
            brackets.pop()
        prev_unary = word in _MAYBE_UNARY and (prev is None or not _ends_value(prev))
        prev = word
    return "".join(out)


def line_to_words(line: str) -> list[str]:
    """One line of text -> layout words for its leading whitespace, then CODE_TOKEN words."""
    words, i = [], 0
    while i < len(line) and line[i] in " \t":
        if line.startswith("    ", i):
            words.append(INDENT)
            i += 4
        else:
            words.append(TAB if line[i] == "\t" else SPACE)
            i += 1
    return words + CODE_TOKEN.findall(line[i:])


# Code words that would end an Edit's old words or its call; escaped in exact words (unescape_word reads
# any %XX), as are layout words, which words_to_code would read as layout
_SYNTAX_WORDS = {"new": "%6Eew", ";": "%3B"}  # `;`: syntax_compact.CALL_SEPARATOR


def _exact_word(word: str) -> str:
    """A code word or escaped text as an exact word: call syntax and layout words escaped."""
    if word in _SYNTAX_WORDS:
        return _SYNTAX_WORDS[word]
    return f"%{ord(word[0]):02X}{word[1:]}" if word in LAYOUT_WORDS else word


def line_to_words_exact(line: str) -> list[str]:
    """One line of text -> words that words_to_code turns back into exactly this line: layout words,
    then CODE_TOKEN words with each string literal as one escaped word; when those do not rebuild the
    line (spacing other than PEP 8's, a literal left open for the next line, a comment after two
    spaces), its text after the layout words as one escaped word (module doc)."""
    layout = 0
    while layout < len(line) and line[layout] in " \t":
        layout += 1
    words = line_to_words(line[:layout])
    rest, code, at, unclosed = line[layout:], [], 0, set()
    while at < len(rest):
        if rest[at].isspace():
            at += 1
            continue
        end = _string_end(rest, at, unclosed)
        if end < 0:
            end = CODE_TOKEN.match(rest, at).end()  # a non-space character always starts one (`\S`)
            code.append(rest[at:end])
        else:
            code.append(escape_text(rest[at:end]))
        at = end
    if join_code_words(code) != rest:
        code = [escape_text(rest)]
    return words + [_exact_word(word) for word in code]


def file_lines(text: str) -> list[str]:
    """Lines as `cat -n` numbers them: a final newline does not start another line."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def code_to_words(text: str) -> list[str]:
    """Text -> code words, lines separated by `<nl>` (the inverse of words_to_code on PEP 8 code)."""
    return _lines_to_words(text, line_to_words)


def code_to_words_exact(text: str) -> list[str]:
    """Text -> words that words_to_code turns back into exactly this text (line_to_words_exact per line),
    whatever its spacing and literals: what a file view shows, and what an Edit copied from it gives."""
    return _lines_to_words(text, line_to_words_exact)


def _lines_to_words(text: str, line_words) -> list[str]:
    words: list[str] = []
    for index, line in enumerate(file_lines(text)):
        if index:
            words.append(NEWLINE)
        words += line_words(line)
    return words


def words_to_code(words: list[str]) -> str:
    """Code words -> text: `<nl>` splits lines; leading layout words indent; the rest join_code_words
    (an escaped word, `"a%20b"`, is its text: `"a b"`).

    Raises ValueError for a layout word after a line's first code word.
    """
    lines, line = [], []
    for word in list(words) + [NEWLINE]:
        if word != NEWLINE:
            line.append(word)
            continue
        lead = 0
        while lead < len(line) and line[lead] in _LEAD_TEXT:
            lead += 1
        if any(w in LAYOUT_WORDS for w in line[lead:]):
            raise ValueError("layout word inside a line")
        lines.append("".join(_LEAD_TEXT[w] for w in line[:lead]) + join_code_words(line[lead:]))
        line = []
    return "\n".join(lines)


def listing_words(first: int, lines: tuple[str, ...] | list[str]) -> list[str]:
    """A `cat -n` view in words: `1 def f ( x ) : <nl> 2 <indent> return x`."""
    words: list[str] = []
    for i, line in enumerate(lines):
        if i:
            words.append(NEWLINE)
        words += [str(first + i)] + line_to_words_exact(line)
    return words


def listing_lines(words: list[str]) -> list[tuple[int, str]]:
    """Parse listing words back to (line number, line text); the inverse of listing_words."""
    out, line = [], []
    for word in list(words) + [NEWLINE]:
        if word != NEWLINE:
            line.append(word)
            continue
        if not line or not line[0].isdigit():
            raise ValueError("not a listing")
        out.append((int(line[0]), words_to_code(line[1:])))
        line = []
    return out
