"""A real model compiled for real on local-0 through the operator, then reused from the cache."""

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.builders.labels import COMPILE_JOB, MODEL
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry import open_registry

from .helpers import wait_for

pytestmark = pytest.mark.cluster
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/ocr-cls-cpu.yaml").read_text())


def create(api, namespace, name, **source_changes):
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["source"].update(source_changes)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)


def compile_job(api, namespace, model) -> dict | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "compilejobs", label_selector=f"{MODEL}={model}"
    )["items"]
    return items[0] if items else None


def finished(api, namespace, model):
    cj = compile_job(api, namespace, model)
    return cj if cj and cj.get("status", {}).get("phase") in ("Succeeded", "Failed") else None


def conditions(cj) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in cj["status"]["conditions"]}


def jobs_of(api, namespace, cj) -> list:
    selector = f"{COMPILE_JOB}={cj['metadata']['name']}"
    return client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector).items


def test_compiles_on_the_real_cpu_node_publishes_and_reuses_from_cache(api, operator, namespace):
    create(api, namespace, "ocr-cls")
    cj = wait_for(lambda: finished(api, namespace, "ocr-cls"), timeout=420, interval=3, what="the compile on local-0")
    status = cj["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    assert (status["nodeName"], status["simulatedNode"], status["cacheHit"]) == ("local-0", False, False)
    assert conditions(cj)["Compiled"] == ("True", "EnginePublished")
    assert conditions(cj)["AccuracyPassed"][0] == "True"
    assert conditions(cj)["Selected"][0] == "True"
    ids = {c["id"] for c in status["candidates"]}
    assert "baseline" in ids and {"openvino-fp32", "openvino-int8"} <= ids
    manifest = open_registry(operator.registry_uri).manifest(status["engine"]["digest"])
    assert manifest.fingerprint and manifest.key.hardware_class == cj["spec"]["hardware"]["className"]
    assert len(jobs_of(api, namespace, cj)) == 1

    # Same model, options and hardware under another name: served from the registry, no Job.
    create(api, namespace, "ocr-cls-again")
    again = wait_for(lambda: finished(api, namespace, "ocr-cls-again"), timeout=60, what="the cache hit")
    assert again["status"]["cacheHit"] is True
    assert again["status"]["engine"]["digest"] == status["engine"]["digest"]
    assert conditions(again)["Compiled"] == ("True", "CacheHit")
    assert jobs_of(api, namespace, again) == []

    def rolled_up():
        model = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", "ocr-cls-again"
        )
        targets = model.get("status", {}).get("targets", [])
        return model if targets and targets[0].get("engine") else None

    model = wait_for(rolled_up, what="the engine rolled up into the InferenceModel")
    assert model["status"]["targetSummary"].endswith("1 compiled")


def test_a_wrong_sha256_fails_at_once_naming_the_field_and_publishes_nothing(api, operator, namespace):
    create(api, namespace, "ocr-bad-digest", sha256="0" * 64)
    cj = wait_for(lambda: finished(api, namespace, "ocr-bad-digest"), timeout=180, interval=2, what="the failure")
    status = cj["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "DigestMismatch"
    assert "sha256" in status["message"]
    assert status["attempts"] == 1, "bad input must not burn the retry budget"
    assert "engine" not in status
