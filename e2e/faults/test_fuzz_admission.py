"""Fuzzing the InferenceModel API with generated manifests (hypothesis; e2e/faults/manifests.py).

1. Admission: every manifest is created with dryRun (server-side, strict field validation).
   Every invalid one must be rejected with a message naming the broken field; every valid one
   accepted; and the pydantic model must agree with the API server on every manifest.
   The pydantic side validates the manifest as it travels, JSON in strict mode: the API server's
   structural schema is strictly typed ("5" is no integer), while the operator's lax parsing of
   objects the API server already admitted coerces, which is harmless after admission.
2. The operator: every valid manifest is created for real in a namespace an operator of this
   test watches, and the operator must handle them all without an exception. So that nothing
   runs, hardware is redirected: Auto specs include only a GPU product no node has; Explicit
   pools select a node of this test that is cordoned with room for no pod (never seen by Auto
   discovery, which skips unschedulable nodes), so CompileJobs, Jobs and Deployments are made
   and their pods stay Pending. Models with a sha256 get a test-seed engine, so their
   CompileJob is a cache hit and the serving objects are built too. Replicas are capped at 3.
"""

import copy
import json
import os
import random
import time
from collections import Counter

import pytest
from kubernetes import client
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, INFERENCE_MODEL, VERSION
from tensorkiln_local import install
from tensorkiln_local.cluster.engine_seeds import publish_test_seed
from tensorkiln_local.crdgen import build_crd

from .manifests import generate, lax_verdict, pydantic_verdict
from .support import condition, log_exceptions, models, wait_healthy, wait_until

N_VALID = int(os.environ.get("TENSORKILN_FAULTS_FUZZ_VALID", "250"))
N_INVALID = int(os.environ.get("TENSORKILN_FAULTS_FUZZ_INVALID", "350"))
FUZZ_LABEL = "tensorkiln.dev/fuzz-pool"
# Disagreements found by this fuzz and not fixed yet, with the unit test that pins each (xfail,
# strict: it fails once fixed, and this entry goes with its marker).
KNOWN: dict[str, str] = {}
WEBHOOK_DENIAL = "admission webhook"


def _names_field_or_its_map(field: str, message: str) -> bool:
    """A null map value (limits.nvidia.com/gpu: null) drops the entry: a rule of the map that held it
    (limits) then fails, and naming that map names the field well enough."""
    maps = [field.rsplit(".", cut)[0] for cut in range(1, field.count("."))]
    return field in message or any(name in message for name in maps if name.count(".") >= 3)


@pytest.fixture(scope="module")
def cases(seed):
    generated = generate(seed, N_VALID, N_INVALID)
    assert len(generated) >= 500, f"only {len(generated)} manifests generated"
    return generated


@pytest.fixture(scope="module")
def verdicts(api, cases, operator):
    """Each case with the API server's verdict (dry-run create) and the pydantic model's. With the
    session's operator installed (no admission webhook): the schema and its CEL rules are what is
    compared, whichever test of the suite runs first."""
    core = client.CoreV1Api(api)
    namespace = f"faults-fuzz-dry-{random.randrange(16**6):06x}"
    install.create_namespace(core, namespace, {"tensorkiln.dev/suite": "faults"})  # with the registry claim
    custom = client.CustomObjectsApi(api)
    found = []
    try:
        for i, case in enumerate(cases):
            body = case.manifest(f"fz-{i}", namespace)
            try:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "inferencemodels", body, dry_run="All", field_validation="Strict"
                )
                server = (True, "")
            except client.ApiException as error:
                if error.status not in (400, 422):
                    raise
                server = (False, _message(error))
            found.append((case, server, pydantic_verdict(case.spec)))
    finally:
        install.delete_namespace(core, namespace)
    return found


def _message(error: client.ApiException) -> str:
    try:
        return json.loads(error.body).get("message", error.body)
    except (TypeError, ValueError):
        return str(error.body)


def _cluster_crd_matches(api) -> bool:
    served = client.ApiextensionsV1Api(api).read_custom_resource_definition(INFERENCE_MODEL.crd_name)
    served_schema = api.sanitize_for_serialization(served.spec.versions[0].var_schema)["openAPIV3Schema"]
    ours = json.loads(json.dumps(build_crd(INFERENCE_MODEL)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))
    return served_schema == ours


def _webhooks(api) -> list[str]:
    configs = client.AdmissionregistrationV1Api(api).list_validating_webhook_configuration().items
    return [
        f"{c.metadata.name}/{w.name}"
        for c in configs
        for w in c.webhooks or []
        if any("inferencemodels" in (r.resources or []) for r in w.rules or [])
    ]


def test_admission_rejects_every_invalid_manifest_naming_the_field_and_agrees_with_pydantic(api, verdicts):
    assert _cluster_crd_matches(api), (
        "the cluster's InferenceModel CRD is not the one api/tensorkiln_api generates "
        "(`tensorkiln-local crds` + `tensorkiln-local cluster up` apply it), so pydantic and the API server would be "
        "checking different APIs"
    )
    webhooks = _webhooks(api)
    counts: Counter = Counter()
    by_mutation: Counter = Counter()
    disagreements, unnamed, misses, lax, known = [], [], [], 0, Counter()
    for case, (server_ok, server_message), (model_ok, model_errors) in verdicts:
        by_webhook = not server_ok and WEBHOOK_DENIAL in server_message
        counts[{True: "valid", False: "invalid", None: "null (no expectation)"}[case.valid]] += 1
        if case.valid is None:
            by_mutation[case.mutation] += 1
            counts["null accepted by the API server"] += server_ok
            if not server_ok and not model_ok and not _names_field_or_its_map(case.field, server_message):
                unnamed.append(f"API server, null {case.field}: {server_message[:300]}")
        elif case.valid:
            counts["valid accepted by the API server"] += server_ok
            counts["valid accepted by pydantic"] += model_ok
        else:
            by_mutation[case.mutation] += 1
            counts["invalid rejected by the API server"] += not server_ok
            counts["invalid rejected by pydantic"] += not model_ok
            if not server_ok and case.field not in server_message:
                unnamed.append(f"API server, {case.mutation} {case.field} {case.detail}: {server_message[:300]}")
            if not model_ok and not any(case.field in e for e in model_errors):
                unnamed.append(f"pydantic, {case.mutation} {case.field} {case.detail}: {model_errors[:3]}")
        lax += lax_verdict(case.spec) != model_ok
        if server_ok != model_ok and not by_webhook and case.mutation in KNOWN:
            known[case.mutation] += 1
        elif server_ok != model_ok and not by_webhook:
            disagreements.append(
                f"{'valid' if case.valid else case.mutation} {case.field} {case.detail}: API server "
                f"{'accepts' if server_ok else 'rejects: ' + server_message[:300]}; pydantic "
                f"{'accepts' if model_ok else 'rejects: ' + '; '.join(model_errors)[:300]}\n    {json.dumps(case.spec)[:400]}"
            )
        elif case.valid and not server_ok and not model_ok:
            misses.append(f"generated as valid, rejected by both: {model_errors[:2]} {json.dumps(case.spec)[:300]}")
        elif case.valid is False and server_ok and model_ok:
            misses.append(f"{case.mutation} {case.field} {case.detail}: still valid {json.dumps(case.spec)[:300]}")
    print(
        f"\nmanifests: {len(verdicts)}; {dict(counts)}\nmutations: {dict(sorted(by_mutation.items()))}\n"
        f"disagreements (pydantic vs API server): {len(disagreements)} {dict(Counter(d.split(' ')[0] for d in disagreements))}; "
        f"errors not naming the field: {len(unnamed)}; generator misses: {len(misses)}; "
        f"lax-parse differences (informational): {lax}; webhooks on InferenceModels: {webhooks or 'none'}"
    )
    for mutation, count in known.items():
        print(f"KNOWN disagreement, {count} manifests: {mutation} (open; pinned by {KNOWN[mutation]})")
    for label, lines in (("DISAGREE", disagreements), ("UNNAMED", unnamed), ("MISS", misses)):
        for line in lines[:12]:
            print(label, line)
    failures = []
    if misses:
        failures.append(f"{len(misses)} cases the generator got wrong")
    if disagreements:
        failures.append(f"{len(disagreements)} manifests on which pydantic and the API server disagree")
    if unnamed:
        failures.append(f"{len(unnamed)} rejections that do not name the field")
    admitted = counts["invalid"] - counts["invalid rejected by the API server"] - sum(known.values())
    if admitted:
        failures.append(f"{admitted} invalid manifests admitted")
    if counts["valid accepted by the API server"] != counts["valid"]:
        failures.append(f"{counts['valid'] - counts['valid accepted by the API server']} valid manifests refused")
    assert not failures, "; ".join(failures)


def tame(spec: dict, pool: str, pick: random.Random) -> dict:
    """The spec with its hardware pointed where nothing runs, and at most 3 replicas."""
    spec = copy.deepcopy(spec)
    hardware = spec.get("hardware") or {}
    if hardware.get("mode") == "Explicit" or pick.random() < 0.6:
        pools = hardware.get("pools") or [{"name": "fuzz", "nodeSelector": {}}]
        spec["hardware"] = {
            **hardware,
            "mode": "Explicit",
            "pools": [{**p, "nodeSelector": {FUZZ_LABEL: pool}} for p in pools[:2]],
        }
    else:
        spec["hardware"] = {**hardware, "mode": "Auto", "includeCPU": False, "include": [f"NO-SUCH-GPU-{pool}"]}
    slo = spec.get("slo")
    if slo:
        slo["maxReplicas"] = min(slo.get("maxReplicas", 10), 3)
        slo["minReplicas"] = min(slo.get("minReplicas", 1), slo["maxReplicas"])
    return spec


def fuzz_node(name: str, pool: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {FUZZ_LABEL: pool, "kubernetes.io/hostname": name}},
        "spec": {"unschedulable": True},
    }


def test_every_valid_manifest_is_handled_by_the_operator_without_an_exception(api, verdicts, operator, tmp_path, seed):
    valid = [case for case, (server_ok, _), (model_ok, _) in verdicts if case.valid is True and server_ok and model_ok]
    core = client.CoreV1Api(api)
    namespace = f"faults-fuzz-{random.randrange(16**6):06x}"
    node = f"{namespace}-node"
    install.create_namespace(core, namespace, {"tensorkiln.dev/suite": "faults"})  # with the registry claim
    core.create_node(fuzz_node(node, namespace))
    # No room for any pod, even one that tolerates the cordon.
    core.patch_node_status(node, {"status": {"allocatable": {"pods": "0", "cpu": "0", "memory": "0"},
                                             "capacity": {"pods": "0", "cpu": "0", "memory": "0"}}})  # fmt: skip
    registry_uri = operator.registry_uri  # where the seeds go: the installed operator looks there
    try:
        wait_healthy(operator)
        log_start = len(operator.log())
        nodes = [api.sanitize_for_serialization(n) for n in core.list_node().items]
        pick = random.Random(seed)
        custom = client.CustomObjectsApi(api)
        seeded = 0
        started = time.monotonic()
        for i, case in enumerate(valid):
            body = case.manifest(f"fz-{i}", namespace)
            body["spec"] = tame(body["spec"], namespace, pick)
            if "sha256" in body["spec"]["source"]:
                spec = normalised_spec(body)
                for target in select_targets(spec["hardware"], discover(nodes), nodes):
                    if target.nodes:
                        publish_test_seed(registry_uri, body, target, tmp_path / "seeds" / str(i))
                        seeded += 1
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)
        print(
            f"\n{len(valid)} valid InferenceModels created in {time.monotonic() - started:.0f} s ({seeded} engines seeded)"
        )

        def handled():
            found = models(api, namespace)
            done = [m for m in found if m.get("status", {}).get("observedGeneration") == m["metadata"]["generation"]]
            return len(done) == len(valid)

        try:
            wait_until(handled, 300, "a status on every InferenceModel", interval=3)
        except AssertionError as error:
            print(error)
        time.sleep(20)  # a few resync passes over everything, and the events they cause
        found = models(api, namespace)
        phases = Counter(m.get("status", {}).get("phase", "no status") for m in found)
        reasons = Counter(
            f"{t}={condition(m, t).get('reason')}" for m in found for t in ("Deployed",) if condition(m, t)
        )
        cjs = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")[
            "items"
        ]
        cj_phases = Counter(f"{c.get('status', {}).get('phase')}/{c.get('status', {}).get('reason', '')}" for c in cjs)
        invalid_spec = [m["metadata"]["name"] for m in found if condition(m, "Ready").get("reason") == "InvalidSpec"]
        unhandled = [
            m["metadata"]["name"]
            for m in found
            if m.get("status", {}).get("observedGeneration") != m["metadata"]["generation"]
        ]
        exceptions = log_exceptions(operator.log()[log_start:])
        ready_reasons = Counter(condition(m, "Ready").get("reason", "none") for m in found)
        print(f"phases: {dict(phases)}\nReady: {dict(ready_reasons)}\nDeployed: {dict(reasons)}")
        print(f"CompileJobs: {len(cjs)} {dict(cj_phases)}")
        refusals = [
            condition(m, "Deployed")["message"]
            for m in found
            if condition(m, "Deployed").get("reason") == "ServingRefused"
        ]
        refusals += [c["status"]["message"] for c in cjs if c.get("status", {}).get("reason") == "JobRefused"]
        for message in sorted(set(refusals))[:20]:
            print("REFUSED", message[:400])
        print(f"unexpected exceptions in the operator log: {len(exceptions)} (expected 0)")
        for line in Counter(exceptions).most_common(10):
            print("EXCEPTION", line)
        assert not invalid_spec, f"admitted, yet the operator calls them invalid: {invalid_spec[:10]}"
        assert not unhandled, f"{len(unhandled)} InferenceModels without a current status: {unhandled[:10]}"
        assert not exceptions, f"{len(exceptions)} exceptions in the operator log"
    finally:
        core.delete_node(node)
        install.delete_namespace(core, namespace, timeout=600)
