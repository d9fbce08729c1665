from typing import Any

class IndexCore: ...
class LazyCore: ...

class SegmentCore:
    def append_batch_if_room(
        self, last_offset: int, max_timestamp: int, batch: bytes | bytearray | memoryview, now: int,
        max_segment_bytes: int, max_segment_ms: int, header: bytes = b"", /,
    ) -> bool: ...
    def _index_batch(
        self, last_offset: int, max_timestamp: int, position: int, size: int, offset_index: Any = None,
        time_index: Any = None, /,
    ) -> None: ...
