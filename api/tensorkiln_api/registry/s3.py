"""The registry in an S3 bucket (AWS or any S3-compatible server), path-style addressing.

Configured from the environment: endpoint from TENSORKILN_S3_ENDPOINT or AWS_ENDPOINT_URL
(default AWS), credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
(anonymous when unset), region from AWS_REGION or AWS_DEFAULT_REGION. Uses the minio client:
boto3 cannot be installed beside kubernetes (python-dateutil <3 against >=3).
A PUT is atomic per object, so publishing in base.py's order keeps readers safe.
"""

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import BinaryIO
from urllib.parse import urlsplit

import certifi
import urllib3
from minio import Minio
from minio.credentials.providers import Provider
from minio.error import InvalidResponseError, S3Error, ServerError

from tensorkiln_api.registry.base import CHUNK_SIZE, NoSuchObject, Registry, RegistryError, RegistryUnavailable

DEFAULT_ENDPOINT = "https://s3.amazonaws.com"


class S3Registry(Registry):
    def __init__(self, client: Minio, endpoint: str, bucket: str, prefix: str = ""):
        super().__init__(f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}")
        self.client, self.endpoint, self.bucket, self.prefix = client, endpoint, bucket, prefix

    @classmethod
    def from_env(
        cls, bucket: str, prefix: str, env: Mapping[str, str] = os.environ, provider: Provider | None = None
    ) -> "S3Registry":
        """A client for `bucket` at the endpoint and with the keys of `env`; `provider` (minio's credential
        providers: a workload identity) instead of the keys where given."""
        endpoint = env.get("TENSORKILN_S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL") or DEFAULT_ENDPOINT
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.path.strip("/"):
            # The value is not echoed: a malformed one may carry credentials.
            raise RegistryError(
                "the S3 endpoint (TENSORKILN_S3_ENDPOINT or AWS_ENDPOINT_URL) must be http(s)://host[:port]"
            )
        client = Minio(
            parts.netloc,
            access_key=env.get("AWS_ACCESS_KEY_ID"),
            secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
            session_token=env.get("AWS_SESSION_TOKEN"),
            credentials=provider,
            secure=parts.scheme == "https",
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            http_client=_http_pool(env),
        )
        client.disable_virtual_style_endpoint()
        return cls(client, endpoint, bucket, prefix)

    def _write(self, key: str, stream: BinaryIO, size: int) -> None:
        with self._errors(key):
            self.client.put_object(self.bucket, self._object(key), stream, size)

    def _chunks(self, key: str) -> Iterator[bytes]:
        with self._errors(key):
            response = self.client.get_object(self.bucket, self._object(key))
            try:
                yield from response.stream(CHUNK_SIZE)
            finally:
                response.close()
                response.release_conn()

    def _object(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    @contextmanager
    def _errors(self, key: str):
        """Map the client's errors: missing object, unreachable store, refusal."""
        try:
            yield
        except S3Error as error:
            if error.code == "NoSuchKey":
                raise NoSuchObject(key) from None
            failure = RegistryUnavailable if error.response.status >= 500 else RegistryError
            raise failure(f"{self.uri}/{key}: {error.code}: {error.message}") from error
        except (ServerError, InvalidResponseError, urllib3.exceptions.HTTPError) as error:
            raise RegistryUnavailable(f"{self.uri} at {self.endpoint}: {error}") from error


def _http_pool(env: Mapping[str, str]) -> urllib3.PoolManager:
    # minio's default pool waits 5 minutes on a read and 6 s on a refused connection; an operator
    # that reconciles wants RegistryUnavailable quickly and a retry of its own.
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=5, read=60),
        retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
        cert_reqs="CERT_REQUIRED",
        ca_certs=env.get("SSL_CERT_FILE") or certifi.where(),
    )
