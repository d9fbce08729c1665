"""The append's native cores (``local/_appendcore.c``), or plain classes where no C compiler built them.

``AbstractIndex``, ``LazyIndex`` and ``LogSegment`` derive from these. Built, they keep the fields an append uses
in C and give ``LogSegment.append_batch_if_room`` and ``_index_batch`` their native paths; not built, the same
fields are slots of plain classes and the Python definitions run. Either way the classes read and write the fields
by the same names.
"""

from __future__ import annotations

from local.extensions import fresh_extension

_core = fresh_extension("local._appendcore")  # (None where not built, or built from an older source)
if _core is not None:
    IndexCore, LazyCore, SegmentCore = _core.IndexCore, _core.LazyCore, _core.SegmentCore
    NATIVE_APPEND = True
else:  # pragma: no cover - a machine without a C compiler

    class IndexCore:  # type: ignore[no-redef]
        """An index's fields, as slots (the names of local/_appendcore.c's)."""

        __slots__ = (
            "_allocated",
            "_base_offset",
            "_closed",
            "_entry_size",
            "_keys",
            "_length",
            "_lock",
            "_mmap",
            "_reserved_slots",
            "_warm_entries",
            "_writable",
        )

    class LazyCore:  # type: ignore[no-redef]
        """A lazy index's field, as a slot."""

        __slots__ = ("_index",)

    class SegmentCore:  # type: ignore[no-redef]
        """A segment's fields, as slots."""

        __slots__ = (
            "_lazy_offset_index",
            "_lazy_time_index",
            "_max_known",
            "_max_timestamp",
            "_offset_of_max_timestamp",
            "base_offset",
            "bytes_since_last_index_entry",
            "created",
            "index_interval_bytes",
            "log",
            "roll_jitter_ms",
            "rolling_based_timestamp",
        )

    NATIVE_APPEND = False

__all__ = ["NATIVE_APPEND", "IndexCore", "LazyCore", "SegmentCore"]
