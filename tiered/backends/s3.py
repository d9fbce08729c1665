"""S3RemoteStorageManager: any S3-compatible store through boto3.

Config (``rsm.config.*``): ``bucket`` (required), ``prefix``, ``region``, ``endpoint_url``, ``aws_access_key_id``,
``aws_secret_access_key``, ``path_style`` (true/false), ``sse`` (AES256 or aws:kms), ``sse_kms_key_id``,
``multipart_threshold_bytes`` (8 MiB), ``multipart_chunk_size_bytes`` (8 MiB), ``max_concurrency`` (4),
``connect_timeout_ms`` (10000), ``read_timeout_ms`` (30000), ``max_attempts`` (5), ``retry_mode`` (standard).

Uploads go through boto3's transfer manager (multipart parts streamed from the file, never the whole segment in
memory); reads are ranged GETs. Throttling, 5xx and timeouts are retried with backoff by botocore; what still
fails is mapped: missing keys -> RemoteResourceNotFoundError, everything else -> RemoteStorageError saying
whether a retry may help.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, cast

from tiered.backends.base import ObjectStoreRemoteStorageManager, not_found
from tiered.errors import RemoteStorageError, RemoteStorageTimeoutError

_RETRIABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                    "ServiceUnavailable", "503", "500", "502", "504"}


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    bucket: str
    fetch_streams = True  # fetch_log_segment hands back the GET's body, read as it arrives

    def configure(self, props: Mapping[str, str]) -> None:
        super().configure(props)
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - the s3 extra is part of the test install
            raise RemoteStorageError("the S3 backend needs boto3: pip install 'tiered[s3]'") from exc
        if not props.get("bucket"):
            raise RemoteStorageError("the S3 remote tier needs rsm.config.bucket")
        self.bucket = props["bucket"]
        config = Config(
            region_name=props.get("region") or None,
            connect_timeout=int(props.get("connect_timeout_ms", 10_000)) / 1000,
            read_timeout=int(props.get("read_timeout_ms", 30_000)) / 1000,
            retries={"max_attempts": int(props.get("max_attempts", 5)), "mode": props.get("retry_mode", "standard")},
            s3={"addressing_style": "path" if _bool(props.get("path_style", "false")) else "auto"},
            max_pool_connections=max(10, int(props.get("max_concurrency", 4)) * 2),
        )
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=props.get("endpoint_url") or None,
            aws_access_key_id=props.get("aws_access_key_id") or None,
            aws_secret_access_key=props.get("aws_secret_access_key") or None,
            region_name=props.get("region") or None,
            config=config,
        )
        self.transfer_config = TransferConfig(
            multipart_threshold=int(props.get("multipart_threshold_bytes", 8 * 1024 * 1024)),
            multipart_chunksize=int(props.get("multipart_chunk_size_bytes", 8 * 1024 * 1024)),
            max_concurrency=int(props.get("max_concurrency", 4)),
            use_threads=True,
        )
        self.extra_args: dict[str, str] = {}
        if props.get("sse"):
            self.extra_args["ServerSideEncryption"] = props["sse"]
        if props.get("sse_kms_key_id"):
            self.extra_args["SSEKMSKeyId"] = props["sse_kms_key_id"]

    def _error(self, exc: Exception, action: str, key: str) -> RemoteStorageError:
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, ReadTimeoutError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return not_found(f"{self.bucket}/{key}")
            retriable = code in _RETRIABLE_CODES or (status is not None and status >= 500)
            return RemoteStorageError(f"S3 {action} of s3://{self.bucket}/{key} failed: {code} {exc}", retriable=retriable, key=key)
        if isinstance(exc, ReadTimeoutError):
            return RemoteStorageTimeoutError(f"S3 {action} of s3://{self.bucket}/{key} timed out: {exc}", key=key)
        if isinstance(exc, ConnectionError | HTTPClientError):  # refused, reset, or broken off mid-body
            return RemoteStorageError(f"S3 {action} of s3://{self.bucket}/{key}: {exc}", retriable=True, key=key)
        return RemoteStorageError(f"S3 {action} of s3://{self.bucket}/{key} failed: {exc}", key=key)

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, key, ExtraArgs=self.extra_args or None,
                                    Config=self.transfer_config)
        except Exception as exc:
            raise self._error(exc, "upload", key) from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **self.extra_args)
        except Exception as exc:
            raise self._error(exc, "put", key) from exc

    def get_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> bytes:
        with self.open_range(key, start, end_inclusive) as stream:
            return stream.read()

    def open_range(self, key: str, start: int = 0, end_inclusive: int | None = None) -> IO[bytes]:
        """The GET's body as a stream: bytes come off the connection as they are read, and an error while reading
        is mapped as a failed GET is."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start or end_inclusive is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end_inclusive is None else end_inclusive}"
        try:
            response = self.client.get_object(**kwargs)
        except Exception as exc:
            from botocore.exceptions import ClientError

            if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return io.BytesIO(b"")  # a range starting at or past the end of the object
            raise self._error(exc, "get", key) from exc
        return cast(IO[bytes], _Body(self, key, response["Body"]))

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = [{"Key": k} for k in keys]
        for i in range(0, len(batch), 1000):
            try:
                response = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch[i : i + 1000], "Quiet": True})
            except Exception as exc:
                raise self._error(exc, "delete", batch[i]["Key"]) from exc
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise RemoteStorageError(f"S3 delete of {len(errors)} object(s) failed: {errors[:3]}", retriable=True)

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))
        except Exception as exc:
            raise self._error(exc, "list", prefix) from exc
        return sorted(keys)

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except Exception as exc:
            err = self._error(exc, "head", key)
            if isinstance(err, FileNotFoundError):
                return False
            raise err from exc

    def close(self) -> None:
        self.client.close()


class _Body(io.BufferedIOBase):
    """A GET's streaming body whose read errors (reset connections, read timeouts, short bodies) come out as
    RemoteStorageError like those of the request."""

    def __init__(self, rsm: S3RemoteStorageManager, key: str, body: Any) -> None:
        self._rsm, self._key, self._body = rsm, key, body

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        try:
            return bytes(self._body.read(None if size is None or size < 0 else size))
        except Exception as exc:
            raise self._rsm._error(exc, "get", self._key) from exc

    read1 = read

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()
