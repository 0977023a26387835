"""Invalid InferenceModels are refused by the API server (schema + CEL) with the field named, those whose
derived objects Kubernetes or Triton would refuse (tests/refused_specs.py) included."""

from pathlib import Path

import pytest
import yaml
from kubernetes import client
from refused_specs import REFUSED
from tensorkiln_api import GROUP, VERSION

pytestmark = pytest.mark.cluster
INVALID = sorted((Path(__file__).resolve().parents[1] / "data" / "invalid").glob("*.yaml"))


def expectation(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <substring>'"
    return first.removeprefix("# expect: ").strip()


def test_there_are_at_least_ten_cases():
    assert len(INVALID) >= 10


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_manifest_is_rejected_naming_the_field(api, namespace, path):
    body = yaml.safe_load(path.read_text())
    body["metadata"]["namespace"] = namespace
    with pytest.raises(client.ApiException) as rejected:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", body, field_validation="Strict"
        )
    assert rejected.value.status in (400, 422)
    assert expectation(path) in rejected.value.body


@pytest.mark.parametrize(("spec", "field"), list(REFUSED.values()), ids=list(REFUSED))
def test_specs_whose_derived_objects_kubernetes_refuses_are_refused_naming_the_field(api, spec, field):
    namespace = "default"  # a dry run: nothing is created, so no namespace of its own is needed
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": "refused", "namespace": namespace},
        "spec": {"source": {"uri": "https://models.example/m.onnx"}, **spec},
    }
    with pytest.raises(client.ApiException) as rejected:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", body, field_validation="Strict", dry_run="All"
        )
    assert rejected.value.status in (400, 422)
    assert f"{field}:" in rejected.value.body, rejected.value.body


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "manifests" / "samples").glob("*.yaml")))
def test_samples_are_accepted(api, namespace, path):
    body = yaml.safe_load(path.read_text())
    body["metadata"]["namespace"] = namespace
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", body, field_validation="Strict", dry_run="All"
    )
