"""The append's native cores (``local/_appendcore.c``), or plain classes where no C compiler built them.

``AbstractIndex``, ``LazyIndex`` and ``LogSegment`` derive from these. Built, they keep the fields an append uses
in C and give ``LogSegment.append_batch_if_room`` its native path; not built, the same fields are plain attributes
and the Python definitions run. Either way the classes read and write the fields by the same names.
"""

from __future__ import annotations

try:
    from local._appendcore import IndexCore, LazyCore, SegmentCore

    NATIVE_APPEND = True
except ImportError:  # pragma: no cover - a machine without a C compiler

    class IndexCore:  # type: ignore[no-redef]
        """An index's fields, as plain attributes."""

    class LazyCore:  # type: ignore[no-redef]
        """A lazy index's field, as a plain attribute."""

    class SegmentCore:  # type: ignore[no-redef]
        """A segment's fields, as plain attributes."""

    NATIVE_APPEND = False

__all__ = ["NATIVE_APPEND", "IndexCore", "LazyCore", "SegmentCore"]
