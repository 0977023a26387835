"""An oci:// engine registry's credentials in the pods the operator builds: compile pods mount the push
Secret (they publish), Triton pods' engine-fetch the pull Secret (it only reads), each a
kubernetes.io/dockerconfigjson Secret read-only as $DOCKER_CONFIG/config.json. Other schemes: unchanged."""

import dataclasses

import pytest
from tensorkiln.builders import serving, storage
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.builders.job import build_job
from tensorkiln.controllers.compilejob import _job
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.settings import Settings

from .test_builders import CLASSES, sample_model
from .test_serving_builders import DIGEST, manifest

OCI = "oci://registry.example.test:5000/tensorkiln/engines"
AUTH_DIR = "/var/run/tensorkiln/registry-auth"
OCI_SETTINGS = Settings(
    registry_uri=OCI,
    compiler_image="ghcr.io/tensorkiln/compiler:0.1.0",
    registry_push_secret="engines-push",
    registry_pull_secret="engines-pull",
)


def secret_volume(secret: str) -> dict:
    return {
        "name": "registry-auth",
        "secret": {"secretName": secret, "items": [{"key": ".dockerconfigjson", "path": "config.json"}]},
    }


AUTH_MOUNT = {"name": "registry-auth", "mountPath": AUTH_DIR, "readOnly": True}
AUTH_ENV = {"name": "DOCKER_CONFIG", "value": AUTH_DIR}


def compile_pod(settings: Settings, class_name: str = "nvidia-l4") -> dict:
    model = sample_model()
    cj = build_compile_job(model, normalised_spec(model), CLASSES[class_name], settings)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    return _job(cj, settings)["spec"]["template"]["spec"]


def serving_pod(tmp_path, settings: Settings) -> dict:
    model, target = sample_model(), CLASSES["nvidia-l4"]
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "TensorRT", "GPU"))
    return serving.build_deployment(model, spec, target, DIGEST, config_map, 1, settings)["spec"]["template"]["spec"]


def test_compile_pods_mount_the_push_secret_only():
    pod = compile_pod(OCI_SETTINGS)
    (container,) = pod["containers"]
    assert [v["name"] for v in pod["volumes"]] == ["work", "tmp", "registry-auth"]
    assert pod["volumes"][-1] == secret_volume("engines-push")
    assert container["volumeMounts"] == [
        {"name": "work", "mountPath": "/work"},
        {"name": "tmp", "mountPath": "/tmp"},
        AUTH_MOUNT,
    ]
    names = ["TENSORKILN_COMPILE_SPEC", "HOME", "TENSORKILN_NAMESPACE", "DOCKER_CONFIG"]
    assert [e["name"] for e in container["env"]] == names
    assert container["env"][-1] == AUTH_ENV
    assert "envFrom" not in container
    # The registry is a URI the compiler opens itself: the spec carries it as is.
    assert f'"registry":{{"uri":"{OCI}"}}' in container["env"][0]["value"]
    assert "engines-pull" not in str(pod)


def test_engine_fetch_mounts_the_pull_secret_only_and_triton_neither(tmp_path):
    pod = serving_pod(tmp_path, OCI_SETTINGS)
    (fetch,) = pod["initContainers"]
    (triton,) = pod["containers"]
    assert [v["name"] for v in pod["volumes"]] == ["models", "tmp", "triton-config", "registry-auth"]
    assert pod["volumes"][-1] == secret_volume("engines-pull")
    assert fetch["volumeMounts"] == [
        {"name": "models", "mountPath": "/models"},
        {"name": "triton-config", "mountPath": "/etc/tensorkiln/triton", "readOnly": True},
        AUTH_MOUNT,
    ]
    assert fetch["env"] == [AUTH_ENV]
    assert fetch["args"][fetch["args"].index("--registry") + 1] == OCI
    assert "envFrom" not in fetch
    assert "env" not in triton and all(m["name"] != "registry-auth" for m in triton["volumeMounts"])
    assert "engines-push" not in str(pod)


def test_oci_insecure_reaches_both_pods_and_no_secret_means_no_volume(tmp_path):
    anonymous = Settings(registry_uri=OCI, oci_insecure=True)
    insecure = {"name": "TENSORKILN_OCI_INSECURE", "value": "true"}
    pod = compile_pod(anonymous)
    assert pod["containers"][0]["env"][-1] == insecure
    assert [v["name"] for v in pod["volumes"]] == ["work", "tmp"]
    fetch = serving_pod(tmp_path, anonymous)["initContainers"][0]
    assert fetch["env"] == [insecure]
    assert all(m["name"] != "registry-auth" for m in fetch["volumeMounts"])
    fetch = serving_pod(tmp_path, dataclasses.replace(OCI_SETTINGS, oci_insecure=True))["initContainers"][0]
    assert fetch["env"] == [AUTH_ENV, insecure]


@pytest.mark.parametrize(
    "uri", ["s3://engines/prod", "pvc://engines/prod", "file:///var/lib/tensorkiln/registry"], ids=lambda u: u[:3]
)
def test_other_registries_ignore_the_oci_settings(tmp_path, uri):
    """The push and pull Secrets (and TENSORKILN_OCI_INSECURE) change nothing for s3://, pvc:// and file://:
    the same Job and Deployment as without them."""
    plain = Settings(registry_uri=uri, compiler_image="ghcr.io/tensorkiln/compiler:0.1.0", registry_secret="s3c")
    with_oci = dataclasses.replace(
        plain, registry_push_secret="engines-push", registry_pull_secret="engines-pull", oci_insecure=True
    )
    assert compile_pod(with_oci) == compile_pod(plain)
    assert serving_pod(tmp_path, with_oci) == serving_pod(tmp_path, plain)
    # TENSORKILN_REGISTRY_SECRET keeps its meaning: the whole Secret as environment.
    assert compile_pod(plain)["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3c"}}]
    assert serving_pod(tmp_path, plain)["initContainers"][0]["envFrom"] == [{"secretRef": {"name": "s3c"}}]


def test_the_registry_access_of_oci_is_the_uri_alone():
    """oci:// is no path: no volume, no mount, the URI as the container sees it."""
    assert storage.registry(OCI) == storage.Access(OCI)
    assert storage.model_source("s3://models/x.onnx") == storage.Access("s3://models/x.onnx")
    assert storage.registry_credentials("s3://engines", "engines-push", insecure=True) == storage.Access("s3://engines")


def test_build_job_keeps_its_positional_registry_secret():
    model = sample_model()
    cj = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], OCI_SETTINGS)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    pod = build_job(cj, "s3c", push_secret="engines-push")["spec"]["template"]["spec"]
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3c"}}]
    assert pod["volumes"][-1] == secret_volume("engines-push")


def test_settings_read_the_push_and_pull_secrets_from_the_environment(monkeypatch):
    monkeypatch.setenv("TENSORKILN_REGISTRY_URI", OCI)
    monkeypatch.setenv("TENSORKILN_REGISTRY_PUSH_SECRET", "engines-push")
    monkeypatch.setenv("TENSORKILN_REGISTRY_PULL_SECRET", "engines-pull")
    monkeypatch.setenv("TENSORKILN_OCI_INSECURE", "true")
    settings = Settings.from_env()
    assert (settings.registry_uri, settings.registry_push_secret, settings.registry_pull_secret) == (
        OCI,
        "engines-push",
        "engines-pull",
    )
    assert settings.oci_insecure is True
    for name in ("TENSORKILN_REGISTRY_PUSH_SECRET", "TENSORKILN_REGISTRY_PULL_SECRET", "TENSORKILN_OCI_INSECURE"):
        monkeypatch.setenv(name, "")
    settings = Settings.from_env()
    assert (settings.registry_push_secret, settings.registry_pull_secret, settings.oci_insecure) == (None, None, False)


def test_compile_and_triton_pods_pull_their_images_with_the_workload_pull_secrets(tmp_path):
    settings = dataclasses.replace(OCI_SETTINGS, image_pull_secrets=("registry-credentials",))
    assert compile_pod(settings)["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert serving_pod(tmp_path, settings)["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert "imagePullSecrets" not in compile_pod(OCI_SETTINGS)
    assert "imagePullSecrets" not in serving_pod(tmp_path, OCI_SETTINGS)
