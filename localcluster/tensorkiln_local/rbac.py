"""Every Kubernetes API call the operator makes, as data: the Helm chart's RBAC must grant exactly these.

One row per (API group, resource) with the verbs used and where, derived from the code:
cluster/state.py, controllers/ (handlers, events, compilejob, inferencemodel, scaler), review/, admission/ and
what kopf itself does (it lists and watches what it handles, patches its progress annotations
onto InferenceModels and CompileJobs, posts Events, watches CRDs and, when watching some
namespaces only, namespaces); with leader election, its Lease.
Server-side apply is a `patch`, and also needs `create` when the object does not exist yet.

tests/unit/test_chart.py renders charts/tensorkiln and checks that the Roles and ClusterRoles it
binds grant exactly `expected_permissions(...)`: a call added to the code without a row here
fails in a real cluster with 403, and a grant left in the chart without a row fails that test.
tests/integration/test_rbac_audit.py checks the table against the calls the chart's operator
really makes, read from the API server's audit log (tensorkiln_local.rbac_audit).
"""

from __future__ import annotations

from dataclasses import dataclass

# Where a grant applies.
WATCHED = "watched"  # a namespaced resource: in every watched namespace (cluster-wide when all are)
CLUSTER = "cluster"  # a cluster-scoped resource
SECRET_NAMESPACES = "secret-namespaces"  # a registry Secret, by name, in registry.secretNamespaces
RELEASE = "release"  # one object, by name, in the namespace the operator runs in
RELEASE_ANY = "release-any"  # in the namespace the operator runs in, any name (create cannot be limited by name)

# When a grant applies (a row applies when all of its conditions hold).
ALL_NAMESPACES = "all-namespaces"  # watchNamespaces empty
SOME_NAMESPACES = "some-namespaces"  # watchNamespaces set
LEADER_ELECTION = "leader-election"  # leaderElection.enabled
REGISTRY_SECRET = "registry-secret"  # the registry has a credentials Secret (S3)
REGISTRY_PUSH_SECRET = "registry-push-secret"  # an oci:// registry with a push Secret (registry.oci.pushSecret)
REGISTRY_PULL_SECRET = "registry-pull-secret"  # an oci:// registry with a pull Secret (registry.oci.pullSecret)
WEBHOOK_SELF_SIGNED = "webhook-self-signed"  # webhook on, cert-manager absent: the operator keeps its own cert


@dataclass(frozen=True)
class ApiCall:
    group: str  # "" is the core group
    resource: str  # plural, or plural/subresource
    verbs: tuple[str, ...]
    where: str
    why: str
    when: tuple[str, ...] = ()  # conditions, all of which must hold; () is always


CALLS: tuple[ApiCall, ...] = (
    # The API types.
    ApiCall(
        "tensorkiln.dev",
        "inferencemodels",
        ("get", "list", "watch", "patch"),
        WATCHED,
        "kopf watches and annotates them; the resync loop lists them; owned-object events get their owner",
    ),
    ApiCall("tensorkiln.dev", "inferencemodels/status", ("patch",), WATCHED, "status, by server-side apply"),
    ApiCall(
        "tensorkiln.dev",
        "compilejobs",
        ("get", "list", "watch", "create", "patch"),
        WATCHED,
        "applied per target; kopf watches and annotates them; listed per model and by the resync loop",
    ),
    ApiCall("tensorkiln.dev", "compilejobs/status", ("patch",), WATCHED, "status, by server-side apply"),
    # What the operator builds and watches.
    ApiCall(
        "batch",
        "jobs",
        ("list", "watch", "create", "patch", "delete"),
        WATCHED,
        "compile Jobs: applied, listed per CompileJob, watched (kopf event handler), superseded ones deleted",
    ),
    ApiCall("", "pods", ("list", "watch"), WATCHED, "compile and Triton pods: listed for status, watched for progress"),
    ApiCall(
        "apps",
        "deployments",
        ("get", "list", "watch", "create", "patch"),
        WATCHED,
        "Triton Deployments: read, applied, watched (kopf event handler)",
    ),
    ApiCall(
        "apps", "deployments/scale", ("patch",), WATCHED, "the SLO scaler sets replicas through the scale subresource"
    ),
    ApiCall(
        "",
        "configmaps",
        ("get", "list", "watch", "create", "patch"),
        WATCHED,
        "Triton model configs: watched (cache), read before one is created, applied",
    ),
    ApiCall(
        "",
        "services",
        ("get", "list", "watch", "create", "patch"),
        WATCHED,
        "per-model and per-target Services: watched (cache), read before one is created, applied",
    ),
    ApiCall(
        "policy",
        "poddisruptionbudgets",
        ("get", "list", "watch", "create", "patch", "delete"),
        WATCHED,
        "from 2 replicas: watched (cache), read before one is created, applied; deleted below",
    ),
    ApiCall(
        "autoscaling",
        "horizontalpodautoscalers",
        ("get", "list", "watch", "create", "patch", "delete"),
        WATCHED,
        "spec.slo.mode HPA: watched (cache), read before one is created, applied; deleted in other modes",
    ),
    ApiCall("", "events", ("create",), WATCHED, "controllers.events and kopf's own warnings"),
    ApiCall(
        "",
        "persistentvolumeclaims",
        ("get", "list", "watch"),
        WATCHED,
        "spec review (webhook and reconciler): pvc:// sources and the registry's claim exist (cache)",
    ),
    # Cluster-scoped reads.
    ApiCall("", "nodes", ("list", "watch"), CLUSTER, "hardware classes are discovered from node labels (cache)"),
    ApiCall(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        CLUSTER,
        "kopf's resource observer notices CRDs appear and go",
    ),
    ApiCall(
        "",
        "namespaces",
        ("list", "watch"),
        CLUSTER,
        "kopf's namespace observer (not run cluster-wide)",
        (SOME_NAMESPACES,),
    ),
    # Leader election (tensorkiln.leadership): one replica reconciles; the client reads, creates and replaces.
    ApiCall(
        "coordination.k8s.io",
        "leases",
        ("create",),
        RELEASE_ANY,
        "the leader-election Lease, made by the first replica",
        (LEADER_ELECTION,),
    ),
    ApiCall(
        "coordination.k8s.io",
        "leases",
        ("get", "update"),
        RELEASE,
        "the leader-election Lease: renewed by the leader, taken over by a standby, handed back on a clean stop",
        (LEADER_ELECTION,),
    ),
    # Secrets: by name only.
    ApiCall(
        "",
        "secrets",
        ("get",),
        SECRET_NAMESPACES,
        "the registry credentials Secret (S3): read access only, by name, in registry.secretNamespaces",
        (REGISTRY_SECRET,),
    ),
    ApiCall(
        "",
        "secrets",
        ("get",),
        SECRET_NAMESPACES,
        "an oci:// registry's push Secret (compile pods mount it): spec review asks only whether it exists "
        "(MissingSecret), by name, in registry.secretNamespaces",
        (REGISTRY_PUSH_SECRET,),
    ),
    ApiCall(
        "",
        "secrets",
        ("get",),
        SECRET_NAMESPACES,
        "an oci:// registry's pull Secret (Triton pods' engine-fetch mounts it): spec review asks only whether it "
        "exists (MissingSecret), by name, in registry.secretNamespaces",
        (REGISTRY_PULL_SECRET,),
    ),
    ApiCall(
        "",
        "secrets",
        ("get", "update", "patch"),
        RELEASE,
        "the webhook serving certificate the operator keeps when cert-manager is absent (chart creates it empty)",
        (WEBHOOK_SELF_SIGNED,),
    ),
    ApiCall(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        ("get", "patch"),
        CLUSTER,
        "caBundle of the chart's own ValidatingWebhookConfiguration, when cert-manager is absent",
        (WEBHOOK_SELF_SIGNED,),
    ),
)


@dataclass(frozen=True, order=True)
class Permission:
    """One effective grant: `namespace` None means cluster-wide; `name` None means any object."""

    namespace: str | None
    group: str
    resource: str
    verb: str
    name: str | None = None


def expected_permissions(
    *,
    release_namespace: str,
    watch_namespaces: list[str],
    lease: str | None = None,
    registry_secret: str | None = None,
    registry_push_secret: str | None = None,
    registry_pull_secret: str | None = None,
    secret_namespaces: list[str] | None = None,
    webhook_secret: str | None = None,
    webhook_configuration: str | None = None,
) -> set[Permission]:
    """What the operator needs under these chart values (`lease`: leader election on, the Lease's name;
    `webhook_*` set: webhook on without cert-manager; `registry_push_secret`/`registry_pull_secret`: an
    oci:// registry's, registry.oci.pushSecret/pullSecret)."""
    active = {SOME_NAMESPACES if watch_namespaces else ALL_NAMESPACES}
    if lease:
        active.add(LEADER_ELECTION)
    secret_of = {
        REGISTRY_SECRET: registry_secret,
        REGISTRY_PUSH_SECRET: registry_push_secret,
        REGISTRY_PULL_SECRET: registry_pull_secret,
    }
    active |= {condition for condition, secret in secret_of.items() if secret}
    if webhook_secret:
        active.add(WEBHOOK_SELF_SIGNED)
    granted: set[Permission] = set()
    for call in CALLS:
        if not set(call.when) <= active:
            continue
        if call.where == WATCHED:
            places = [(ns, None) for ns in watch_namespaces] or [(None, None)]
        elif call.where == CLUSTER:
            places = [(None, webhook_configuration if WEBHOOK_SELF_SIGNED in call.when else None)]
        elif call.where == SECRET_NAMESPACES:
            (secret,) = [secret_of[condition] for condition in call.when if condition in secret_of]
            places = [(ns, secret) for ns in (secret_namespaces or [release_namespace])]
        elif call.where == RELEASE_ANY:
            places = [(release_namespace, None)]
        else:
            places = [(release_namespace, lease if LEADER_ELECTION in call.when else webhook_secret)]
        granted |= {Permission(ns, call.group, call.resource, verb, name) for ns, name in places for verb in call.verbs}
    return granted
