"""Polling helpers for integration tests."""

import time

import pytest
from kubernetes import client


def wait_for(predicate, timeout=90, interval=1.0, what="condition"):
    """Poll until predicate() is truthy; return its value or fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def namespace_exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
