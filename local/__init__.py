"""tiered's local log engine: Apache Kafka's on-disk log storage, single node, in Python.

``local`` never imports the remote tier; the names below load lazily so that importing one layer (say
the record codec) does not pull in the whole engine. The ``TYPE_CHECKING`` imports give type checkers the real
names (``from local import LogManager`` is a ``LogManager`` to mypy), at no cost at run time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from local.config import LogConfig as LogConfig
    from local.log import Log as Log
    from local.manager import LogManager as LogManager

_EXPORTS = {
    "LogConfig": "local.config",
    "LogManager": "local.manager",
    "Log": "local.log",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'local' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
