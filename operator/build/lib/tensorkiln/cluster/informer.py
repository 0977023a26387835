"""One informer per cached kind (and watched namespace): LIST, then WATCH from that listing's
resourceVersion, in a thread of its own, keeping the kind's objects in the watch cache and telling
a callback what changed. A LIST again only when the API server says the version is gone (410).

Why not kopf's indexes (`@kopf.index`), which the cache used before: kopf holds back every
object's handlers until every index has its initial listing, with one toggle per object in one
asyncio.Condition, and every toggle wakes every waiting object. The initial listing then costs
O(n²) on kopf's event loop: a restart at 1000 models (about 8000 watched objects) took six
minutes, nearly all of it in kopf's aiotoggles. A plain list and watch per kind is linear, and
kopf no longer runs a worker per Pod, Job or Deployment. Bodies are read as JSON, never turned
into the client's model classes (which cost far more than the request).
"""

import json
import logging
import threading
from collections.abc import Callable

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from tensorkiln.cluster.cache import KINDS, CachedKind, KindStore, WatchCache
from tensorkiln.observability.metrics import WATCH_RECONNECTS

log = logging.getLogger(__name__)

PAGE = 500  # objects per LIST page
WATCH_SECONDS = 300  # the API server ends each watch after this; the next one resumes from its version
CONNECT_SECONDS, READ_SECONDS = 30, WATCH_SECONDS + 30  # a silently dead connection is replaced
MAX_BACKOFF_SECONDS = 30.0

# (kind, event type ADDED/MODIFIED/DELETED, the object)
OnEvent = Callable[[str, str, dict], None]


class Gone(Exception):
    """The version watched from is no longer in the API server's history: list again."""


class Informer:
    def __init__(
        self,
        api: client.ApiClient,
        kind: CachedKind,
        store: KindStore,
        namespace: str | None,
        on_listed: Callable[[], None],
        on_event: OnEvent,
    ):
        self.api, self.kind, self.store, self.namespace = api, kind, store, namespace
        self.on_listed, self.on_event = on_listed, on_event
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"informer {kind.plural} {namespace or '*'}", daemon=True
        )
        self._listed_once = False

    @property
    def path(self) -> str:
        kind = self.kind
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        scope = f"/namespaces/{self.namespace}" if self.namespace and kind.namespaced else ""
        return f"{base}{scope}/{kind.plural}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """The thread ends at its next event or watch timeout (it is a daemon: exit does not wait)."""
        self._stopped.set()

    def _get(self, params: dict, timeout: tuple[float, float]):
        if self.kind.selector:
            params = {**params, "labelSelector": self.kind.selector}
        serialized = self.api.param_serialize(
            "GET", self.path, query_params=list(params.items()), auth_settings=["BearerToken"]
        )
        response = self.api.call_api(*serialized, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise client.ApiException(http_resp=response)
        return response

    def _list(self) -> str:
        """Every object, page by page, put in the store in place of what it held; returns the
        listing's resourceVersion."""
        objects, token = [], None
        while True:
            params = {"limit": PAGE, **({"continue": token} if token else {})}
            response = self._get(params, (CONNECT_SECONDS, READ_SECONDS))
            response.read()
            listing = json.loads(response.data)
            for item in listing.get("items") or []:
                # A LIST leaves kind and apiVersion out of its items; the reconcilers compare them.
                item.setdefault("kind", self.kind.kind)
                item.setdefault("apiVersion", self.kind.api_version)
                objects.append(item)
            token = listing.get("metadata", {}).get("continue")
            if not token:
                break
        changes = self.store.replace(objects, self.namespace if self.kind.namespaced else None)
        if self._listed_once:  # a relist: tell what changed meanwhile, as events would have
            for type_, obj in changes:
                self.on_event(self.kind.kind, type_, obj)
        self._listed_once = True
        self.on_listed()
        return listing.get("metadata", {}).get("resourceVersion", "")

    def _watch(self, version: str) -> str:
        """Events from `version` until the API server ends the watch; returns the last version seen."""
        params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": WATCH_SECONDS}  # fmt: skip
        response = self._get(params, (CONNECT_SECONDS, READ_SECONDS))
        try:
            for line in iter_resp_lines(response.response):
                if self._stopped.is_set():
                    break
                event = json.loads(line)
                type_, obj = event.get("type"), event.get("object") or {}
                if type_ == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message", ""))
                    raise client.ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj.get("metadata", {}).get("resourceVersion") or version
                if type_ == "BOOKMARK":
                    continue
                if type_ == "DELETED":
                    self.store.remove(obj)
                else:
                    self.store.put(obj)
                self.on_event(self.kind.kind, type_, obj)
        finally:
            response.response.release_conn()
        return version

    def _run(self) -> None:
        version, backoff = None, 1.0
        while not self._stopped.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                backoff = 1.0
            except Gone:
                WATCH_RECONNECTS.labels("expired").inc()
                version = None
            except Exception as error:  # the API server away, a dropped connection: retry, never die
                WATCH_RECONNECTS.labels("error").inc()
                log.warning("watch of %s failed (retrying in %.0f s): %s", self.path, backoff, error)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                version = None  # a version from before the failure may be gone: list again


def start_informers(
    api: client.ApiClient,
    cache: WatchCache,
    namespaces: list[str],
    on_event: OnEvent,
    on_filled: Callable[[], None] = lambda: None,
) -> list[Informer]:
    """An informer per cached kind and watched namespace (one per kind for every namespace, and
    for cluster-scoped kinds), started; the cache serves once each has its first listing, and
    `on_filled` is called then, once."""
    scopes = namespaces or [None]
    plan = [(kind, ns) for kind in KINDS for ns in (scopes if kind.namespaced else [None])]
    waiting, guard = set(range(len(plan))), threading.Lock()

    def listed(number: int) -> None:
        with guard:
            first = bool(waiting)
            waiting.discard(number)
            filled = first and not waiting
        if filled:
            cache.mark_filled()
            on_filled()

    informers = [
        Informer(api, kind, cache.stores[kind.kind], ns, lambda n=n: listed(n), on_event)
        for n, (kind, ns) in enumerate(plan)
    ]
    for informer in informers:
        informer.start()
    return informers
