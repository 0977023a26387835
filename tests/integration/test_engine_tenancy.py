"""A namespace gets another namespace's cached engine only by showing it can read the model
(the session's installed operator, registry.shareEngines off as by default).

Team A's model comes from a private HTTP host (a stand-in, helpers.BearerServer) that serves it to
one bearer token alone; A's Secret holds it, and A's compile publishes the engine. Team B declares
the same source URI and sha256 without the token: its CompileJob gets no cache hit, its compile pod
is refused by the host, and it ends Failed with ModelAccessDenied, no engine. Team C holds the token:
its compile pod fetches the model, checks the digest, finds A's engine and compiles nothing, a
cache hit that costs a pod start and a download instead of a compile (both times are printed).
"""

import hashlib
import json
import secrets
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install
from tensorkiln_local.cluster import network
from tensorkiln_local.cluster.ocr_models import CLS

from .helpers import BearerServer, wait_for

pytestmark = pytest.mark.cluster
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/ocr-cls-cpu.yaml").read_text())
SOURCE_SECRET = "model-host-token"


def model(namespace: str, uri: str, with_token: bool) -> dict:
    spec = json.loads(json.dumps(SAMPLE["spec"]))
    body = CLS.path.read_bytes()
    spec["source"] = {"uri": uri, "sha256": hashlib.sha256(body).hexdigest()}
    if with_token:
        spec["source"]["credentials"] = {"secretName": SOURCE_SECRET}
    spec["compile"] = {**spec["compile"], "precisions": ["FP32"], "compilers": {"cpu": ["OnnxRuntime"]}, "retries": 0}
    del spec["compile"]["calibration"]
    spec["slo"] |= {"minReplicas": 1, "maxReplicas": 1}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceModel",
            "metadata": {"name": "ocr", "namespace": namespace}, "spec": spec}  # fmt: skip


@pytest.fixture
def teams(api, namespace):
    """Namespaces A (the `namespace` fixture's), B and C, each with the registry claim."""
    core = client.CoreV1Api(api)
    others = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in others:
        install.create_namespace(core, name)
    try:
        yield [namespace, *others]
    finally:
        for name in others:
            install.delete_namespace(core, name)


def finished_compile_job(api, namespace: str) -> dict | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")
    done = [c for c in items["items"] if (c.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    return done[0] if done else None


def test_another_namespaces_engine_needs_the_model_itself(api, operator, teams, measured):
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    token = f"planted-{secrets.token_hex(16)}"
    host = BearerServer(network.node_gateway(0), token, CLS.path.read_bytes())
    a, b, c = teams
    try:
        for holder in (a, c):
            secret = {"metadata": {"name": SOURCE_SECRET}, "stringData": {"token": token}}
            core.create_namespaced_secret(holder, secret)

        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, a, "inferencemodels", model(a, host.url, True))
        compiled = wait_for(lambda: finished_compile_job(api, a), timeout=600, interval=3, what="A's compile")
        compile_seconds = time.monotonic() - started
        assert compiled["status"]["phase"] == "Succeeded", compiled["status"]
        assert compiled["status"]["cacheHit"] is False
        engine = compiled["status"]["engine"]["digest"]

        # B: the same URI and digest, no token. No cache hit from the registry: a compile pod, refused by the host.
        custom.create_namespaced_custom_object(GROUP, VERSION, b, "inferencemodels", model(b, host.url, False))
        refused = wait_for(lambda: finished_compile_job(api, b), timeout=300, interval=2, what="B's compile pod")
        status = refused["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ModelAccessDenied"), status
        assert "spec.source.uri" in status["message"] and "engine" not in status, status
        assert status.get("jobName"), "B got its verdict without a compile pod fetching the source"
        im = custom.get_namespaced_custom_object(GROUP, VERSION, b, "inferencemodels", "ocr")
        ready = next(x for x in im["status"]["conditions"] if x["type"] == "Ready")
        assert ready["status"] == "False", ready

        # C holds the token: its pod fetches and checks the model, then finds A's engine; nothing compiles.
        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, c, "inferencemodels", model(c, host.url, True))
        reused = wait_for(lambda: finished_compile_job(api, c), timeout=300, interval=2, what="C's compile pod")
        proof_seconds = time.monotonic() - started
        status = reused["status"]
        assert (status["phase"], status["cacheHit"], status["engine"]["digest"]) == ("Succeeded", True, engine)
        compiled_conditions = {x["type"]: x["reason"] for x in status["conditions"]}
        assert compiled_conditions["Compiled"] == "CacheHit" and status.get("jobName")
        measured(f"another namespace's engine: compile in A {compile_seconds:.0f} s, C's source check and reuse "
                 f"{proof_seconds:.0f} s ({proof_seconds / compile_seconds:.2f} of the compile)")  # fmt: skip
        assert host.authorizations.count("") >= 1 and f"Bearer {token}" in host.authorizations
    finally:
        host.stop()
