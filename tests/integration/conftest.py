"""Session-scoped real S3 servers on 127.0.0.1. A server that cannot start fails the tests using it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.s3_servers import S3Endpoint, ServerStartError, localstack_s3, moto_server, seaweedfs


def _start(cm, name: str) -> Iterator[S3Endpoint]:  # type: ignore[no-untyped-def]
    try:
        endpoint = cm.__enter__()
    except ServerStartError as exc:
        pytest.fail(f"{name} could not start: {exc}")
    try:
        yield endpoint
    finally:
        cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def seaweedfs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from _start(seaweedfs(Path(tmp_path_factory.mktemp("seaweedfs"))), "SeaweedFS")


@pytest.fixture(scope="session")
def localstack_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    yield from _start(localstack_s3(Path(tmp_path_factory.mktemp("localstack"))), "LocalStack")


@pytest.fixture(scope="session")
def moto_server_endpoint() -> Iterator[S3Endpoint]:
    yield from _start(moto_server(), "moto server")


@pytest.fixture(params=["seaweedfs", "localstack", "moto-server"])
def s3_server(request: pytest.FixtureRequest) -> S3Endpoint:
    return request.getfixturevalue(f"{request.param.replace('-', '_')}_endpoint")  # type: ignore[no-any-return]
