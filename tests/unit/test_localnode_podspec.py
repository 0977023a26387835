"""Pod spec -> local process plan: env, path rewriting, volumes, images, errors."""

import base64
from pathlib import Path

import pytest
from tensorkiln_local.node.images import ImageRule, Launch, repository, rule_for
from tensorkiln_local.node.podspec import (
    PlanError,
    PodContext,
    expand,
    path_rewriter,
    plan_pod,
)

POD_DIR = Path("/state/pods/uid-1")
CTX = PodContext(
    pod_dir=POD_DIR, pod_ip="127.0.0.12", host_ip="127.0.0.1", node_name="local-0", search_path="/venv/bin:/usr/bin"
)


class FakeResolver:
    def __init__(self, objects=None):
        self.objects = objects or {}

    def lookup(self, kind, namespace, name):
        return self.objects.get((kind, namespace, name))

    def service_account_token(self, pod, audience, expiration_seconds):
        return f"token-for-{pod['metadata']['name']}-{audience}"


def b64(text):
    return base64.b64encode(text.encode()).decode()


RESOLVER = FakeResolver(
    {
        ("configmaps", "ns", "settings"): {
            "data": {"MODE": "fast", "config.yaml": "a: 1\n", "bad key": "x"},
            "binaryData": {"blob": b64("\x00\x01")},
        },
        ("secrets", "ns", "creds"): {"data": {"TOKEN": b64("s3cret")}},
    }
)


def pod(*containers, volumes=(), init=(), **spec):
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "labels": {"app": "x"}},
        "spec": {"containers": list(containers), "initContainers": list(init), "volumes": list(volumes), **spec},
    }


def container(**fields):
    return {"name": "main", "image": "example.com/tool:1", "command": ["run"], **fields}


def plan_one(c, **kwargs):
    return plan_pod(pod(c, **kwargs), CTX, RESOLVER).containers[0]


def test_env_base_values_downward_api_and_expansion():
    c = container(
        env=[
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "URL", "value": "http://$(POD_IP):8000/$(NAME)/$(UNDEFINED)/$$(NAME)"},
        ],
        args=["--bind", "$(POD_IP)"],
    )
    plan = plan_one(c)
    env = plan.env
    assert env["POD_IP"] == "127.0.0.12"
    assert env["PATH"] == "/venv/bin:/usr/bin"
    assert env["HOME"] == str(POD_DIR)
    assert (env["NAME"], env["NS"], env["UID"], env["IP"], env["NODE"], env["APP"]) == (
        "p",
        "ns",
        "uid-1",
        "127.0.0.12",
        "local-0",
        "x",
    )
    assert env["URL"] == "http://127.0.0.12:8000/p/$(UNDEFINED)/$(NAME)"
    assert plan.argv == ["run", "--bind", "127.0.0.12"]
    assert plan.cwd == POD_DIR


def test_env_from_configmap_and_secret_refs():
    c = container(
        envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CM_"}, {"secretRef": {"name": "creds"}}],
        env=[
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
            {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nope", "optional": True}}},
            {"name": "GONE2", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}},
        ],
    )
    env = plan_one(c).env
    assert env["MODE"] == "fast" and env["PW"] == "s3cret" and env["TOKEN"] == "s3cret"
    assert env["CM_MODE"] == "fast"
    assert "CM_bad key" not in env and "GONE" not in env and "GONE2" not in env


def test_required_missing_key_is_a_retryable_config_error_naming_it():
    c = container(env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "missing"}}}])
    with pytest.raises(PlanError) as err:
        plan_one(c)
    assert err.value.reason == "CreateContainerConfigError"
    assert "missing" in err.value.message and "ns/settings" in err.value.message
    assert not err.value.permanent
    assert err.value.container == "main"


def test_required_missing_secret_is_a_config_error():
    c = container(env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}])
    with pytest.raises(PlanError, match='secret "absent" not found') as err:
        plan_one(c)
    assert err.value.reason == "CreateContainerConfigError"


def test_paths_are_rewritten_longest_mount_first_and_only_as_path_prefixes():
    c = container(
        command=["sh", "-c", "cp /data/in /data/cache/x && cat /database /data.txt /x/data; ls /data"],
        args=["--out=/data/cache", "--conf=/etc/app/config.yaml"],
        env=[{"name": "CACHE", "value": "/data/cache/models"}, {"name": "LIST", "value": "/data:/data/cache"}],
        workingDir="/data/cache",
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "cache", "mountPath": "/data/cache/"},
            {"name": "cfg", "mountPath": "/etc/app/config.yaml", "subPath": "config.yaml"},
        ],
    )
    plan = plan_one(
        c,
        volumes=[
            {"name": "data", "emptyDir": {}},
            {"name": "cache", "hostPath": {"path": "/tmp/c"}},
            {"name": "cfg", "configMap": {"name": "settings"}},
        ],
    )
    data, cfg = POD_DIR / "volumes/data", POD_DIR / "volumes/cfg/config.yaml"
    assert plan.argv == [
        "sh",
        "-c",
        f"cp {data}/in /tmp/c/x && cat /database /data.txt /x/data; ls {data}",
        "--out=/tmp/c",
        f"--conf={cfg}",
    ]
    assert plan.env["CACHE"] == "/tmp/c/models"
    assert plan.env["LIST"] == f"{data}:/tmp/c"
    assert plan.cwd == Path("/tmp/c")


def test_termination_message_path_maps_into_the_container_dir():
    plan = plan_one(container(command=["sh", "-c", "echo done > /dev/termination-log; exit 3"]))
    assert plan.termination_path == POD_DIR / "main/termination-log"
    assert plan.argv[2] == f"echo done > {POD_DIR}/main/termination-log; exit 3"
    assert plan.log_path == POD_DIR / "main/log"
    custom = plan_one(
        container(
            command=["w", "/run/msg"],
            terminationMessagePath="/run/msg",
            terminationMessagePolicy="FallbackToLogsOnError",
        )
    )
    assert custom.argv == ["w", str(POD_DIR / "main/termination-log")]
    assert custom.fallback_to_logs


def test_tmp_volume_becomes_tmpdir():
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    plan = plan_one(container(volumeMounts=mounts), volumes=[{"name": "tmp", "emptyDir": {}}])
    assert plan.env["TMPDIR"] == str(POD_DIR / "volumes/tmp")
    assert "TMPDIR" not in plan_one(container()).env


def test_rewriter_is_single_pass():
    # The local dir contains the other mountPath: it must not be rewritten twice.
    rewrite = path_rewriter([("/tmp", Path("/x/tmp-vol")), ("/x", Path("/tmp/x-vol"))])
    assert rewrite("/tmp/a /x/b") == "/x/tmp-vol/a /tmp/x-vol/b"


def test_file_uris_are_rewritten_as_paths():
    rewrite = path_rewriter([("/data", Path("/vol/d"))])
    assert rewrite("file:///data/engines file:///database http://host/data") == (
        "file:///vol/d/engines file:///database http://host/data"
    )


def test_expand_follows_kubernetes_rules():
    env = {"A": "1"}
    assert expand("$(A)-$(B)-$$(A)-$$-$(A", env) == "1-$(B)-$(A)-$-$(A"


def test_volume_files_from_configmap_secret_downward_and_projected():
    volumes = [
        {
            "name": "cm",
            "configMap": {
                "name": "settings",
                "items": [{"key": "config.yaml", "path": "conf/app.yaml", "mode": 0o600}],
            },
        },
        {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "opt", "configMap": {"name": "absent", "optional": True}},
        {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {
            "name": "kube-api-access",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "api"}},
                    {"configMap": {"name": "settings", "items": [{"key": "MODE", "path": "mode"}]}},
                    {
                        "downwardAPI": {
                            "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                        }
                    },
                ]
            },
        },
        {"name": "scratch", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/srv/models", "type": "DirectoryOrCreate"}},
    ]
    plan = plan_pod(pod(container(), volumes=volumes), CTX, RESOLVER)
    by_name = {v.name: v for v in plan.volumes}
    assert by_name["cm"].files == {"conf/app.yaml": (b"a: 1\n", 0o600)}
    assert by_name["sec"].files == {"TOKEN": (b"s3cret", 0o400)}
    assert by_name["opt"].files == {}
    assert by_name["info"].files == {"labels": (b'app="x"', 0o644)}
    assert by_name["kube-api-access"].files == {
        "token": (b"token-for-p-api", 0o644),
        "mode": (b"fast", 0o644),
        "namespace": (b"ns", 0o644),
    }
    assert by_name["scratch"].path == POD_DIR / "volumes/scratch" and by_name["scratch"].create
    assert by_name["host"].path == Path("/srv/models") and by_name["host"].create
    assert by_name["cm"].path == POD_DIR / "volumes/cm"


def test_unsupported_volume_fails_the_pod_clearly():
    with pytest.raises(PlanError, match="nfs volumes are not supported") as err:
        plan_pod(pod(container(), volumes=[{"name": "v", "nfs": {"server": "nas", "path": "/x"}}]), CTX, RESOLVER)
    assert err.value.permanent and err.value.reason == "VolumeNotSupported"


@pytest.mark.parametrize(
    "volume, message",
    [
        ({"configMap": {"name": "absent"}}, 'configmap "absent" not found'),
        ({"secret": {"secretName": "absent"}}, 'secret "absent" not found'),
        ({"projected": {"sources": [{"secret": {"name": "absent"}}]}}, 'secret "absent" not found'),
        ({"secret": {"secretName": "creds", "items": [{"key": "nope", "path": "x"}]}}, "couldn't find key nope"),
    ],
)
def test_missing_configmap_or_secret_holds_the_pod_as_a_failed_mount(volume, message):
    """As the kubelet: ContainerCreating and its FailedMount message, retried until it exists."""
    with pytest.raises(PlanError) as err:
        plan_pod(pod(container(), volumes=[{"name": "v", **volume}]), CTX, RESOLVER)
    assert not err.value.permanent and err.value.reason == "ContainerCreating"
    assert err.value.message.startswith(f'MountVolume.SetUp failed for volume "v" : {message}')


def test_image_without_command_and_without_rule_is_not_mappable():
    with pytest.raises(PlanError) as err:
        plan_one({"name": "main", "image": "registry.example.com/team/server:2", "args": ["--port", "1"]})
    assert err.value.reason == "ImageNotMappable"
    assert "registry.example.com/team/server:2" in err.value.message
    assert err.value.permanent


def test_image_rule_supplies_entrypoint_and_can_rewrite_env():
    assert plan_one({"name": "main", "image": "busybox:1.36"}).argv == ["sh"]
    assert plan_one({"name": "main", "image": "docker.io/library/python:3.11", "args": ["-c", "print(1)"]}).argv == [
        "-c",
        "print(1)",
    ]

    def add_path(launch):
        return Launch(
            ["/opt/srv/bin/" + launch.command[0]], launch.args, {**launch.env, "LD_LIBRARY_PATH": "/opt/srv/lib"}
        )

    rules = (ImageRule("nvcr.io/nvidia/tritonserver", add_path),)
    c = {
        "name": "main",
        "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
        "command": ["tritonserver"],
        "args": ["--http-address=$(POD_IP)"],
    }
    plan = plan_pod(pod(c), CTX, RESOLVER, rules=rules).containers[0]
    assert plan.argv == ["/opt/srv/bin/tritonserver", "--http-address=127.0.0.12"]
    assert plan.env["LD_LIBRARY_PATH"] == "/opt/srv/lib"


def test_image_repository_normalisation():
    assert repository("busybox") == "busybox"
    assert repository("docker.io/library/busybox:1.36@sha256:abc") == "busybox"
    assert repository("localhost:5000/team/app:v1") == "localhost:5000/team/app"
    assert repository("localhost:5000/team/app") == "localhost:5000/team/app"
    assert rule_for("nvcr.io/nvidia/tritonserver:24.08-py3") is not None
    assert rule_for("alpine:3") is not None


def test_probes_get_pod_ip_named_ports_and_rewritten_exec():
    c = container(
        ports=[{"name": "http", "containerPort": 8080}],
        volumeMounts=[{"name": "d", "mountPath": "/data"}],
        readinessProbe={"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 2},
        livenessProbe={"exec": {"command": ["test", "-f", "/data/ok"]}, "failureThreshold": 5},
        startupProbe={"tcpSocket": {"port": 8080, "host": "127.0.0.1"}},
    )
    probes = plan_one(c, volumes=[{"name": "d", "emptyDir": {}}]).probes
    assert (
        probes["readiness"].host,
        probes["readiness"].port,
        probes["readiness"].path,
        probes["readiness"].period,
    ) == ("127.0.0.12", 8080, "/ready", 2)
    assert probes["liveness"].command == ("test", "-f", str(POD_DIR / "volumes/d/ok"))
    assert probes["liveness"].failure_threshold == 5
    assert (probes["startup"].host, probes["startup"].port) == ("127.0.0.1", 8080)


def test_grpc_probe_is_rejected():
    with pytest.raises(PlanError) as err:
        plan_one(container(readinessProbe={"grpc": {"port": 9000}}))
    assert err.value.reason == "ProbeNotSupported"


def test_init_containers_are_planned_in_order():
    plan = plan_pod(pod(container(), init=[container(name="a"), container(name="b")]), CTX, RESOLVER)
    assert [c.name for c in plan.init_containers] == ["a", "b"]


def test_agent_path_is_not_rewritten_by_a_mount_that_prefixes_it():
    """A volume at /work must not redirect the agent's PATH entry /work/main/.venv/bin."""
    pod = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "command": ["tool"], "volumeMounts": [{"name": "w", "mountPath": "/work"}]}
            ],
            "volumes": [{"name": "w", "emptyDir": {}}],
        },
    }
    ctx = PodContext(POD_DIR, "127.0.0.10", "127.0.0.1", "local-0", search_path="/work/main/.venv/bin:/usr/bin")
    plan = plan_pod(pod, ctx, FakeResolver())
    assert plan.containers[0].env["PATH"] == "/work/main/.venv/bin:/usr/bin"
    assert plan.containers[0].argv == ["tool"]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({}, None),
        ({"memory": "64Mi"}, 64 << 20),
        ({"memory": "1.5Gi"}, 3 << 29),
        ({"memory": "100m"}, 1),
        ({"memory": "0"}, None),
    ],
)
def test_memory_limit_in_bytes_rounded_up_and_zero_is_none(limits, expected):
    assert plan_one(container(resources={"requests": {"memory": "1Mi"}, "limits": limits})).memory_limit == expected


def test_a_bad_memory_limit_fails_the_pod_naming_the_field():
    with pytest.raises(PlanError, match=r'container "main": resources.limits.memory \'lots\'') as err:
        plan_one(container(resources={"limits": {"memory": "lots"}}))
    assert err.value.permanent
