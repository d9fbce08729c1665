"""Java ``.properties`` text (``Properties.load`` semantics), as broker configs and per-dir feature files use it.

The parser is pure (``read_properties`` adds the file read): comments (``#``, ``!``), ``=``/``:``/whitespace
separators, backslash continuations and escapes (``\\t``, ``\\uXXXX``...). Both ``local.config`` and
``local.features`` read files with it, so neither imports the other for it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from local.errors import ConfigError


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` semantics: comments (#, !), ``=``/``:``/whitespace separators, continuations,
    escapes."""
    out: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
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
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, s)


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}", path=str(path)) from exc
