"""A small JSON client for the few API calls the agent makes.

The agent works on plain dicts shaped like the API (it reads specs and writes status
patches), so it talks JSON through the kubernetes package's ApiClient (kubeconfig, TLS and
auth handled there) instead of the typed models, and names every patch type explicitly.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator

from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.config import load_kube_config
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class Kube:
    def __init__(self, api: ApiClient):
        self._api = api

    @classmethod
    def from_kubeconfig(cls, path: str) -> Kube:
        config = Configuration(connection_pool_maxsize=32)  # the pods' worker threads share one pool
        load_kube_config(config_file=path, client_configuration=config)
        return cls(ApiClient(config))

    @property
    def server(self) -> str:
        """The API server's URL (https://host:port), as the kubeconfig names it."""
        return self._api.configuration.host

    def call(
        self,
        method: str,
        path: str,
        *,
        query: dict | None = None,
        body: dict | None = None,
        patch: str | None = None,
        timeout_s: float = 30,
    ) -> dict:
        resp = self._send(method, path, query, body, patch, timeout_s)
        data = resp.read()
        return json.loads(data) if data else {}

    def get_or_none(self, path: str) -> dict | None:
        try:
            return self.call("GET", path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def watch(self, path: str, query: dict, timeout_s: int) -> Iterator[dict]:
        """Events of one watch request; the server ends it after timeout_s."""
        query = {**query, "watch": "true", "timeoutSeconds": timeout_s, "allowWatchBookmarks": "true"}
        resp = self._send("GET", path, query, None, None, (10, timeout_s + 30))
        try:
            for line in iter_resp_lines(resp.response):
                if line:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise ApiException(status=status.get("code"), reason=status.get("message"))
                    yield event
        finally:
            resp.response.release_conn()

    def _send(self, method, path, query, body, patch, timeout):
        headers = {"Accept": "application/json", "Content-Type": PATCH_TYPES[patch] if patch else "application/json"}
        request = self._api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self._api.call_api(*request, _request_timeout=timeout)
        if not 200 <= resp.status <= 299:
            data = resp.read()
            raise ApiException.from_response(http_resp=resp, body=data.decode(errors="replace"), data=None)
        return resp


def describe(exc: BaseException) -> str:
    """One log line: the API's own message rather than the whole response."""
    if isinstance(exc, ApiException):
        try:
            return f"{exc.status} {json.loads(exc.body)['message']}"
        except (TypeError, ValueError, KeyError):
            return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


def delete_pod_now(kube: Kube, meta: dict) -> None:
    """What the kubelet does once a pod's containers are gone: delete it with grace period 0."""
    options = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": meta["uid"]},
    }
    try:
        kube.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body=options)
    except ApiException as exc:
        if exc.status not in (404, 409):  # 409: a new pod already took the name
            raise


def retry(attempt: Callable[[], object], *, what: str, stop: threading.Event, cap_s: float = 30) -> bool:
    """Call attempt until it neither raises nor returns False (it logs why), backing off; False if stopped."""
    delay = 1.0
    while not stop.is_set():
        try:
            if attempt() is not False:
                return True
        except Exception as exc:
            log.warning("%s failed (retrying in %.0fs): %s", what, delay, describe(exc))
        stop.wait(delay)
        delay = min(delay * 2, cap_s)
    return False
