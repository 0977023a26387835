"""The Helm chart (charts/tensorkiln) and the manifests rendered from it.

Rendered with the helm binary built from the pinned Go module (built on first use, minutes; the
Makefile's unit step builds it first). RBAC is checked against localcluster/tensorkiln_local/rbac.py, the
table of API calls the operator makes: exactly those grants, no wildcards.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tensorkiln.builders import labels, serving, storage
from tensorkiln_api.registry import RegistryError, open_registry
from tensorkiln_api.registry.filesystem import FilesystemRegistry
from tensorkiln_local import install, installmanifests, rbac
from tensorkiln_local.cluster import network, paths
from tensorkiln_local.crdgen import render_crds
from tensorkiln_local.images import build as images

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tensorkiln"
RELEASE, NAMESPACE = "tk", "tk-system"
FULLNAME = "tk-tensorkiln"
CERT_MANAGER = "cert-manager.io/v1"
SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
S3 = {
    "registry": {
        "kind": "s3",
        "s3": {"endpoint": "https://s3.example.test", "bucket": "engines", "prefix": "prod", "existingSecret": "s3c"},
    }
}
OCI = {
    "registry": {
        "kind": "oci",
        "oci": {
            "repository": "harbor.example.test:8443/ml/engines",
            "insecure": True,
            "pushSecret": "engines-push",
            "pullSecret": "engines-pull",
        },
    }
}
RESTRICTED_CONTAINER = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def render(values=None, *, api_versions=(), chart=CHART, include_crds=False) -> list[dict]:
    text = installmanifests.template(
        values,
        chart=chart,
        release=RELEASE,
        namespace=NAMESPACE,
        api_versions=api_versions,
        include_crds=include_crds,
    )
    return installmanifests.documents(text)


def refused(helm, values) -> str:
    with pytest.raises(subprocess.CalledProcessError) as failure:
        render(values)
    return failure.value.stderr


def of_kind(docs, kind) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind) -> dict:
    (found,) = of_kind(docs, kind)
    return found


def operator_container(docs) -> dict:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def env(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def effective_permissions(docs) -> set[rbac.Permission]:
    """What the operator's ServiceAccount may do, through the rendered (Cluster)Roles and their bindings."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs if "Role" == d["kind"]}
    roles |= {(d["kind"], None, d["metadata"]["name"]): d for d in docs if d["kind"] == "ClusterRole"}
    bound, granted = set(), set()
    for binding in of_kind(docs, "RoleBinding") + of_kind(docs, "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace")
        key = (ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])
        bound.add(key)
        for rule in roles[key]["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            granted.add(rbac.Permission(namespace, group, resource, verb, name))
    assert bound == set(roles), f"roles bound to nothing: {set(roles) - bound}"
    return granted


# --- lint and defaults ---------------------------------------------------------------------------


def test_helm_lint_passes(helm):
    result = subprocess.run([str(helm), "lint", str(CHART), "--strict"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_values_yaml_comments_every_value():
    """Every key in values.yaml has a comment right above it (the standard `resources` block excepted)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    in_resources = False
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        if not line.startswith(" "):
            in_resources = line.startswith("resources:")
        elif in_resources:
            continue
        assert lines[i - 1].lstrip().startswith("#"), f"values.yaml:{i + 1}: {line.strip()} has no comment above it"


ELECTION_ARGS = [
    f"--leader-election-lease={FULLNAME}",
    f"--leader-election-namespace={NAMESPACE}",
    "--lease-duration=8",
    "--renew-deadline=6",
    "--retry-period=2",
]


def test_default_install_watches_all_namespaces_with_leader_election(helm):
    docs = render()
    container = operator_container(docs)
    assert container["args"] == ["--all-namespaces", *ELECTION_ARGS]
    (role,) = of_kind(docs, "Role")  # the Lease's, in the release namespace
    assert role["metadata"] == {**role["metadata"], "name": f"{FULLNAME}-leader-election", "namespace": NAMESPACE}
    assert {d["kind"] for d in docs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    } | ({"ConfigMap"} if (CHART / "dashboards" / "tensorkiln.json").exists() else set())


def test_deployment_is_a_leader_and_a_standby_under_the_restricted_pod_security_standard(helm):
    docs = render()
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # A rollout starts the new pod (a standby) before it stops an old one.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"] == deployment["spec"]["selector"] and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (container,) = pod["containers"]
    assert RESTRICTED_CONTAINER.items() <= container["securityContext"].items()
    assert all("hostPath" not in v for v in pod["volumes"])
    assert "@" in container["image"] or not container["image"].endswith(":latest")


def test_probes_use_kopfs_health_endpoint_and_ports_are_named(helm):
    container = operator_container(render())
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert env(container)["TENSORKILN_HEALTH_PORT"] == "8080"
    assert env(container)["TENSORKILN_METRICS_PORT"] == "9090"


@pytest.mark.parametrize("values", [{}, S3, OCI, {"webhook": {"enabled": True}, "prometheusUrl": "http://prom:9090"}])
def test_every_env_var_is_one_the_operator_reads(helm, values):
    packages = [ROOT / "operator" / "tensorkiln", ROOT / "api" / "tensorkiln_api"]  # what the operator image runs
    source = "\n".join(p.read_text() for package in packages for p in package.rglob("*.py"))
    for name in env(operator_container(render(values))):
        assert f'"{name}"' in source, f"{name} is set by the chart but read nowhere in the operator's packages"


def test_settings_come_from_values(helm):
    values = {
        "compilerImage": "registry.example.test/compiler:1.2.3",
        "prometheusUrl": "http://prometheus.monitoring.svc:9090",
        "resyncSeconds": 30,
        "logFormat": "full",
    }
    variables = env(operator_container(render(values)))
    assert variables["TENSORKILN_COMPILER_IMAGE"] == "registry.example.test/compiler:1.2.3"
    assert variables["TENSORKILN_PROMETHEUS_URL"] == "http://prometheus.monitoring.svc:9090"
    assert variables["TENSORKILN_RESYNC_SECONDS"] == "30"
    assert variables["TENSORKILN_LOG_FORMAT"] == "full"
    assert "TENSORKILN_PROMETHEUS_URL" not in env(operator_container(render()))


def test_engine_sharing_and_volume_size_limits_come_from_values(helm):
    defaults = env(operator_container(render()))
    assert "TENSORKILN_SHARE_ENGINES" not in defaults  # another namespace's engine needs this one's source
    assert [defaults[f"TENSORKILN_{n}_SIZE_LIMIT"] for n in ("MODEL_REPOSITORY", "COMPILE_WORK", "COMPILE_TMP")] == [
        "16Gi", "32Gi", "8Gi"
    ]  # fmt: skip
    values = {"registry": {"shareEngines": True}, "compileWorkSizeLimit": "100Gi"}
    variables = env(operator_container(render(values)))
    assert (
        variables["TENSORKILN_SHARE_ENGINES"] == "true" and variables["TENSORKILN_COMPILE_WORK_SIZE_LIMIT"] == "100Gi"
    )
    assert "compileTmpSizeLimit" in refused(helm, {"compileTmpSizeLimit": "lots"})


def test_recompiles_are_bounded_by_default(helm):
    assert env(operator_container(render()))["TENSORKILN_MAX_CONCURRENT_RECOMPILES"] == "2"
    assert (
        env(operator_container(render({"maxConcurrentRecompiles": 0})))["TENSORKILN_MAX_CONCURRENT_RECOMPILES"] == "0"
    )


def test_engine_fetch_runs_its_own_image_from_engine_fetch_image(helm, monkeypatch):
    """Triton pods' init container: a value of its own, not compilerImage's (a new compiler rolls no Triton pod)."""
    defaults = _operator_settings(monkeypatch, render())
    assert defaults.engine_fetch_image == "ghcr.io/tensorkiln/engine-fetch:0.1.0" != defaults.compiler_image
    pinned = "registry.example.test/engine-fetch@sha256:" + "cd" * 32
    docs = render({"engineFetchImage": pinned, "compilerImage": "registry.example.test/compiler:1.2.3"})
    assert env(operator_container(docs))["TENSORKILN_ENGINE_FETCH_IMAGE"] == pinned
    assert _operator_settings(monkeypatch, docs).engine_fetch_image == pinned
    assert "engineFetchImage" in refused(helm, {"engineFetchImage": "ghcr.io/tensorkiln/engine-fetch:latest"})


def test_image_by_digest(helm):
    digest = "sha256:" + "ab" * 32
    container = operator_container(render({"image": {"tag": "0.2.0", "digest": digest}}))
    assert container["image"] == f"ghcr.io/tensorkiln/operator:0.2.0@{digest}"


def test_without_leader_election_one_replica_is_recreated_and_more_are_refused(helm):
    docs = render({"replicaCount": 1, "leaderElection": {"enabled": False}})
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert operator_container(docs)["args"] == ["--all-namespaces"]
    assert not of_kind(docs, "PodDisruptionBudget")  # minAvailable 1 of 1 would block every drain
    assert "replicaCount above 1 needs leaderElection.enabled" in refused(helm, {"leaderElection": {"enabled": False}})


# --- watched namespaces -------------------------------------------------------------------------


def test_watch_namespaces_gives_roles_per_namespace_and_namespace_args(helm):
    docs = render({"watchNamespaces": ["team-a", "team-b"]})
    assert operator_container(docs)["args"] == ["--namespace=team-a", "--namespace=team-b", *ELECTION_ARGS]
    assert {r["metadata"]["namespace"] for r in of_kind(docs, "Role")} == {"team-a", "team-b", NAMESPACE}
    assert {b["metadata"]["namespace"] for b in of_kind(docs, "RoleBinding")} == {"team-a", "team-b", NAMESPACE}
    # The ClusterRole keeps only cluster-scoped reads.
    cluster_resources = {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert cluster_resources == {"nodes", "customresourcedefinitions", "namespaces"}


# --- RBAC: exactly the table ---------------------------------------------------------------------

RBAC_CASES = {
    "defaults": ({}, (), {}),
    "watch-namespaces": ({"watchNamespaces": ["team-a", "team-b"]}, (), {"watch_namespaces": ["team-a", "team-b"]}),
    "no-leader-election": ({"replicaCount": 1, "leaderElection": {"enabled": False}}, (), {"lease": None}),
    "lease-named": ({"leaderElection": {"leaseName": "tk-leader"}}, (), {"lease": "tk-leader"}),
    "s3-release-namespace": (S3, (), {"registry_secret": "s3c"}),
    "s3-secret-namespaces": (
        {**S3, "registry": {**S3["registry"], "secretNamespaces": ["team-a", "tk-system"]}},
        (),
        {"registry_secret": "s3c", "secret_namespaces": ["team-a", "tk-system"]},
    ),
    "webhook-self-signed": (
        {"webhook": {"enabled": True}, "watchNamespaces": ["team-a"]},
        (),
        {
            "watch_namespaces": ["team-a"],
            "webhook_secret": f"{FULLNAME}-webhook-tls",
            "webhook_configuration": f"{FULLNAME}-webhook",
        },
    ),
    "webhook-cert-manager": ({"webhook": {"enabled": True}}, (CERT_MANAGER,), {}),
    # The kubelet mounts the push and pull Secrets; the operator only asks whether they exist (get, by name).
    "oci": (OCI, (), {"registry_push_secret": "engines-push", "registry_pull_secret": "engines-pull"}),
    "oci-secret-namespaces": (
        {**OCI, "registry": {**OCI["registry"], "secretNamespaces": ["team-a", "team-b"]}},
        (),
        {
            "registry_push_secret": "engines-push",
            "registry_pull_secret": "engines-pull",
            "secret_namespaces": ["team-a", "team-b"],
        },
    ),
    "oci-pull-secret-only": (
        {"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/acme/engines", "pullSecret": "engines-pull"}}},
        (),
        {"registry_pull_secret": "engines-pull"},
    ),
    "oci-without-secrets": ({"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/acme/engines"}}}, (), {}),
}


@pytest.mark.parametrize("case", RBAC_CASES, ids=list(RBAC_CASES))
def test_rbac_grants_exactly_the_api_calls_the_operator_makes(helm, case):
    values, api_versions, expected_args = RBAC_CASES[case]
    docs = render(values, api_versions=api_versions)
    defaults = {"watch_namespaces": [], "lease": FULLNAME}
    expected = rbac.expected_permissions(release_namespace=NAMESPACE, **{**defaults, **expected_args})
    granted = effective_permissions(docs)
    assert sorted(granted - expected, key=str) == [], "granted beyond localcluster/tensorkiln_local/rbac.py"
    assert sorted(expected - granted, key=str) == [], "localcluster/tensorkiln_local/rbac.py needs more than granted"


@pytest.mark.parametrize("case", RBAC_CASES, ids=list(RBAC_CASES))
def test_rbac_has_no_wildcards_and_secrets_only_by_name(helm, case):
    values, api_versions, _ = RBAC_CASES[case]
    for role in of_kind(render(values, api_versions=api_versions), "Role") + of_kind(
        render(values, api_versions=api_versions), "ClusterRole"
    ):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in json.dumps(rule.get(key, [])), f"wildcard in {role['metadata']['name']}: {rule}"
            if "secrets" in rule["resources"]:
                assert rule["resources"] == ["secrets"] and rule.get("resourceNames"), rule
                assert "list" not in rule["verbs"] and "watch" not in rule["verbs"], rule


def test_rbac_table_grants_the_oci_secrets_get_by_name_only_in_the_secret_namespaces():
    base = rbac.expected_permissions(release_namespace=NAMESPACE, watch_namespaces=[])
    oci = rbac.expected_permissions(
        release_namespace=NAMESPACE,
        watch_namespaces=[],
        registry_push_secret="engines-push",
        registry_pull_secret="engines-pull",
        secret_namespaces=["team-a"],
    )
    assert oci - base == {
        rbac.Permission("team-a", "", "secrets", "get", "engines-push"),
        rbac.Permission("team-a", "", "secrets", "get", "engines-pull"),
    }


def test_rbac_table_verbs_are_real_verbs():
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
    for call in rbac.CALLS:
        assert set(call.verbs) <= verbs and call.verbs, call
        assert "*" not in call.resource and "*" not in call.group, call


# --- registry ------------------------------------------------------------------------------------


def test_filesystem_registry_is_the_claim_mounted_where_the_operator_reads_pvc_uris(helm):
    docs = render({"registry": {"kind": "filesystem", "filesystem": {"existingClaim": "engines-rwx", "path": "prod"}}})
    container = operator_container(docs)
    uri = env(container)["TENSORKILN_REGISTRY_URI"]
    assert uri == "pvc://engines-rwx/prod"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "registry"]
    assert mount["mountPath"] == "/mnt/pvc/engines-rwx"
    (volume,) = [v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "registry"]
    assert volume["persistentVolumeClaim"]["claimName"] == "engines-rwx"


def test_the_operator_opens_pvc_registry_uris_under_its_claim_mounts(tmp_path, monkeypatch):
    assert open_registry("pvc://engines-rwx/prod").root == Path("/mnt/pvc/engines-rwx/prod")  # the chart's mount
    monkeypatch.setenv("TENSORKILN_PVC_ROOT", str(tmp_path))
    registry = open_registry("pvc://engines-rwx/prod")
    assert isinstance(registry, FilesystemRegistry) and registry.root == tmp_path / "engines-rwx" / "prod"
    assert registry.engine_uri("d" * 64) == f"pvc://engines-rwx/prod/engines/{'d' * 64}"
    assert open_registry("pvc://engines-rwx").root == tmp_path / "engines-rwx"
    with pytest.raises(RegistryError, match="pvc:///prod"):
        open_registry("pvc:///prod")


def test_s3_registry_takes_credentials_from_the_existing_secret_only(helm):
    container = operator_container(render(S3))
    variables = env(container)
    assert variables["TENSORKILN_REGISTRY_URI"] == "s3://engines/prod"
    assert variables["TENSORKILN_REGISTRY_SECRET"] == "s3c"
    assert variables["TENSORKILN_S3_ENDPOINT"] == "https://s3.example.test"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert variables[key] == {"secretKeyRef": {"name": "s3c", "key": key}}
    assert not any(m["name"] == "registry" for m in container["volumeMounts"])


def test_oci_registry_passes_the_push_and_pull_secrets_and_the_operator_reads_with_the_pull_one(helm):
    docs = render(OCI)
    container = operator_container(docs)
    variables = env(container)
    assert variables["TENSORKILN_REGISTRY_URI"] == "oci://harbor.example.test:8443/ml/engines"
    assert variables["TENSORKILN_REGISTRY_PUSH_SECRET"] == "engines-push"
    assert variables["TENSORKILN_REGISTRY_PULL_SECRET"] == "engines-pull"
    assert variables["TENSORKILN_OCI_INSECURE"] == "true"
    assert variables["DOCKER_CONFIG"] == "/var/run/tensorkiln/registry-auth"
    assert not {"TENSORKILN_REGISTRY_SECRET", "AWS_ACCESS_KEY_ID"} & set(variables)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "registry-auth"]
    assert mount == {"name": "registry-auth", "mountPath": "/var/run/tensorkiln/registry-auth", "readOnly": True}
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == "registry-auth"]
    assert volume["secret"] == {
        "secretName": "engines-pull",
        "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
    }
    assert not any(v["name"] == "registry" for v in volumes)


def test_the_oci_push_and_pull_secrets_are_settings_the_operator_reads(helm, monkeypatch):
    settings = _operator_settings(monkeypatch, render(OCI))
    assert settings.registry_uri == "oci://harbor.example.test:8443/ml/engines"
    assert (settings.registry_push_secret, settings.registry_pull_secret) == ("engines-push", "engines-pull")
    assert settings.oci_insecure is True
    # The operator pod's credentials are where its pods' are (builders.storage), in the same form.
    assert env(operator_container(render(OCI)))["DOCKER_CONFIG"] == storage.REGISTRY_AUTH_DIR


def test_oci_registry_without_secrets_or_insecure_sets_only_the_uri(helm):
    docs = render({"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/acme/engines"}}})
    container = operator_container(docs)
    variables = env(container)
    assert variables["TENSORKILN_REGISTRY_URI"] == "oci://ghcr.io/acme/engines"
    oci_settings = {"TENSORKILN_REGISTRY_PUSH_SECRET", "TENSORKILN_REGISTRY_PULL_SECRET", "TENSORKILN_OCI_INSECURE"}
    assert not (oci_settings | {"DOCKER_CONFIG"}) & set(variables)
    assert not any(m["name"] == "registry-auth" for m in container["volumeMounts"])


def _registry_secret_roles(docs) -> dict[str, list[dict]]:
    """The rules of the registry Secret Roles, by namespace (each bound to the operator by name)."""
    name = f"{FULLNAME}-registry-secret"
    roles = {r["metadata"]["namespace"]: r["rules"] for r in of_kind(docs, "Role") if r["metadata"]["name"] == name}
    bindings = {(b["metadata"]["namespace"], b["metadata"]["name"]): b["roleRef"] for b in of_kind(docs, "RoleBinding")}
    for namespace in roles:
        assert bindings[namespace, name] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    return roles


def test_oci_push_and_pull_secrets_are_got_by_name_in_the_secret_namespaces(helm):
    """The review's MissingSecret check for an oci:// registry needs `get` on both Secrets, by name only,
    where models live (registry.secretNamespaces; empty: the release namespace)."""
    both = [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["engines-push", "engines-pull"],
            "verbs": ["get"],
        }
    ]
    assert _registry_secret_roles(render(OCI)) == {NAMESPACE: both}
    namespaces = {**OCI, "registry": {**OCI["registry"], "secretNamespaces": ["team-a", "team-b"]}}
    assert _registry_secret_roles(render(namespaces)) == {"team-a": both, "team-b": both}
    # One name set, or both the same: that name once.
    for oci in ({"pullSecret": "engines-pull"}, {"pushSecret": "engines-pull", "pullSecret": "engines-pull"}):
        values = {"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/acme/engines", **oci}}}
        assert _registry_secret_roles(render(values)) == {NAMESPACE: [{**both[0], "resourceNames": ["engines-pull"]}]}
    # Neither set: anonymous pushes and reads, nothing to check, no Role.
    assert _registry_secret_roles(render({"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/a/b"}}})) == {}


def test_oci_values_are_ignored_under_other_registry_kinds(helm):
    oci_values = OCI["registry"]["oci"]
    for kind_values in ({}, S3):
        registry = {**kind_values.get("registry", {}), "oci": oci_values}
        assert render({"registry": registry}) == render(kind_values or None)


# --- schema --------------------------------------------------------------------------------------

BAD_VALUES = {
    "unknown registry kind": ({"registry": {"kind": "nfs"}}, "/registry/kind"),
    "s3 without bucket or secret": ({"registry": {"kind": "s3"}}, "/registry"),
    "s3 credentials inline": ({"registry": {"s3": {"accessKey": "AKIA"}}}, "accessKey"),
    "oci without repository": ({"registry": {"kind": "oci"}}, "/registry"),
    "oci repository as a URI": ({"registry": {"kind": "oci", "oci": {"repository": "oci://ghcr.io/a"}}}, "/registry"),
    "oci repository uppercase": ({"registry": {"kind": "oci", "oci": {"repository": "ghcr.io/Acme"}}}, "/registry"),
    "oci credentials inline": ({"registry": {"oci": {"password": "hunter2"}}}, "password"),
    "oci insecure as text": ({"registry": {"oci": {"insecure": "yes"}}}, "/registry/oci/insecure"),
    "oci bad secret name": ({"registry": {"oci": {"pullSecret": "Engines_Pull"}}}, "/registry/oci/pullSecret"),
    "negative resync": ({"resyncSeconds": -1}, "/resyncSeconds"),
    "zero resync": ({"resyncSeconds": 0}, "/resyncSeconds"),
    "negative port": ({"metrics": {"port": -1}}, "/metrics/port"),
    "port as text": ({"health": {"port": "8080"}}, "/health/port"),
    "webhook timeout over 30": ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
    "unknown failure policy": ({"webhook": {"failurePolicy": "Maybe"}}, "/webhook/failurePolicy"),
    "namespace list as text": ({"watchNamespaces": "team-a"}, "/watchNamespaces"),
    "bad namespace name": ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    "latest image tag": ({"image": {"tag": "latest"}}, "/image/tag"),
    "unknown top-level key": ({"replicas": 2}, "replicas"),
    # Removed (every engine is served natively): values written for an older chart are refused, naming it.
    "removed servingRuntime": ({"servingRuntime": "python-backend"}, "servingRuntime"),
    "enabled as text": ({"webhook": {"enabled": "yes"}}, "/webhook/enabled"),
}


@pytest.mark.parametrize("case", BAD_VALUES, ids=list(BAD_VALUES))
def test_schema_refuses_bad_values(helm, case):
    values, where = BAD_VALUES[case]
    message = refused(helm, values)
    assert "schema" in message and where in message, message


def test_schema_is_draft_07():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"


# --- metrics, webhook, dashboard -----------------------------------------------------------------


def test_metrics_service_and_scrape_annotations_without_prometheus_operator(helm):
    docs = render()
    (service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == f"{FULLNAME}-metrics"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    annotations = one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9090"
    assert not of_kind(docs, "ServiceMonitor")


def test_service_monitor_only_when_the_cluster_serves_it(helm):
    docs = render(api_versions=[SERVICE_MONITOR])
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert "annotations" not in one(docs, "Deployment")["spec"]["template"]["metadata"]
    off = render({"metrics": {"port": 9090, "serviceMonitor": {"enabled": False}}}, api_versions=[SERVICE_MONITOR])
    assert not of_kind(off, "ServiceMonitor")


POD_MONITOR = "monitoring.coreos.com/v1/PodMonitor"


def test_triton_pod_monitor_only_when_the_cluster_serves_it_and_it_selects_the_operators_triton_pods(helm):
    assert not of_kind(render(), "PodMonitor")
    monitor = one(render(api_versions=[POD_MONITOR]), "PodMonitor")
    # The labels builders.serving gives every Triton pod template.
    pod_labels = {**serving.selector({"metadata": {"name": "m"}}), **labels.MANAGED_BY}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and ("metrics", 8002) in serving.PORTS
    hardware = "__meta_kubernetes_pod_label_" + re.sub(
        r"[^a-zA-Z0-9_]", "_", labels.HARDWARE_CLASS
    )  # as Prometheus names it
    assert {"sourceLabels": [hardware], "targetLabel": "hardware_class"} in endpoint["relabelings"]
    scoped = one(render({"watchNamespaces": ["team-a"]}, api_versions=[POD_MONITOR]), "PodMonitor")
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    off = render({"metrics": {"port": 9090, "tritonPodMonitor": {"enabled": False}}}, api_versions=[POD_MONITOR])
    assert not of_kind(off, "PodMonitor")


def test_webhook_is_off_by_default(helm):
    docs = render()
    assert not of_kind(docs, "ValidatingWebhookConfiguration")
    assert "webhook" not in {p["name"] for p in operator_container(docs)["ports"]}


def test_webhook_without_cert_manager_uses_a_secret_the_operator_fills(helm):
    docs = render({"webhook": {"enabled": True}})
    config = one(docs, "ValidatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"] == {
        "name": f"{FULLNAME}-webhook",
        "namespace": NAMESPACE,
        "path": "/validate-inferencemodel",
        "port": 443,
    }
    assert hook["rules"] == [
        {
            "apiGroups": ["tensorkiln.dev"],
            "apiVersions": ["v1alpha1"],
            "resources": ["inferencemodels"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert "annotations" not in config["metadata"]
    (service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == f"{FULLNAME}-webhook"]
    assert service["spec"]["ports"][0]["port"] == 443 and service["spec"]["ports"][0]["targetPort"] == "webhook"
    container = operator_container(docs)
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    secret = one(docs, "Secret")
    assert secret["metadata"]["name"] == f"{FULLNAME}-webhook-tls" and "data" not in secret
    assert not of_kind(docs, "Certificate") and not of_kind(docs, "Issuer")


def test_webhook_with_cert_manager(helm):
    docs = render({"webhook": {"enabled": True, "failurePolicy": "Fail"}}, api_versions=[CERT_MANAGER])
    config = one(docs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{FULLNAME}-webhook"
    assert config["webhooks"][0]["failurePolicy"] == "Fail"
    certificate = one(docs, "Certificate")
    assert certificate["spec"]["secretName"] == f"{FULLNAME}-webhook-tls"
    assert f"{FULLNAME}-webhook.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert one(docs, "Issuer")["spec"] == {"selfSigned": {}}
    assert not of_kind(docs, "Secret")


def test_webhook_only_sees_watched_namespaces(helm):
    docs = render({"webhook": {"enabled": True}, "watchNamespaces": ["team-a"]})
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
    ]


def test_dashboard_config_map_only_when_the_chart_has_the_dashboard(helm, tmp_path):
    chart = tmp_path / "tensorkiln"
    shutil.copytree(CHART, chart)
    (chart / "dashboards" / "tensorkiln.json").unlink(missing_ok=True)
    assert not of_kind(render(chart=chart), "ConfigMap")
    (chart / "dashboards" / "tensorkiln.json").write_text('{"title": "TensorKiln"}\n')
    config_map = one(render(chart=chart), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["tensorkiln.json"]) == {"title": "TensorKiln"}
    assert not of_kind(render({"dashboards": {"enabled": False}}, chart=chart), "ConfigMap")


# --- generated files -----------------------------------------------------------------------------


def test_chart_crds_are_current():
    committed = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    rendered = render_crds()
    assert set(committed) == set(rendered), "charts/tensorkiln/crds/ is out of date: run `tensorkiln-local crds`"
    for name, text in rendered.items():
        assert committed[name] == text, f"charts/tensorkiln/crds/{name} is out of date: run `tensorkiln-local crds`"


def test_chart_crds_are_the_top_level_crds():
    chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert chart == {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}


def test_install_manifests_are_current(helm):
    rendered = installmanifests.render()
    on_disk = {
        str(p.relative_to(paths.MANIFESTS_DIR)): p.read_text()
        for p in [*(paths.MANIFESTS_DIR / "install").glob("*.yaml"), paths.MANIFESTS_DIR / "kustomization.yaml"]
        if p.exists()
    }
    assert set(on_disk) == set(rendered), "manifests/install is out of date: run `make manifests`"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"manifests/{name} is out of date: run `make manifests`"


def test_install_manifests_are_the_chart_with_defaults_and_a_namespace(helm):
    docs = [d for p in sorted((paths.MANIFESTS_DIR / "install").glob("*.yaml")) if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d]  # fmt: skip
    assert one(docs, "Namespace")["metadata"]["name"] == installmanifests.NAMESPACE
    assert {c["metadata"]["name"] for c in of_kind(docs, "CustomResourceDefinition")} == {
        "inferencemodels.tensorkiln.dev",
        "compilejobs.tensorkiln.dev",
    }
    for doc in docs:
        namespaced = doc["kind"] not in {
            "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        }  # fmt: skip
        assert (doc["metadata"].get("namespace") == installmanifests.NAMESPACE) == namespaced, doc["metadata"]


def test_kustomization_builds_with_the_samples(helm):
    kubectl = paths.BIN_DIR / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl is built with the cluster binaries (tensorkiln-local cluster build)")
    built = subprocess.run(
        [str(kubectl), "kustomize", str(paths.MANIFESTS_DIR)], capture_output=True, text=True, check=True
    ).stdout
    docs = installmanifests.documents(built)
    samples = [yaml.safe_load(p.read_text()) for p in (paths.MANIFESTS_DIR / "samples").glob("*.yaml")]
    assert len(of_kind(docs, "InferenceModel")) == len(samples)
    assert one(docs, "Deployment")["metadata"]["name"] == "tensorkiln"


def _operator_settings(monkeypatch, docs):
    """Settings.from_env() under the Deployment's env (fieldRefs as the kubelet resolves them)."""
    from tensorkiln.settings import Settings

    for name, value in env(operator_container(docs)).items():
        if isinstance(value, dict) and value.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            value = NAMESPACE
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    return Settings.from_env()


def test_webhook_is_served_where_the_chart_calls_it(helm, monkeypatch):
    from tensorkiln.admission import webhook

    docs = render({"webhook": {"enabled": True, "port": 9555}})
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"]["path"] == f"/{webhook.HANDLER_ID}"  # kopf serves /<handler id>
    assert hook["name"] == webhook.WEBHOOK_NAME
    assert {"name": "webhook", "containerPort": 9555, "protocol": "TCP"} in operator_container(docs)["ports"]
    settings = _operator_settings(monkeypatch, docs)
    assert settings.webhook_port == 9555 and settings.webhook_managed is None
    # No cert-manager: the operator keeps the certificate in the chart's Secret, for the Service.
    assert settings.webhook_cert_secret == one(docs, "Secret")["metadata"]["name"] == f"{FULLNAME}-webhook-tls"
    assert settings.webhook_service == settings.webhook_configuration == f"{FULLNAME}-webhook"
    assert settings.pod_namespace == NAMESPACE
    # The local cluster's own configuration has the chart's rules.
    local = webhook.build_configuration("local", {"url": "https://127.0.0.1:9443/validate-inferencemodel"}, [])
    assert local["webhooks"][0]["rules"] == hook["rules"]
    assert local["webhooks"][0]["failurePolicy"] == "Ignore"


def test_webhook_with_cert_manager_reads_the_mounted_certificate(helm, monkeypatch):
    docs = render({"webhook": {"enabled": True}}, api_versions=[CERT_MANAGER])
    settings = _operator_settings(monkeypatch, docs)
    assert settings.webhook_port == 9443 and settings.webhook_cert_secret is None
    mount = next(m for m in operator_container(docs)["volumeMounts"] if m["name"] == "webhook-cert")
    assert settings.webhook_cert_dir == mount["mountPath"]


def test_file_sources_are_refused_unless_roots_are_given(helm, monkeypatch):
    settings = _operator_settings(monkeypatch, render())
    assert settings.model_file_roots == () and settings.webhook_port == 0
    docs = render({"modelFileRoots": ["/var/lib/models", "/srv/onnx"]})
    assert _operator_settings(monkeypatch, docs).model_file_roots == ("/var/lib/models", "/srv/onnx")
    assert "modelFileRoots" in refused(helm, {"modelFileRoots": ["relative/path"]})


def test_the_compiler_version_of_cache_keys_is_a_chart_value(helm, monkeypatch):
    assert _operator_settings(monkeypatch, render()).compiler_version == "0.1.0"  # the release's
    built = render({"compilerVersion": "0.1.0+build.7"})
    assert _operator_settings(monkeypatch, built).compiler_version == "0.1.0+build.7"
    assert "compilerVersion" in refused(helm, {"compilerVersion": "0.1.0 of today"})


def test_the_scalers_recent_rate_window_is_a_chart_value(helm, monkeypatch):
    assert _operator_settings(monkeypatch, render()).slo_recent_rate_window == "10s"
    assert _operator_settings(monkeypatch, render({"sloRecentRateWindow": "1m"})).slo_recent_rate_window == "1m"
    assert "sloRecentRateWindow" in refused(helm, {"sloRecentRateWindow": "ten seconds"})


# --- the local cluster's install (tensorkiln_local.install) ---------------------------------------


def test_the_local_install_pins_every_image_by_digest_and_serves_the_webhook_through_cert_manager(helm):
    digest = "sha256:" + "ab" * 32
    pushed = {
        name: images.Pushed(name, f"localhost:5000/tensorkiln/{name}", "0.1.0", digest, f"{name[0]}" * 64)
        for name in ("operator", "compiler", "engine-fetch", "serving")
    }
    docs = render(install.chart_values(pushed), api_versions=[CERT_MANAGER])
    container = operator_container(docs)
    assert container["image"] == f"localhost:5000/tensorkiln/operator:0.1.0@{digest}"
    settings = env(container)
    assert settings["TENSORKILN_COMPILER_IMAGE"] == f"localhost:5000/tensorkiln/compiler@{digest}"
    assert settings["TENSORKILN_SERVING_IMAGE"] == f"localhost:5000/tensorkiln/serving@{digest}"
    assert settings["TENSORKILN_ENGINE_FETCH_IMAGE"] == f"localhost:5000/tensorkiln/engine-fetch@{digest}"
    # Engines of another build of the compiler image are not reused: its ID is part of the cache key.
    assert settings["TENSORKILN_COMPILER_VERSION"] == "0.1.0+cccccccccccc"
    # Compiled with the serving image's release's runtimes.
    assert settings["TENSORKILN_SERVING_TARGET"] == "24.10"
    # The cluster's own OCI registry, at local-0's gateway, on plain HTTP, anonymous: no claim, no Secret.
    assert settings["TENSORKILN_REGISTRY_URI"] == f"oci://{network.node_gateway(0)}:5001/tensorkiln/engines"
    assert settings["TENSORKILN_OCI_INSECURE"] == "true"
    assert "TENSORKILN_REGISTRY_PUSH_SECRET" not in settings and "TENSORKILN_REGISTRY_PULL_SECRET" not in settings
    assert settings["TENSORKILN_PROMETHEUS_URL"] == install.PROMETHEUS_SERVICE_URL
    assert one(docs, "Certificate")["spec"]["secretName"] and one(docs, "ValidatingWebhookConfiguration")
    # The integration tests' install: the registry claim.
    claim = env(operator_container(render(install.chart_values(pushed, "pvc"), api_versions=[CERT_MANAGER])))
    assert claim["TENSORKILN_REGISTRY_URI"] == f"pvc://{install.CLAIM}/engines"


def test_the_local_registry_claims_bind_one_volume_in_each_namespace():
    first, second = (install.registry_claim(ns) for ns in ("team-a", "team-b"))
    assert first[1]["metadata"] == {"name": install.CLAIM, "namespace": "team-a"}
    assert first[1]["spec"]["volumeName"] == first[0]["metadata"]["name"] != second[0]["metadata"]["name"]
    assert (
        first[0]["spec"]["hostPath"]
        == second[0]["spec"]["hostPath"]
        == {
            "path": str(install.REGISTRY_VOLUME),
            "type": "Directory",
        }
    )
    assert first[0]["spec"]["claimRef"] == {"namespace": "team-a", "name": install.CLAIM}
    assert first[0]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_workload_image_pull_secrets_reach_compile_and_triton_pods_settings(helm, monkeypatch):
    assert _operator_settings(monkeypatch, render()).image_pull_secrets == ()
    docs = render({"workloadImagePullSecrets": ["registry-credentials", "mirror"]})
    assert _operator_settings(monkeypatch, docs).image_pull_secrets == ("registry-credentials", "mirror")
    assert "workloadImagePullSecrets" in refused(helm, {"workloadImagePullSecrets": ["Not_A_Name"]})
