"""Java ``.properties`` text (``Properties.load`` semantics), as broker configs and per-dir feature files use it.

The parser is pure (``read_properties`` adds the file read): comments (``#``, ``!``), ``=``/``:``/whitespace
separators, backslash continuations and escapes (``\\t``, ``\\uXXXX``...). Both ``local.config`` and
``local.features`` read files with it, so neither imports the other for it.

Files are ISO-8859-1, as Java's ``Properties.load(InputStream)`` reads them: every byte is one character, and
anything else is written as a ``\\uXXXX`` escape (``format_properties``, Java's ``Properties.store``), so a byte
such as 0xff reads as the character U+00FF rather than failing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from local.errors import ConfigError

_LINE_END = re.compile(r"\r\n|\r|\n")
_BLANK = " \t\f"  # Java's whitespace in a .properties line (not U+00A0, which is a character of the key)


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` semantics: comments (#, !), ``=``/``:``/whitespace separators, continuations,
    escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    lines = _LINE_END.split(text)  # only Java's line ends: str.splitlines also ends lines at U+0085 (byte 0x85)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):
            line = line[:-1]
        logical.append(line)
    for line in logical:
        key_chars: list[str] = []
        j = 0
        while j < len(line):
            c = line[j]
            if c == "\\" and j + 1 < len(line):
                key_chars.append(c + line[j + 1])
                j += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            j += 1
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape("".join(key_chars))] = _unescape(rest)
    return out


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(s: str) -> str:
    def repl(m: re.Match[str]) -> str:
        c = m.group(1)
        if c == "u":  # a \u not followed by four hex digits (Java: "Malformed \uxxxx encoding.")
            raise ValueError(f"malformed \\uxxxx escape in {s!r}: a \\u takes four hex digits")
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    text = re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, s)
    if any("\ud800" <= c <= "\udfff" for c in text):  # \uD83D\uDE00: Java's UTF-16 pairs make one character
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def format_properties(props: dict[str, str]) -> str:
    """``props`` as ``.properties`` text that :func:`parse_properties` reads back the same, ASCII only (Java's
    ``Properties.store`` escapes), one ``key=value`` line each, sorted by key."""
    return "".join(f"{_escape(k, True)}={_escape(str(v), False)}\n" for k, v in sorted(props.items()))


def _escape(text: str, key: bool) -> str:
    out = []
    for i, c in enumerate(text):
        if c in "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif c in "=:#!" or (c == " " and (key or i == 0)):
            out.append("\\" + c)
        elif " " <= c <= "~":
            out.append(c)
        else:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(c))
    return "".join(out)


def _utf16_units(c: str) -> list[int]:
    data = c.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_bytes().decode("iso-8859-1"))
    except OSError as exc:
        hint = ""
        if "=" in str(path) and not Path(path).exists():  # (kafka-topics' --config KEY=VALUE)
            hint = "; a topic's config is --topic-config KEY=VALUE, --config names the broker's properties file"
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror or exc}{hint}", path=str(path)) from exc
    except ValueError as exc:
        raise ConfigError(f"configuration file {path}: {exc}", path=str(path)) from exc
