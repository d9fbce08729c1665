from typing import Any

def decode(
    sources: list[Any], meta: Any, want: int, from_offset: int, until_offset: int, partial: bool, out: list[Any], /
) -> tuple[int, int, int, int, int, int, tuple[bytes, int, bytes, bytes, bytes, bytes, bytes | None, int] | None]: ...
def scan(
    data: Any, start: int, limit: int, from_offset: int, until_offset: int, ts_floor: int, transactional: bool,
    max_records: int, max_bytes: int, source: int, meta: Any, /
) -> tuple[int, int, int, int]: ...
