from typing import Any

def decode(
    bodies: list[Any], meta: Any, want: int, from_offset: int, until_offset: int, partial: bool, out: list[Any], /
) -> tuple[int, int, int, int, int, int, tuple[bytes, int, bytes, bytes, bytes, bytes, bytes | None, int] | None]: ...
