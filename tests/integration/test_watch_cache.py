"""The watch cache's informers on the real API server: the first listing fills the stores, then
watch events keep them current and are told to the callback; only our labelled objects are kept."""

import pytest
from kubernetes import client
from tensorkiln.builders.labels import MANAGED_BY
from tensorkiln.cluster.cache import WatchCache
from tensorkiln.cluster.informer import start_informers

from .helpers import wait_for

pytestmark = pytest.mark.cluster


def config_map(namespace: str, name: str, labels: dict, data: str = "1") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": {"x": data}}


def test_informers_list_then_follow_every_change(api, namespace):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, config_map(namespace, "before", MANAGED_BY))
    core.create_namespaced_config_map(namespace, config_map(namespace, "not-ours", {}))
    cache, seen = WatchCache(), []

    def told(kind, type_, obj):
        if kind == "ConfigMap":  # nodes change all the time (kwok's heartbeats)
            seen.append((kind, type_, obj["metadata"]["name"]))

    informers = start_informers(api, cache, [namespace], told)
    try:
        wait_for(lambda: cache.filled, timeout=30, what="every informer's first listing")
        kept = cache.get("ConfigMap", namespace, "before")
        assert kept["kind"] == "ConfigMap" and kept["apiVersion"] == "v1"  # a LIST leaves them out of items
        assert "managedFields" not in kept["metadata"]
        assert cache.get("ConfigMap", namespace, "not-ours") is None
        assert seen == []  # the first listing is no event: kopf's resume handlers cover it

        core.create_namespaced_config_map(namespace, config_map(namespace, "after", MANAGED_BY))
        core.patch_namespaced_config_map("before", namespace, {"data": {"x": "2"}})
        core.delete_namespaced_config_map("after", namespace)
        wait_for(lambda: len(seen) >= 3, timeout=30, what="three watch events")
        assert seen == [("ConfigMap", "ADDED", "after"), ("ConfigMap", "MODIFIED", "before"),
                        ("ConfigMap", "DELETED", "after")]  # fmt: skip
        assert cache.get("ConfigMap", namespace, "before")["data"] == {"x": "2"}
        assert cache.get("ConfigMap", namespace, "after") is None
        assert {n["metadata"]["name"] for n in cache.all("Node")} >= {"local-0"}
    finally:
        for informer in informers:
            informer.stop()
