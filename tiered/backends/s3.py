"""S3Store: any S3-compatible store through boto3 (``S3RemoteStorageManager``: the segment format on it).

Config (``rsm.config.*``, each validated: a bad value fails at configure naming the key, the value and the range):
``bucket`` (required), ``region``, ``endpoint_url`` (http/https), ``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``path_style`` (true/false), ``sse`` (AES256 or aws:kms),
``sse_kms_key_id``, ``multipart_threshold_bytes`` (8 MiB, >= 5 MiB), ``multipart_chunk_size_bytes`` (8 MiB,
5 MiB..5 GiB), ``max_concurrency`` (4, 1..256), ``max_pool_connections`` (100, or 2 x max_concurrency if more; 1..10000), ``connect_timeout_ms`` (10000), ``read_timeout_ms`` (30000, both
1..3600000), ``max_attempts`` (5, 1..100), ``retry_mode`` (standard, legacy or adaptive).

Credentials in ``endpoint_url`` (``http://ACCESS:SECRET@host:port``) are taken out of the URL before botocore
sees it, and used as the access key and secret key unless those are given; keys, secrets, tokens and userinfo
never appear in errors, logs or reprs.

Uploads go through boto3's transfer manager (multipart parts streamed from the file, never the whole segment in
memory); reads are ranged GETs. Throttling, 5xx and timeouts are retried with backoff by botocore; a body broken
off mid-stream (after botocore's retries, which end with the headers) is asked again from the byte reached, as
many times, with the same backoff (:class:`_Body`); what still fails is mapped: missing keys ->
RemoteResourceNotFoundError, everything else -> RemoteStorageError saying whether a retry may help. A missing
bucket, missing or rejected credentials and an unreachable endpoint are named as such (never "no object ...").
:meth:`S3Store.check_access` asks once, without retries and with a
connect timeout of at most 5 s, whether the bucket can be listed: the CLI calls it before it works, so a wrong
endpoint, bucket or key fails in seconds with one line naming it.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any, BinaryIO, ClassVar, NoReturn, cast

from tiered.backends import BY_NAME
from tiered.backends.composed import ObjectStoreRemoteStorageManager
from tiered.errors import ObjectExistsError, RemoteConfigError, RemoteStorageError, RemoteStorageTimeoutError
from tiered.options import LIBRARY_LOG_REDACTION, Options, Redactor, storage_failure
from tiered.store import ObjectStore, StoreCapabilities, not_found

logger = logging.getLogger(__name__)

_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
                     "InvalidClientTokenId", "AuthorizationHeaderMalformed"}
_PROBE_CONNECT_TIMEOUT_S = 5.0
_RETRIABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                    "ServiceUnavailable", "503", "500", "502", "504"}


# Loggers whose records may carry credentials (request headers, endpoint URLs): their records are masked.
_LIBRARY_LOGGERS = ("botocore", "botocore.endpoint", "botocore.auth", "botocore.httpsession", "botocore.hooks",
                    "botocore.retryhandler", "botocore.parsers", "botocore.regions", "botocore.client",
                    "urllib3.connectionpool", "s3transfer", "s3transfer.tasks", "s3transfer.utils")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", re.IGNORECASE)


class S3Store(ObjectStore):
    bucket: str
    # streams: open_range hands back the GET's body, read as it arrives; multipart: put_stream uploads parts.
    # S3's conditional PUT (If-None-Match: *): AWS since 2024-08; SeaweedFS and LocalStack serialize racing creates
    # too, moto honours the header without serializing (the conformance suite races claimants on each server).
    capabilities = StoreCapabilities(streams=True, multipart=True, conditional_writes=True, shared_across_processes=True,
                                     common_prefixes=True)
    redact: Redactor = Redactor()
    max_attempts = 5  # rsm.config.max_attempts once configured
    CONFIG_KEYS = ("bucket", "region", "endpoint_url",
                   "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "path_style", "sse",
                   "sse_kms_key_id", "multipart_threshold_bytes", "multipart_chunk_size_bytes", "max_concurrency",
                   "max_pool_connections", "connect_timeout_ms", "read_timeout_ms", "max_attempts", "retry_mode")

    CONFIG_DOCS: ClassVar[dict[str, tuple[str, str, str]]] = {
        "bucket": ("required", "3..63 of a-z 0-9 . - _",
            "The bucket. It must exist: nothing creates it."),
        "region": ("the SDK's", "a region name",
            "The bucket's region."),
        "endpoint_url": ("AWS", "http(s)://host[:port]",
            "An S3-compatible endpoint (MinIO, SeaweedFS, LocalStack). `http://ACCESS:SECRET@host` "
            "gives credentials too."),
        "aws_access_key_id": ("the SDK's chain", "a string",
            "Access key id (else environment, profile, instance role). Never logged."),
        "aws_secret_access_key": ("the SDK's chain", "a string",
            "Secret access key. Never logged."),
        "aws_session_token": ("none", "a string",
            "Session token of temporary credentials. Never logged."),
        "path_style": ("false", "true, false",
            "Path-style addressing (`host/bucket/key`), for most S3-compatible servers."),
        "sse": ("none", "AES256, aws:kms",
            "Server-side encryption of uploads."),
        "sse_kms_key_id": ("none", "a KMS key id",
            "The KMS key (needs `sse=aws:kms`)."),
        "multipart_threshold_bytes": ("8 MiB", "[5 MiB, 5 GiB]",
            "Objects from this size are uploaded in parts."),
        "multipart_chunk_size_bytes": ("8 MiB", "[5 MiB, 5 GiB]",
            "Size of one part."),
        "max_concurrency": ("4", "[1, 256]",
            "Parallel part uploads of one object."),
        "max_pool_connections": ("100 (at least 2 x max_concurrency)", "[1, 10000]",
            "Connections kept open to the store, shared by every thread of the process: the copy tasks (each with "
            "`max_concurrency` parts in flight), the expiration tasks, the start's claims and the reads. With fewer "
            "than run at once, each extra request opens a connection and closes it after (urllib3 logs \"Connection "
            "pool is full\")."),
        "connect_timeout_ms": ("10000", "[1, 3600000]",
            "Connection timeout."),
        "read_timeout_ms": ("30000", "[1, 3600000]",
            "Read timeout."),
        "max_attempts": ("5", "[1, 100]",
            "Requests per call, the first included (botocore's total_max_attempts); a GET whose body breaks off "
            "mid-stream (reset, closed early, read timeout) is asked again for the bytes not received, up to as many "
            "GETs; a body whose checksum does not match is fetched once more, with as many."),
        "retry_mode": ("standard", "standard, legacy, adaptive",
            "botocore's retry mode."),
    }

    def configure(self, props: Mapping[str, str]) -> None:
        self.options = Options(props, known=self.CONFIG_KEYS)
        self.redact = self.options.redactor
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config
        except ImportError:  # pragma: no cover - the s3 extra is part of the test install
            raise RemoteStorageError(f"the S3 backend needs boto3: {BY_NAME['s3'].install_hint}") from None
        o = self.options
        bucket = o.string("bucket", required="the S3 bucket of the remote tier")
        assert bucket is not None
        if not _BUCKET.match(bucket):
            raise o.bad("bucket", bucket, "expected 3..63 characters out of a-z, 0-9, '.', '-' and '_'")
        self.bucket = bucket
        region = o.string("region")
        endpoint, user, password = o.url("endpoint_url", ("http", "https"))
        access_key = o.secret("aws_access_key_id")
        secret_key = o.secret("aws_secret_access_key")
        if user or password:
            if access_key or secret_key:
                logger.warning("rsm.config.endpoint_url holds credentials and so do rsm.config.aws_access_key_id/"
                               "aws_secret_access_key: the URL's are ignored")
            else:
                access_key, secret_key = user, password
        mib = 1024 * 1024
        threshold = o.integer("multipart_threshold_bytes", 8 * mib, 5 * mib, 5 * 1024 * mib)
        part_size = o.integer("multipart_chunk_size_bytes", 8 * mib, 5 * mib, 5 * 1024 * mib)
        concurrency = o.integer("max_concurrency", 4, 1, 256)
        assert concurrency is not None
        # botocore's default of 10 is one copy task's worth: the ten copy threads, the ten expiration threads and the
        # claims at start share this client, and 70 "Connection pool is full, discarding connection" warnings (each
        # a connection opened and closed again) came from one start of `tiered run` with 800 partitions.
        pool = o.integer("max_pool_connections", max(100, 2 * concurrency), 1, 10_000)
        assert pool is not None
        max_attempts = o.integer("max_attempts", 5, 1, 100)
        assert max_attempts is not None
        self.max_attempts = max_attempts  # also the GETs of a body that breaks off mid-stream (see _Body)
        config = Config(
            region_name=region,
            connect_timeout=(o.integer("connect_timeout_ms", 10_000, 1, 3_600_000) or 0) / 1000,
            read_timeout=(o.integer("read_timeout_ms", 30_000, 1, 3_600_000) or 0) / 1000,
            # botocore's max_attempts counts retries only (1: two requests); total_max_attempts counts them all
            retries={"total_max_attempts": max_attempts,
                     "mode": o.choice("retry_mode", "standard", ("standard", "legacy", "adaptive"))},
            s3={"addressing_style": "path" if o.boolean("path_style", False) else "auto"},
            max_pool_connections=pool,
        )
        self.extra_args: dict[str, str] = {}
        sse = o.choice("sse", None, ("AES256", "aws:kms"))
        if sse:
            self.extra_args["ServerSideEncryption"] = sse
        kms_key = o.string("sse_kms_key_id")
        if kms_key:
            if sse != "aws:kms":
                raise o.bad("sse_kms_key_id", kms_key, "needs rsm.config.sse=aws:kms")
            self.extra_args["SSEKMSKeyId"] = kms_key
        self._endpoint = endpoint
        self._config = config
        LIBRARY_LOG_REDACTION.redactor.add(access_key, secret_key, o.secret("aws_session_token"), password)
        LIBRARY_LOG_REDACTION.attach(*_LIBRARY_LOGGERS)
        self._client_args: dict[str, Any] = {
            "endpoint_url": endpoint, "aws_access_key_id": access_key, "aws_secret_access_key": secret_key,
            "aws_session_token": o.secret("aws_session_token"), "region_name": region,
        }
        try:
            self.client = boto3.session.Session().client("s3", config=config, **self._client_args)
        except ValueError as exc:  # botocore refuses the endpoint or region
            raise o.bad("endpoint_url" if endpoint else "region", endpoint or region, self.redact(exc)) from None
        self.transfer_config = TransferConfig(
            multipart_threshold=threshold,
            multipart_chunksize=part_size,
            max_concurrency=concurrency,
            use_threads=True,
        )

    def __repr__(self) -> str:
        return (f"{type(self).__qualname__}(bucket={getattr(self, 'bucket', None)!r}, "
                f"endpoint_url={getattr(self, '_endpoint', None)!r})")

    def _failure(self, message: str, exc: BaseException | None, **context: Any) -> RemoteStorageError:
        return storage_failure(self.redact, message, exc, **context)

    @property
    def endpoint(self) -> str:
        """The endpoint this backend talks to (no credentials in it)."""
        return self._endpoint or f"AWS S3 ({self._client_args.get('region_name') or 'default region'})"

    def check_access(self) -> None:
        """List at most one key of the bucket, once (no retries), with a connect timeout of at
        most 5 s. Raises RemoteStorageError naming an unreachable endpoint, a missing bucket or rejected
        credentials; RemoteConfigError when no credentials are found at all."""
        import boto3
        from botocore.config import Config

        probe_config = self._config.merge(Config(
            connect_timeout=min(float(self._config.connect_timeout), _PROBE_CONNECT_TIMEOUT_S),
            retries={"total_max_attempts": 1, "mode": "standard"},  # the first try only
        ))
        client = boto3.session.Session().client("s3", config=probe_config, **self._client_args)
        try:
            listing = client.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
            if "IsTruncated" not in listing and "Name" not in listing:  # any 200 parses: S3's always has these
                raise self._not_s3(listing.get("ResponseMetadata", {}).get("HTTPStatusCode"), "a listing")
        except RemoteStorageError:
            raise
        except Exception as exc:
            if _error_code(exc) == "":  # an HTTP error with no S3 error document: another kind of server
                raise self._not_s3(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),  # type: ignore[attr-defined]
                                   "an S3 error document") from None
            err = self.storage_error(exc, "list", "")
            if isinstance(err, FileNotFoundError):  # a 404 listing a bucket: no such bucket (or not an S3 server)
                raise self._failure(f"the bucket {self.bucket!r} does not exist at {self.endpoint} (HTTP 404 listing "
                                    "it): create it first or fix rsm.config.bucket and rsm.config.endpoint_url",
                                    None) from None
            _reraise(err)
        finally:
            client.close()

    def _not_s3(self, status: object, missing: str) -> RemoteStorageError:
        return self._failure(f"the endpoint {self.endpoint} does not answer as S3 does (HTTP {status} without "
                             f"{missing}, listing bucket {self.bucket!r}): check rsm.config.endpoint_url (and "
                             "rsm.config.path_style)", None)

    def storage_error(self, exc: Exception, action: str, key: str) -> RemoteStorageError:
        """The project's error for a boto3/botocore failure of ``action`` on ``key`` (a missing bucket, rejected
        credentials, an unreachable endpoint each named as such); also what this plugin's streams raise."""
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            ConnectTimeoutError,
            EndpointConnectionError,
            HTTPClientError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        if isinstance(exc, RecursionError) or isinstance(getattr(exc, "kwargs", {}).get("error"), RecursionError):
            # botocore follows a redirect that names no S3 region (a web server's 301 for a directory) without end
            return self._failure(f"the endpoint {self.endpoint} does not answer as S3 does (it redirects the {action} "
                                 f"of s3://{self.bucket}/{key} again and again): check rsm.config.endpoint_url (and "
                                 "rsm.config.path_style)", None, key=key)
        if isinstance(exc, NoCredentialsError):
            return RemoteConfigError(
                f"no S3 credentials found for bucket {self.bucket!r}: set rsm.config.aws_access_key_id and "
                "rsm.config.aws_secret_access_key (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, "
                "an instance role)", key="rsm.config.aws_access_key_id")
        if isinstance(exc, ConnectTimeoutError | EndpointConnectionError):
            why = "connect timed out" if isinstance(exc, ConnectTimeoutError) else "connection failed"
            reason = getattr(exc, "kwargs", {}).get("error")
            detail = f" ({_first_line(reason)})" if reason else ""
            return self._failure(f"cannot reach the S3 endpoint {self.endpoint}: {why}{detail}; check "
                                 "rsm.config.endpoint_url and that the server is up", None, retriable=True, key=key)
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return self._failure(f"the bucket {self.bucket!r} does not exist at {self.endpoint}: create it first "
                                     f"(the remote tier never creates buckets; e.g. aws s3 mb s3://{self.bucket}, the "
                                     "README has a command for each backend) or fix rsm.config.bucket", None, key=key)
            if code in _CREDENTIAL_CODES:
                return self._failure(f"the S3 credentials were rejected by {self.endpoint} ({code}) for bucket "
                                     f"{self.bucket!r}: check rsm.config.aws_access_key_id and "
                                     "rsm.config.aws_secret_access_key", None, key=key)
            if code in ("AccessDenied", "403") or status == 403:
                return self._failure(f"access denied to s3://{self.bucket}/{key} at {self.endpoint} ({code}): the "
                                     f"credentials may not {action} there; check them and the bucket policy",
                                     None, key=key)
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return not_found(f"{self.bucket}/{key}")
            retriable = code in _RETRIABLE_CODES or (status is not None and status >= 500)
            return self._failure(f"S3 {action} of s3://{self.bucket}/{key} failed: {code} {exc}", exc, retriable=retriable, key=key)
        if isinstance(exc, ReadTimeoutError):
            err = RemoteStorageTimeoutError(self.redact(f"S3 {action} of s3://{self.bucket}/{key} timed out: {exc}"), key=key)
            if not self.redact.leaks(exc):
                err.__cause__ = exc
            return err
        if isinstance(exc, ConnectionError | HTTPClientError):  # refused, reset, or broken off mid-body
            return self._failure(f"S3 {action} of s3://{self.bucket}/{key}: {exc}", exc, retriable=True, key=key)
        return self._failure(f"S3 {action} of s3://{self.bucket}/{key} failed: {exc}", exc, key=key)

    def put(self, key: str, data: bytes | BinaryIO, *, if_absent: bool = False) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            # A small file (below the multipart threshold and SMALL_PUT_BYTES) is one PutObject, as the transfer
            # manager would send it, without the thread pool it starts and joins per call: four of a segment's five
            # objects are small, and under load those hand-offs cost a copy more than its requests did (a helper's
            # profile of 500 partitions). Larger files stream through the transfer manager, never whole in memory.
            data = _rest_if_below(data, min(self.transfer_config.multipart_threshold, SMALL_PUT_BYTES)) or data
        if not isinstance(data, bytes | bytearray | memoryview) and not if_absent:
            try:  # the transfer manager: streamed from the file (multipart above the threshold)
                self.client.upload_fileobj(data, self.bucket, key, ExtraArgs=self.extra_args or None,
                                           Config=self.transfer_config)
            except Exception as exc:
                _reraise(self.storage_error(exc, "upload", key))
            return
        if not isinstance(data, bytes | bytearray | memoryview):
            data = data.read()
        condition = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **condition, **self.extra_args)
        except Exception as exc:
            if if_absent and _precondition_failed(exc):
                raise ObjectExistsError(f"object s3://{self.bucket}/{key} exists already", key=key) from None
            _reraise(self.storage_error(exc, "put", key))

    def put_stream(self, key: str, chunks: Iterable[bytes]) -> None:
        """A multipart upload of parts of ``multipart_chunk_size_bytes`` filled from ``chunks`` (one PUT when it all
        fits in one part), up to ``max_concurrency`` parts in flight: memory is bounded by those parts whatever the
        object's size. A failure aborts the upload."""
        from concurrent.futures import Future, ThreadPoolExecutor

        part_size = self.transfer_config.multipart_chunksize
        in_flight = max(1, min(self.transfer_config.max_request_concurrency, 4))
        buffer = bytearray()
        upload_id: str | None = None
        futures: list[Future[dict[str, Any]]] = []
        action = "upload"

        def part(number: int, body: bytes) -> dict[str, Any]:
            response = self.client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                               Body=body)
            return {"PartNumber": number, "ETag": response["ETag"]}

        with ThreadPoolExecutor(in_flight, thread_name_prefix="s3-part") as pool:
            try:
                for chunk in chunks:
                    buffer += chunk
                    while len(buffer) >= part_size:
                        if upload_id is None:
                            action = "multipart upload"
                            upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                                            **self.extra_args)["UploadId"]
                        pending = [f for f in futures if not f.done()]
                        if len(pending) >= in_flight:
                            pending[0].result()
                        futures.append(pool.submit(part, len(futures) + 1, bytes(buffer[:part_size])))
                        del buffer[:part_size]
                for f in futures:
                    f.result()  # a failed part fails the upload before anything else is sent
                if upload_id is None:
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(buffer), **self.extra_args)
                    return
                if buffer:
                    futures.append(pool.submit(part, len(futures) + 1, bytes(buffer)))
                parts = [f.result() for f in futures]
                self.client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                                      MultipartUpload={"Parts": parts})
            except Exception as exc:
                for f in futures:
                    f.cancel()
                if upload_id is not None:
                    try:
                        self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
                    except Exception:
                        logger.warning("aborting the multipart upload of s3://%s/%s failed", self.bucket, key)
                if isinstance(exc, RemoteStorageError):
                    raise
                _reraise(self.storage_error(exc, action, key))

    def get(self, key: str) -> bytes:
        with self.open_range(key, 0) as stream:
            return stream.read()

    def get_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        with self.open_range(key, start, end_inclusive) as stream:
            return stream.read()

    def open_range(self, key: str, start: int, end_inclusive: int | None = None) -> IO[bytes]:
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
            _reraise(self.storage_error(exc, "get", key))
        return cast(IO[bytes], _Body(self, key, response, start, "Range" in kwargs))

    def _resumed_get(self, key: str, start: int, stop: int, whole: bool, etag: str | None) -> Any:
        """The GET that goes on with a body broken off at byte ``start`` (``stop`` exclusive): a ranged GET of the
        rest, or the whole object again when the first GET was of the whole object (then the store's full-object
        checksum is checked as the first GET's was; the caller skips what it has). If-Match the first GET's ETag:
        bytes of two versions are never stitched together."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if not whole:
            kwargs["Range"] = f"bytes={start}-{stop - 1}"
        if etag:
            kwargs["IfMatch"] = etag
        try:
            return self.client.get_object(**kwargs)
        except Exception as exc:
            if _precondition_failed(exc):
                raise self._failure(f"S3 get of s3://{self.bucket}/{key}: the object changed (ETag no longer {etag}) "
                                    f"while it was read, its connection broken off at byte {start}; read it again",
                                    None, retriable=True, key=key) from None
            _reraise(self.storage_error(exc, "get", key))

    def size(self, key: str) -> int:
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except Exception as exc:
            _reraise(self.storage_error(exc, "head", key))

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = [{"Key": k} for k in keys]
        for i in range(0, len(batch), 1000):
            try:
                response = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch[i : i + 1000], "Quiet": True})
            except Exception as exc:
                _reraise(self.storage_error(exc, "delete", batch[i]["Key"]))
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise self._failure(f"S3 delete of {len(errors)} object(s) failed: {errors[:3]}", None, retriable=True)

    def list(self, prefix: str) -> list[str]:
        return self._listed(prefix, "Contents", "Key")

    def list_common_prefixes(self, prefix: str) -> builtins.list[str]:
        return self._listed(prefix, "CommonPrefixes", "Prefix", Delimiter="/")

    def _listed(self, prefix: str, part: str, field: str, **request: str) -> builtins.list[str]:
        """``field`` of each entry of ``part`` of every page of a ListObjectsV2 of ``prefix``, sorted."""
        found: builtins.list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix,
                                                                              **request):
                found.extend(entry[field] for entry in page.get(part, []))
        except Exception as exc:
            _reraise(self.storage_error(exc, "list", prefix))
        return sorted(found)

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except Exception as exc:
            err = self.storage_error(exc, "head", key)
            if isinstance(err, FileNotFoundError):
                return False
            raise err from err.__cause__

    def close(self) -> None:
        super().close()
        self.client.close()


def _precondition_failed(exc: Exception) -> bool:
    """A conditional PUT refused because the key exists: 412 PreconditionFailed, or 409 ConditionalRequestConflict
    (a concurrent conditional write of the same key is in flight)."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)


def _error_code(exc: Exception) -> str | None:
    """The S3 error code of a botocore ClientError ("" when the answer held no S3 error document), else None."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict) or "Error" not in response:
        return None
    return str(response["Error"].get("Code", ""))


def _first_line(value: object) -> str:
    return " ".join(str(value).split())


def _reraise(err: RemoteStorageError) -> NoReturn:
    """Raise a mapped error chained as :meth:`S3Store.storage_error` decided (not to an error that mentions a
    secret)."""
    raise err from err.__cause__


def _broken_off(exc: BaseException) -> bool:
    """Whether a body read failed because its connection broke off (reset, closed early, timed out): the bytes
    not yet received can be asked for again."""
    import http.client

    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import IncompleteReadError, ReadTimeoutError, ResponseStreamingError
    from urllib3.exceptions import ProtocolError
    from urllib3.exceptions import ReadTimeoutError as Urllib3ReadTimeoutError

    return isinstance(exc, ResponseStreamingError | ReadTimeoutError | IncompleteReadError | BotoConnectionError
                      | ProtocolError | Urllib3ReadTimeoutError | http.client.IncompleteRead | builtins.ConnectionError
                      | TimeoutError)


def _backoff(retry: int) -> float:
    """botocore's backoff before retry ``retry`` (1 based): rand(0, 1) x min(2 ** (retry - 1), 20) seconds."""
    import random

    return float(random.random() * min(2 ** (retry - 1), 20))


class _Body(io.BufferedIOBase):
    """A GET's streaming body whose read errors (reset connections, read timeouts, short bodies) come out as
    RemoteStorageError like those of the request.

    A body that breaks off mid-stream (outside botocore's retries, which end with the headers) is asked for again
    from the byte reached, up to ``max_attempts`` GETs in all with botocore's backoff between them: what was read
    is never read twice, and the error of the last GET is raised as before."""

    sleep = staticmethod(time.sleep)

    def __init__(self, rsm: S3Store, key: str, response: Mapping[str, Any], start: int, ranged: bool) -> None:
        self._rsm, self._key, self._body = rsm, key, response["Body"]
        self._position = start  # the object's next byte to hand out
        length = response.get("ContentLength")
        self._stop = start + int(length) if length is not None else None
        self._whole = not ranged
        self._etag: str | None = response.get("ETag")
        self._gets = 1

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        amount = None if size is None or size < 0 else size
        while True:
            try:
                data = bytes(self._body.read(amount))
            except Exception as exc:
                self._resume(exc)
                continue
            self._position += len(data)
            return data

    def _resume(self, exc: Exception) -> None:
        """Raise ``exc`` mapped, unless a broken-off body can be asked for again: then the next GET's body, on at
        the byte reached."""
        rsm, key = self._rsm, self._key
        if (not _broken_off(exc) or self._gets >= rsm.max_attempts or self._stop is None
                or self._position >= self._stop):
            _reraise(rsm.storage_error(exc, "get", key))
        retry = self._gets
        self._gets += 1
        delay = _backoff(retry)
        logger.debug("S3 get of s3://%s/%s broke off at byte %d of %d (%s): GET %d of %d in %.2f s", rsm.bucket, key,
                     self._position, self._stop, rsm.redact(_first_line(exc)), self._gets, rsm.max_attempts, delay)
        with contextlib.suppress(Exception):
            self._body.close()
        self.sleep(delay)
        response = rsm._resumed_get(key, self._position, self._stop, self._whole, self._etag)
        self._body = response["Body"]
        if self._whole:  # the whole object again: skip what was handed out already
            skip = self._position
            while skip:
                try:
                    got = len(self._body.read(min(skip, 1024 * 1024)))
                except Exception as again:
                    self._resume(again)
                    return
                if not got:
                    self._resume(exc)
                    return
                skip -= got

    read1 = read

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The segment format on an :class:`S3Store` (``remote.log.storage.manager.class.name=s3``)."""

    store_class = S3Store
    store: S3Store


SMALL_PUT_BYTES = 8 * 1024 * 1024  # the most a file read whole for one PutObject holds in memory, per copier thread


def _rest_if_below(f: BinaryIO, limit: int) -> bytes | None:
    """The rest of the regular file ``f`` (read at once) when it is shorter than ``limit`` bytes, else None (``f``
    left where it was)."""
    import os

    try:
        size = os.fstat(f.fileno()).st_size - f.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return f.read() if 0 <= size < limit else None
