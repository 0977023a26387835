"""What the admission checks read from the cluster and the registry: shared by the webhook and
the reconciler, so both report the same findings."""

from __future__ import annotations

import logging

from kubernetes import client
from kubernetes.dynamic.exceptions import DynamicApiError
from tensorkiln_api.registry import Registry, RegistryError

from tensorkiln.builders.compilejob import build_compile_job, cache_key
from tensorkiln.cluster.state import ClusterState
from tensorkiln.review import checks
from tensorkiln.settings import Settings

log = logging.getLogger(__name__)


def exists_in(state: ClusterState, namespace: str) -> checks.Exists:
    """exists(kind, name): False when absent; None (not checked) when forbidden or failing.
    PersistentVolumeClaims come from the watch cache where it serves them (one it lacks is looked
    up before it counts as absent); a Secret is asked
    for by name (the chart grants Secrets by name only, so they are never watched or listed)."""

    def exists(kind: str, name: str) -> bool | None:
        try:
            if kind == "PersistentVolumeClaim":
                if state.get("v1", kind, namespace, name) is not None:
                    return True
                # Absent from the cache may be just created, its watch event on its way: a refusal is
                # confirmed by a GET (only a model naming a missing claim pays for it).
                return state.read("v1", kind, namespace, name) is not None
            # Only whether it is there: a Secret's data is never looked at.
            state.core.read_namespaced_secret(name, namespace, _preload_content=False).release_conn()
        except (client.ApiException, DynamicApiError) as error:
            if error.status == 404:
                return False
            log.debug("cannot check %s %s/%s: %s %s", kind, namespace, name, error.status, error.reason)
            return None
        return True

    return exists


def _engine_manifest(state, registry, settings, model, spec, target, compile_job, *, cache_lookup):
    """The engine a target would serve: the registry's cache entry for the spec as it is now
    (webhook: `cache_lookup`), else the engine its CompileJob published."""
    try:
        if cache_lookup:
            key = cache_key(build_compile_job(model, spec, target, settings), settings)
            hit = registry.lookup(key) if key else None
            if hit is not None:
                return hit.manifest
        engine = ((compile_job or {}).get("status") or {}).get("engine")
        if engine and engine.get("digest"):
            return state.manifest(registry, engine["digest"])
    except (RegistryError, OSError, ValueError) as error:
        log.debug("no measured latency for %s: %s", target.name, error)
    return None


def review(
    state: ClusterState,
    registry: Registry | None,
    settings: Settings,
    model: dict,
    spec: dict,
    compile_jobs: dict[str, dict] | None = None,
    *,
    cache_lookup: bool = False,
) -> list[checks.Finding]:
    """Every finding for `model` with its validated `spec` (camelCase, defaults applied);
    `compile_jobs` by hardware class, as observed."""
    namespace = model["metadata"]["namespace"]
    nodes = state.nodes()
    manifests = {}
    if spec.get("slo") and registry is not None:
        for target in checks.targets_with_nodes(spec, nodes):
            job = (compile_jobs or {}).get(target.name)
            manifests[target.name] = _engine_manifest(
                state, registry, settings, model, spec, target, job, cache_lookup=cache_lookup
            )
    return checks.review(
        spec,
        namespace,
        file_roots=settings.model_file_roots,
        exists=exists_in(state, namespace),
        nodes=nodes,
        measured=checks.measured_latencies(manifests),
        registry_uri=settings.registry_uri,
        registry_secret=settings.registry_secret,
        registry_push_secret=settings.registry_push_secret,
        registry_pull_secret=settings.registry_pull_secret,
    )
