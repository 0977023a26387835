"""kopf peering: one operator acting at a time.

`tensorkiln-operator run --peering NAME` joins the kopf peering object NAME (a ClusterKopfPeering
when watching all namespaces, else a KopfPeering in each watched namespace; the chart creates
them and kopf's peering CRDs). A second operator for the same objects then pauses instead of
fighting: a rollout's new pod (the chart also uses `strategy: Recreate`), or a developer's run
against the same cluster. Without --peering the operator runs standalone, as it does locally.

kopf pauses only its own handlers. The operator's resync loop (controllers.handlers) is a plain
asyncio task, so before each pass it asks `blocking_peers` of the same peering objects, with
kopf's rule: a live peer of the same or a higher priority pauses us (kopf freezes every operator
of the same priority, so two never act at once; a cleanly stopped operator leaves the object, a
killed one is dead once its lifetime has passed since it was last seen).
"""

import getpass
import os
import secrets
import socket
from datetime import UTC, datetime, timedelta

import kopf
from kubernetes import client

GROUP, VERSION = "kopf.dev", "v1"
PRIORITY = 0  # kopf's default; every TensorKiln operator runs at it


def new_identity() -> str:
    """This operator's entry in the peering objects, passed to kopf.operator(identity=...) so that
    the resync loop can tell itself from its peers. kopf's own default has the same shape."""
    host = os.environ.get("POD_ID") or f"{_user()}@{socket.gethostname()}"
    return f"{host}/{datetime.now(UTC):%Y%m%d%H%M%S}/{secrets.token_hex(2)}"


def _user() -> str:
    """The login name, else the uid: a container's user (65532 in the image) has no passwd entry."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def join(name: str, registry: kopf.OperatorRegistry) -> None:
    """Make the kopf.operator() run with `registry` join peering `name` (mandatory: paused while
    kopf's CRDs are missing)."""

    @kopf.on.startup(id="tensorkiln-peering", registry=registry)
    def peering(settings: kopf.OperatorSettings, **_) -> None:
        # Startup handlers run before kopf starts its peering and watch tasks, so this takes effect
        # whatever `standalone` the runner passed.
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.name = name
        settings.peering.priority = PRIORITY


def blocking_peers(status: dict, identity: str, priority: int, now: datetime) -> list[str]:
    """The live peers in a peering object's status that pause an operator (kopf's rule,
    kopf._core.engines.peering.process_peering_event): same or higher priority, not yet expired."""
    blocking = []
    for peer, info in (status or {}).items():
        if peer == identity or not isinstance(info, dict):
            continue
        seen = datetime.fromisoformat(info["lastseen"]) if info.get("lastseen") else now
        alive = seen + timedelta(seconds=int(info.get("lifetime", 60))) > now
        if alive and int(info.get("priority", 0)) >= priority:
            blocking.append(peer)
    return sorted(blocking)


def paused_by(custom: client.CustomObjectsApi, name: str, identity: str, namespaces: list[str]) -> list[str]:
    """The peers that pause the operator `identity`, joined to peering `name`, now."""
    selector = f"metadata.name={name}"  # list, which the chart's RBAC grants; no get
    if namespaces:
        lists = [
            custom.list_namespaced_custom_object(GROUP, VERSION, ns, "kopfpeerings", field_selector=selector)
            for ns in namespaces
        ]
    else:
        lists = [custom.list_cluster_custom_object(GROUP, VERSION, "clusterkopfpeerings", field_selector=selector)]
    objects = [o for listed in lists for o in listed["items"]]
    now = datetime.now(UTC)
    return sorted({p for o in objects for p in blocking_peers(o.get("status", {}), identity, PRIORITY, now)})
