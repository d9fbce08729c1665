"""Importing the project's C extensions (built by the install where a C compiler exists) so that a stale one is
never used.

In an editable install (``pip install -e .``) the built extension stays beside its C source. After ``git pull`` (or a
checkout) changes that source, the old build is still imported, and its functions may take other arguments than the
Python code now passes: the first call fails with a ``TypeError`` far from the cause (a helper hit one at the first
log cleaning). :func:`fresh_extension` returns None, with one WARNING naming the module and saying to reinstall, when
the C source beside the build is newer than the build; callers then run their Python paths, as on a machine without
a compiler. An installed wheel carries no C source: nothing to compare, the build is used.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType

__all__ = ["fresh_extension", "stale_reason"]
logger = logging.getLogger(__name__)


def stale_reason(module: ModuleType) -> str | None:
    """Why ``module`` (a built extension) is older than its C source beside it, or None."""
    built = getattr(module, "__file__", None)
    if not built:
        return None
    path = Path(built)
    source = path.with_name(module.__name__.rpartition(".")[2] + ".c")
    try:
        if source.stat().st_mtime <= path.stat().st_mtime:
            return None
    except OSError:
        return None  # no source beside it (a wheel) or no build file: nothing to compare
    return f"{path.name} was built before {source.name} last changed"


def fresh_extension(name: str) -> ModuleType | None:
    """The C extension ``name`` (a dotted module name), or None: not built here, or built before its C source last
    changed (see the module docstring)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    why = stale_reason(module)
    if why is not None:
        logger.warning("not using the C extension %s: %s; run `pip install -e .` again to rebuild it (the Python "
                       "code runs meanwhile, slower)", name, why)
        return None
    return module
