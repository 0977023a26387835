"""Kubernetes Events about our objects, posted directly: from handlers and the resync thread alike.

(kopf.event needs kopf's per-task context, which the resync loop's worker thread lacks.)
Events are best effort: a refused Event (e.g. the namespace is terminating) is logged, never raised.
"""

import logging
import socket
from datetime import UTC, datetime

from kubernetes import client
from tensorkiln_api.common import kube_time

log = logging.getLogger(__name__)
COMPONENT = "tensorkiln"


def post(core: client.CoreV1Api, obj: dict, type_: str, reason: str, message: str) -> None:
    meta = obj["metadata"]
    now = kube_time(datetime.now(UTC))
    event = {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        core.create_namespaced_event(meta["namespace"], event)
    except client.ApiException as error:
        log.warning("event %s on %s/%s not posted: %s", reason, meta["namespace"], meta["name"], error.reason)
