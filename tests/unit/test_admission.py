"""Admission checks (pure), the webhook's judgement and configuration, its certificates, and the
SpecValid condition the reconciler reports from the same findings."""

import base64
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from cryptography import x509
from kubernetes import client
from tensorkiln.admission import certificates, webhook
from tensorkiln.hardware.classes import HardwareClass, discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln.review import checks
from tensorkiln.settings import Settings
from tensorkiln.status.inferencemodel import Rollup, inference_model_status
from tensorkiln_api import InferenceModelSpec
from tensorkiln_api.registry.manifest import Benchmark, Candidate

from .fleet import default_fleet

ROOT = "/var/lib/tensorkiln/models"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def spec_of(**overrides) -> dict:
    raw = {"source": {"uri": f"file://{ROOT}/rapidocr/cls.onnx"}, **overrides}
    return InferenceModelSpec.model_validate(raw).model_dump(by_alias=True, exclude_none=True, mode="json")


def nothing_missing(kind, name):
    return True


# --- file:// roots -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [f"file://{ROOT}/cls.onnx", f"file://{ROOT}/rapidocr/cls.onnx", f"file://{ROOT}/a/b/c/model.onnx"],
)
def test_file_uris_under_a_root_are_allowed(uri):
    assert checks.file_uri_allowed(uri, [ROOT])
    assert checks.check_file_uris(spec_of(source={"uri": uri}), [ROOT]) == []


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/shadow",
        f"file://{ROOT}",  # its directory, /var/lib/tensorkiln, would be mounted
        "file:///var/lib/tensorkiln/models-evil/x.onnx",  # a sibling sharing the prefix
        f"file://{ROOT}/./x/../../../etc/passwd",  # normalised or not, never outside
        f"file://{ROOT}/%2e%2e/registry/x",  # the fetcher decodes; the pod's hostPath does not
        f"file://{ROOT}/../registry/x",
    ],
)
def test_file_uris_escaping_the_roots_are_refused(uri):
    assert not checks.file_uri_allowed(uri, [ROOT])


def test_file_uri_finding_names_the_field_and_the_fix():
    spec = spec_of(source={"uri": "file:///etc/x.onnx"})
    (finding,) = checks.check_file_uris(spec, [ROOT])
    assert finding.is_error and finding.reason == "FileURINotAllowed"
    assert finding.message.startswith("spec.source.uri: file:///etc/x.onnx is outside")
    assert f"stage the file under {ROOT}" in finding.message


def test_no_roots_refuses_every_file_uri_and_says_which_schemes_work():
    (finding,) = checks.check_file_uris(spec_of(), [])
    assert "TENSORKILN_MODEL_FILE_ROOTS is empty" in finding.message and "pvc://, s3:// or https://" in finding.message


def test_calibration_file_uri_is_checked_too():
    spec = spec_of(compile={"calibration": {"datasetUri": "file:///home/me/data.npz"}})
    (finding,) = checks.check_file_uris(spec, [ROOT])
    assert finding.field == "spec.compile.calibration.datasetUri"


def test_other_schemes_are_not_file_checked():
    spec = spec_of(source={"uri": "s3://models/resnet.onnx"})
    assert checks.check_file_uris(spec, []) == []


# --- claims and Secrets --------------------------------------------------------------------------


def test_missing_source_claim_is_an_error_naming_field_claim_and_namespace():
    spec = spec_of(source={"uri": "pvc://models/resnet/model.onnx"})
    (finding,) = checks.check_references(
        spec, "team-a", lambda kind, name: not (kind, name) == ("PersistentVolumeClaim", "models")
    )
    assert finding.reason == "MissingPVC" and finding.field == "spec.source.uri"
    assert finding.message == (
        "spec.source.uri: PersistentVolumeClaim models does not exist in namespace team-a; "
        "create the claim in team-a or fix the URI"
    )


def test_registry_claim_and_secret_are_references_too():
    seen = []

    def exists(kind, name):
        seen.append((kind, name))
        return False

    findings = checks.check_references(
        spec_of(), "team-a", exists, registry_uri="pvc://engines/registry", registry_secret="s3-credentials"
    )
    assert seen == [("PersistentVolumeClaim", "engines"), ("Secret", "s3-credentials")]
    assert [f.reason for f in findings] == ["MissingPVC", "MissingSecret"]
    assert "TENSORKILN_REGISTRY_SECRET" in findings[1].message and "copy it into team-a" in findings[1].message


OCI_REGISTRY = "oci://registry.example.test/tensorkiln/engines"


def test_an_oci_registrys_push_and_pull_secrets_are_references_naming_their_settings():
    seen = []

    def exists(kind, name):
        seen.append((kind, name))
        return name == "engines-pull"

    findings = checks.check_references(
        spec_of(),
        "team-a",
        exists,
        registry_uri=OCI_REGISTRY,
        registry_push_secret="engines-push",
        registry_pull_secret="engines-pull",
    )
    assert seen == [("Secret", "engines-push"), ("Secret", "engines-pull")]
    (finding,) = findings
    assert finding.is_error and finding.reason == "MissingSecret"
    assert finding.field == "the engine registry's credentials (TENSORKILN_REGISTRY_PUSH_SECRET)"
    assert "Secret engines-push does not exist in namespace team-a" in finding.message
    assert "compile pods mount it to publish" in finding.message
    assert "kubectl -n team-a create secret docker-registry engines-push" in finding.message
    # Both missing: one finding each; the pull one names engine-fetch.
    both = checks.check_references(
        spec_of(),
        "ns",
        lambda k, n: False,
        registry_uri=OCI_REGISTRY,
        registry_push_secret="push",
        registry_pull_secret="pull",
    )
    assert [f.field for f in both] == [
        "the engine registry's credentials (TENSORKILN_REGISTRY_PUSH_SECRET)",
        "the engine registry's credentials (TENSORKILN_REGISTRY_PULL_SECRET)",
    ]
    assert "engine-fetch mounts it to read" in both[1].message


def test_one_secret_for_push_and_pull_is_one_finding_naming_both_settings():
    (finding,) = checks.check_references(
        spec_of(),
        "ns",
        lambda k, n: False,
        registry_uri=OCI_REGISTRY,
        registry_push_secret="engines",
        registry_pull_secret="engines",
    )
    assert "TENSORKILN_REGISTRY_PUSH_SECRET, TENSORKILN_REGISTRY_PULL_SECRET" in finding.field


@pytest.mark.parametrize("registry_uri", ["s3://engines", "pvc://engines/registry", None])
def test_push_and_pull_secrets_are_not_looked_for_without_an_oci_registry(registry_uri):
    """Only pods of an oci:// registry mount them (builders.storage.registry_credentials)."""
    seen = []
    checks.check_references(
        spec_of(),
        "ns",
        lambda kind, name: seen.append(name) or True,
        registry_uri=registry_uri,
        registry_push_secret="push",
        registry_pull_secret="pull",
    )
    assert "push" not in seen and "pull" not in seen


def test_oci_secrets_the_operator_may_not_read_are_not_findings():
    assert (
        checks.check_references(
            spec_of(),
            "ns",
            lambda kind, name: None,
            registry_uri=OCI_REGISTRY,
            registry_push_secret="push",
            registry_pull_secret="pull",
        )
        == []
    )


def test_review_passes_the_oci_secrets_on():
    spec = spec_of()
    findings = checks.review(
        spec,
        "ns",
        file_roots=[ROOT],
        exists=lambda kind, name: kind != "Secret",
        nodes=default_fleet(),
        registry_uri=OCI_REGISTRY,
        registry_pull_secret="pull",
    )
    assert findings[0].reason == "MissingSecret" and "TENSORKILN_REGISTRY_PULL_SECRET" in findings[0].field


def test_references_the_operator_may_not_read_are_not_findings():
    spec = spec_of(source={"uri": "pvc://models/x.onnx"})
    assert checks.check_references(spec, "ns", lambda kind, name: None, registry_secret="s") == []


# --- hardware ------------------------------------------------------------------------------------


def test_explicit_pool_matching_no_node_is_a_warning_naming_the_pool():
    spec = spec_of(
        hardware={
            "mode": "Explicit",
            "pools": [
                {"name": "l4", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
                {"name": "b200", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}},
            ],
        }
    )
    (finding,) = checks.check_hardware(spec, default_fleet())
    assert not finding.is_error and finding.reason == "NoMatchingNodes"
    assert finding.message.startswith("spec.hardware.pools[1] (b200): nodeSelector")


def test_auto_matching_nothing_names_the_products_in_the_cluster():
    (finding,) = checks.check_hardware(spec_of(hardware={"include": ["NVIDIA-B200*"]}), default_fleet())
    assert finding.field == "spec.hardware" and "NVIDIA-L4" in finding.message and "includeCPU" in finding.message


def test_auto_matching_some_node_is_fine():
    assert checks.check_hardware(spec_of(hardware={"include": ["NVIDIA-H100*"]}), default_fleet()) == []


def unlabelled_gpu_nodes() -> list[dict]:
    """GPU nodes of a cluster without GPU Feature Discovery: nvidia.com/gpu capacity, no product label."""
    return [
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64"}},
            "status": {"capacity": {"nvidia.com/gpu": "2"}},
        }
        for name in ("gpu-a", "gpu-b")
    ]


def test_gpus_without_a_product_label_are_a_warning_naming_the_nodes_and_the_label_that_tells_products_apart():
    findings = checks.check_hardware(spec_of(), default_fleet() + unlabelled_gpu_nodes())
    assert [(f.severity, f.reason, f.field) for f in findings] == [("Warning", "GPUProductUnknown", "spec.hardware")]
    assert findings[0].message == (
        "spec.hardware: nodes gpu-a, gpu-b have nvidia.com/gpu capacity but no nvidia.com/gpu.product label: their "
        "GPUs are taken as one product (hardware class nvidia-gpu-unlabelled); install GPU Feature Discovery "
        "(NVIDIA GPU Operator) so that each product gets its own engine"
    )
    condition = checks.spec_valid_condition(findings)
    assert (condition["type"], condition["status"], condition["reason"]) == ("SpecValid", "True", "GPUProductUnknown")


def test_gpus_without_a_product_label_are_reported_beside_a_spec_they_do_not_match_but_not_for_explicit_pools():
    nodes = default_fleet() + unlabelled_gpu_nodes()
    findings = checks.check_hardware(spec_of(hardware={"include": ["NVIDIA-B200*"]}), nodes)
    assert [f.reason for f in findings] == ["NoMatchingNodes", "GPUProductUnknown"]
    pools = [{"name": "l4", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}]
    assert checks.check_hardware(spec_of(hardware={"mode": "Explicit", "pools": pools}), nodes) == []


# --- SLO target against the measured latency -----------------------------------------------------


def manifest(winner_p95_at_1=4.0):
    def candidate(id_, p95_1):
        return Candidate(
            id=id_,
            compiler="OnnxRuntime",
            precision="FP32",
            status="Selected" if id_ == "winner" else "Passed",
            benchmarks=[
                Benchmark(
                    batch_size=b, p50_ms=p / 2, p95_ms=p, p99_ms=p, throughput_per_s=1, threads=1, warmup_runs=1, runs=1
                )
                for b, p in ((1, p95_1), (8, p95_1 * 5))
            ],
        )

    return SimpleNamespace(
        candidates=[candidate("baseline", 9.0), candidate("winner", winner_p95_at_1)],
        selection=SimpleNamespace(winner="winner"),
    )


def test_single_request_p95_is_the_winners_batch_one_figure():
    assert checks.single_request_p95(manifest(4.0)) == 4.0


def test_target_below_measured_p95_warns_with_the_figure():
    spec = spec_of(slo={"targetMilliseconds": 3})
    (finding,) = checks.check_slo_target(spec, checks.measured_latencies({"cpu": manifest(4.2), "l4": manifest(1.0)}))
    assert not finding.is_error and finding.reason == "TargetBelowMeasuredLatency"
    assert "3 ms is below the engine's measured single-request p95 (cpu 4.2 ms)" in finding.message
    assert "at least 4.2 ms" in finding.message


def test_reachable_target_or_no_figures_or_no_slo_is_fine():
    assert checks.check_slo_target(spec_of(slo={"targetMilliseconds": 5}), {"cpu": 4.2}) == []
    assert checks.check_slo_target(spec_of(slo={"targetMilliseconds": 1}), {}) == []
    assert checks.check_slo_target(spec_of(), {"cpu": 4.2}) == []


# --- all together, and the condition -------------------------------------------------------------


def test_review_puts_errors_first_and_the_condition_follows_the_first():
    spec = spec_of(source={"uri": "file:///etc/x.onnx"}, hardware={"include": ["NVIDIA-B200*"]})
    findings = checks.review(spec, "ns", file_roots=[ROOT], exists=nothing_missing, nodes=default_fleet())
    assert [f.reason for f in findings] == ["FileURINotAllowed", "NoMatchingNodes"]
    condition = checks.spec_valid_condition(findings)
    assert (condition["type"], condition["status"], condition["reason"]) == ("SpecValid", "False", "FileURINotAllowed")
    assert "spec.hardware matches no node" in condition["message"]


def test_warnings_only_keep_spec_valid_true_with_the_reason():
    spec = spec_of(hardware={"include": ["NVIDIA-B200*"]})
    findings = checks.review(spec, "ns", file_roots=[ROOT], exists=nothing_missing, nodes=default_fleet())
    condition = checks.spec_valid_condition(findings)
    assert (condition["status"], condition["reason"]) == ("True", "NoMatchingNodes")
    assert checks.spec_valid_condition([])["reason"] == "Valid"


# --- batcher settings the spec runs no dynamic batcher for ----------------------------------------


@pytest.mark.parametrize(
    "serving, why",
    [
        ({"dynamicBatching": {"enabled": False, "maxQueueDelayMicroseconds": 2000}}, "enabled is false"),
        ({"maxBatchSize": 0, "dynamicBatching": {"preferredBatchSizes": [], "maxQueueDelayMicroseconds": 2000}},
         "maxBatchSize is 0"),
        ({"sequenceBatching": {"state": [{"input": "s", "output": "sN"}]},
          "dynamicBatching": {"queuePolicy": {"maxQueueSize": 8}}}, "sequenceBatching is set"),
    ],
)  # fmt: skip
def test_batcher_settings_the_spec_leaves_unused_are_admitted_with_a_warning_naming_them(serving, why):
    # Admitted, not refused: objects created under the first CRD hold maxQueueDelayMicroseconds 2000 (its default).
    spec = spec_of(serving=serving)
    findings = checks.review(spec, "ns", file_roots=[ROOT], exists=nothing_missing, nodes=default_fleet())
    (finding,) = findings
    assert not finding.is_error and finding.reason == "UnusedBatcherSettings"
    assert finding.field.startswith("spec.serving.dynamicBatching.") and finding.message.startswith(finding.field)
    assert "set but unused: Triton runs no dynamic batcher" in finding.message and why in finding.message
    condition = checks.spec_valid_condition(findings)
    assert (condition["status"], condition["reason"]) == ("True", "UnusedBatcherSettings")
    raw = model()
    raw["spec"]["serving"] = serving
    assert webhook.judge(raw, None, "CREATE", lambda model_, spec_: findings, []) == ([], [finding.message])


def test_batcher_settings_are_no_finding_where_the_spec_may_run_the_batcher():
    for serving in ({}, {"dynamicBatching": {"maxQueueDelayMicroseconds": 500}}, {"dynamicBatching": {"enabled": False}},
                    {"maxBatchSize": 0}):  # fmt: skip
        assert checks.check_batcher_settings(spec_of(serving=serving)) == []


def test_burst_capacity_under_per_class_is_admitted_with_a_warning_naming_it():
    spec = spec_of(slo={"targetMilliseconds": 50, "burstRequestsPerSecond": 20})
    (finding,) = checks.review(spec, "ns", file_roots=[ROOT], exists=nothing_missing, nodes=default_fleet())
    assert not finding.is_error and (finding.reason, finding.field) == (
        "UnusedBurstCapacity",
        "spec.slo.burstRequestsPerSecond",
    )
    assert finding.message == (
        "spec.slo.burstRequestsPerSecond: 20 req/s is unused: only placement LeastCost keeps burst capacity "
        "(PerClass scales each class alone on its own latency); set spec.slo.placement: LeastCost, or remove it"
    )
    used = spec_of(slo={"targetMilliseconds": 50, "burstRequestsPerSecond": 20, "placement": "LeastCost"})
    assert checks.check_burst_capacity(used) == []
    assert checks.check_burst_capacity(spec_of(slo={"targetMilliseconds": 50})) == []


def _status(spec_valid, compile_jobs=None, rollouts=None):
    target = HardwareClass(name="cpu", kind="CPU", product="cpu", node_selector={}, nodes=("local-0",))
    model = {"metadata": {"name": "m", "generation": 2}, "spec": {}}
    rollup = Rollup([target], compile_jobs or {}, rollouts or {}, spec_valid=spec_valid)
    return inference_model_status(model, rollup, lambda d: d, NOW)


def test_status_blocked_by_a_missing_claim_waits_pending_and_says_why():
    findings = checks.check_references(spec_of(source={"uri": "pvc://models/x.onnx"}), "ns", lambda k, n: False)
    status = _status(checks.spec_valid_condition(findings))
    conditions = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == "Pending"
    assert status["conditions"][0]["type"] == "Ready"  # Ready stays first; SpecValid is added last
    assert status["conditions"][-1]["type"] == "SpecValid"
    for type_ in ("Ready", "Compiled", "SpecValid"):
        assert (conditions[type_]["status"], conditions[type_]["reason"]) == ("False", "MissingPVC")
    assert "PersistentVolumeClaim models does not exist" in conditions["Ready"]["message"]


def test_status_of_a_model_on_unlabelled_gpus_says_their_product_is_unknown_and_which_label_would_tell():
    nodes = unlabelled_gpu_nodes()
    spec = spec_of()
    model = {"metadata": {"name": "m", "generation": 1}, "spec": spec}
    targets = select_targets(spec["hardware"], discover(nodes), nodes)
    rollup = Rollup(targets, spec_valid=checks.spec_valid_condition(checks.check_hardware(spec, nodes)))
    status = inference_model_status(model, rollup, lambda d: d, NOW)
    (entry,) = status["targets"]
    assert (entry["hardwareClass"], entry["kind"], entry["nodeCount"]) == ("nvidia-gpu-unlabelled", "GPU", 2)
    assert entry["product"] == "NVIDIA GPU (product unknown: no nvidia.com/gpu.product label)"
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert (spec_valid["status"], spec_valid["reason"]) == ("True", "GPUProductUnknown")
    assert (
        "nodes gpu-a, gpu-b have nvidia.com/gpu capacity but no nvidia.com/gpu.product label" in spec_valid["message"]
    )
    assert status["phase"] == "Compiling"  # compiled on one of them, as any GPU class


def test_status_blocked_by_a_file_uri_fails():
    (finding,) = checks.check_file_uris(spec_of(source={"uri": "file:///etc/x.onnx"}), [ROOT])
    assert _status(checks.spec_valid_condition([finding]))["phase"] == "Failed"


def test_status_with_warnings_only_is_otherwise_unchanged():
    warning = checks.Finding(checks.WARNING, "NoMatchingNodes", "spec.hardware", "spec.hardware matches no node")
    with_warning, without = _status(checks.spec_valid_condition([warning])), _status(None)
    assert with_warning["phase"] == without["phase"]
    assert with_warning["conditions"][:-1] == without["conditions"]


def test_a_compile_job_with_a_file_uri_outside_the_roots_never_gets_a_job():
    compile_job = {
        "metadata": {"name": "m-cpu", "namespace": "ns", "generation": 1},
        "spec": {"source": {"uri": "file:///etc/shadow"}, "calibration": None},
    }
    status = checks.refused_compile_job_status(compile_job, [ROOT], NOW)
    assert status["phase"] == "Failed" and status["reason"] == "FileURINotAllowed"
    assert status["conditions"][0]["type"] == "Compiled"
    compile_job["spec"]["source"]["uri"] = f"file://{ROOT}/x.onnx"
    assert checks.refused_compile_job_status(compile_job, [ROOT], NOW) is None


def test_settings_file_roots(monkeypatch):
    monkeypatch.delenv("TENSORKILN_MODEL_FILE_ROOTS", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert Settings.from_env().model_file_roots == (ROOT,)  # a local run: the local cluster's staging
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert Settings.from_env().model_file_roots == ()  # in a pod: none unless set
    monkeypatch.setenv("TENSORKILN_MODEL_FILE_ROOTS", "/a:/b")
    assert Settings.from_env().model_file_roots == ("/a", "/b")
    monkeypatch.setenv("TENSORKILN_MODEL_FILE_ROOTS", "")
    assert Settings.from_env().model_file_roots == ()


# --- the webhook's judgement ---------------------------------------------------------------------


def model(uri="pvc://models/x.onnx", namespace="ns", **meta):
    return {"metadata": {"name": "m", "namespace": namespace, **meta}, "spec": {"source": {"uri": uri}}}


def reviewing(findings):
    calls = []

    def review(model_, spec):
        calls.append(spec)
        return findings

    return review, calls


MISSING = checks.Finding(
    checks.ERROR, "MissingPVC", "spec.source.uri", "spec.source.uri: PersistentVolumeClaim models ..."
)
NO_NODES = checks.Finding(checks.WARNING, "NoMatchingNodes", "spec.hardware", "spec.hardware matches no node")


def test_judge_refuses_errors_and_passes_warnings():
    review, calls = reviewing([MISSING, NO_NODES])
    assert webhook.judge(model(), None, "CREATE", review, []) == ([MISSING.message], [NO_NODES.message])
    assert calls[0]["shapes"]["batch"]["max"] == 32  # the spec is validated, defaults applied


@pytest.mark.parametrize(
    "case",
    [
        dict(new=model(namespace="other"), old=None, operation="CREATE"),  # not watched
        dict(new=model(deletionTimestamp="2026-11-30T12:00:00Z"), old=model(), operation="UPDATE"),
        dict(new=model(annotations={"kopf": "progress"}), old=model(), operation="UPDATE"),  # spec unchanged
    ],
    ids=["unwatched-namespace", "being-deleted", "spec-unchanged"],
)
def test_judge_never_blocks_what_it_does_not_need_to_check(case):
    review, calls = reviewing([MISSING])
    assert webhook.judge(case["new"], case["old"], case["operation"], review, ["ns"]) == ([], [])
    assert calls == []


def test_judge_checks_a_changed_spec_on_update():
    review, _ = reviewing([MISSING])
    errors, _ = webhook.judge(model(uri="pvc://other/x.onnx"), model(), "UPDATE", review, ["ns"])
    assert errors == [MISSING.message]


def test_managed_configuration_sees_only_the_watched_namespaces_and_ignores_failures():
    config = webhook.build_configuration("tk", {"url": "https://127.0.0.1:9443/validate-inferencemodel"}, ["a"])
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] <= 10
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["a"]
    assert hook["clientConfig"]["url"].endswith("/" + webhook.HANDLER_ID)
    assert "namespaceSelector" not in webhook.build_configuration("tk", {"url": "u"}, [])["webhooks"][0]


# --- certificates --------------------------------------------------------------------------------


def test_issued_certificate_serves_tls_that_its_ca_verifies(tmp_path):
    bundle = certificates.issue(["127.0.0.1", "localhost"])
    (tmp_path / "tls.crt").write_bytes(bundle.cert)
    (tmp_path / "tls.key").write_bytes(bundle.key)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve():
            connection, _ = listener.accept()
            with server_context.wrap_socket(connection, server_side=True) as tls:
                tls.sendall(b"ok")

        thread = threading.Thread(target=serve)
        thread.start()
        client_context = ssl.create_default_context(cadata=bundle.ca.decode())
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.recv(2) == b"ok"
        thread.join()
    assert base64.b64decode(base64.b64encode(bundle.ca)) == bundle.ca


def test_kept_certificate_is_reused_only_while_it_fits():
    names = ["tk-webhook.tk-system.svc"]
    bundle = certificates.issue(names)
    assert certificates.usable(bundle, names)
    assert not certificates.usable(bundle, ["other.tk-system.svc"])
    assert not certificates.usable(bundle, names, now=datetime.now(UTC) + timedelta(days=340))
    foreign = certificates.issue(names)
    assert not certificates.usable(certificates.Bundle(foreign.ca, bundle.cert, bundle.key), names)
    assert not certificates.usable(certificates.Bundle(b"", b"", b""), names)


def test_durations_are_read_as_cert_manager_writes_them():
    assert certificates.parse_duration("8760h", "f") == timedelta(days=365)
    assert certificates.parse_duration("1h30m", "f") == timedelta(minutes=90)
    assert certificates.parse_duration("2.5s", "f") == timedelta(seconds=2.5)
    for bad in ("", "365d", "10", "h", "1h 30m"):
        with pytest.raises(ValueError, match="TENSORKILN_WEBHOOK_CERT_DURATION"):
            certificates.parse_duration(bad, "TENSORKILN_WEBHOOK_CERT_DURATION")


def test_renewal_is_due_renew_before_expiry_and_the_loop_wakes_for_it():
    names = ["tk-webhook.tk-system.svc"]
    now = datetime.now(UTC)
    bundle = certificates.issue(names, now=now, duration=timedelta(minutes=3))
    due = certificates.renewal_time(bundle, timedelta(minutes=2))
    assert abs((due - (now + timedelta(minutes=1))).total_seconds()) < 1
    renew_before = timedelta(minutes=2)
    assert certificates.usable(bundle, names, now=now + timedelta(seconds=50), renew_before=renew_before)
    assert not certificates.usable(bundle, names, now=now + timedelta(seconds=70), renew_before=renew_before)
    assert 55 < certificates.seconds_until_check(bundle, now + timedelta(seconds=1), renew_before, 300) < 60
    year = certificates.issue(names, now=now)
    assert certificates.seconds_until_check(year, now, certificates.RENEW_BEFORE, 300) == 300  # capped
    assert certificates.seconds_until_check(bundle, now + timedelta(hours=1), renew_before, 300) == 1.0  # overdue


def test_a_renewed_bundle_trusts_the_certificate_it_replaces_and_no_older_one():
    names = ["tk-webhook.tk-system.svc"]
    first = certificates.issue(names)
    second = certificates.issue(names, previous=first)
    third = certificates.issue(names, previous=second)
    assert len(certificates.ca_certificates(second.ca)) == 2
    assert certificates.ca_certificates(second.ca)[1] == certificates.ca_certificates(first.ca)[0]
    assert certificates.usable(second, names)  # its own CA signed it, wherever it sits in ca.crt
    assert certificates.ca_certificates(first.ca)[0] not in certificates.ca_certificates(third.ca)
    assert len(certificates.ca_certificates(third.ca)) == 2
    # An expired previous CA is not carried.
    old = certificates.issue(names, now=datetime.now(UTC) - timedelta(days=certificates.CA_DAYS + 1))
    assert len(certificates.ca_certificates(certificates.issue(names, previous=old).ca)) == 1
    # trust(): the union, each CA once.
    assert len(certificates.ca_certificates(certificates.trust(second, first))) == 2
    adopted = certificates.issue(names)  # another replica's, unrelated
    assert len(certificates.ca_certificates(certificates.trust(adopted, second))) == 3


def test_a_live_tls_context_serves_the_renewed_certificate_to_new_connections(tmp_path):
    """The Secret mode swaps certificates into the server's context (webhook._load): clients that
    trust old and new alike (the caBundle written first) connect before and after the swap."""
    names = ["tk-webhook.tk-system.svc"]
    first = certificates.issue(names)
    second = certificates.issue(names, previous=first)
    server_context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    webhook._load(server_context, first)
    serials = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve(times):
            for _ in range(times):
                connection, _ = listener.accept()
                with server_context.wrap_socket(connection, server_side=True) as tls:
                    tls.sendall(b"ok")

        def handshake(ca: bytes) -> None:
            client_context = ssl.create_default_context(cadata=ca.decode())
            with socket.create_connection(("127.0.0.1", port)) as raw:
                with client_context.wrap_socket(raw, server_hostname=names[0]) as tls:
                    der = tls.getpeercert(binary_form=True)
                    serials.append(x509.load_der_x509_certificate(der).serial_number)
                    assert tls.recv(2) == b"ok"

        thread = threading.Thread(target=serve, args=(3,))
        thread.start()
        handshake(certificates.trust(second, first))
        webhook._load(server_context, second)
        handshake(certificates.trust(second, first))
        handshake(second.ca)  # the caBundle once the switch is done
        thread.join()
    first_serial = x509.load_pem_x509_certificate(first.cert).serial_number
    second_serial = x509.load_pem_x509_certificate(second.cert).serial_number
    assert serials == [first_serial, second_serial, second_serial]


def test_the_ca_waits_for_a_configuration_created_after_the_operator_started():
    class Api:
        reads = 0

        def read_validating_webhook_configuration(self, name):
            self.reads += 1
            if self.reads < 3:  # Helm has not created it yet
                raise client.ApiException(status=404, reason="Not Found")
            return f"configuration {name}"

    slept = []
    assert webhook.wait_for_configuration(Api(), "tk", sleep=slept.append) == "configuration tk"
    assert slept == [webhook.CONFIGURATION_POLL_SECONDS] * 2


def test_other_errors_reading_the_configuration_are_raised():
    import pytest

    class Api:
        def read_validating_webhook_configuration(self, name):
            raise client.ApiException(status=403, reason="Forbidden")

    with pytest.raises(client.ApiException):
        webhook.wait_for_configuration(Api(), "tk", sleep=lambda s: pytest.fail("must not wait"))


def test_judge_refuses_a_name_no_derived_object_can_carry_before_asking_the_cluster():
    review, calls = reviewing([])
    errors, _ = webhook.judge(model(name="resnet.v2"), None, "CREATE", review, [])
    assert errors and errors[0].startswith("metadata.name: must be a DNS-1035 label") and calls == []


def test_judge_never_answers_with_a_raw_exception():
    def _with_body(body):
        error = client.ApiException(status=400, reason="Bad Request")
        error.body = body
        return error

    def failing(model_, spec):
        raise _with_body('{"kind":"Status","message":"unable to parse requirement: values[0]: Invalid value"}')

    errors, warnings = webhook.judge(model(), None, "CREATE", failing, [])
    assert errors == []  # admitted: the operator checks again before compiling
    (warning,) = warnings
    assert "400 Bad Request: unable to parse requirement" in warning and "HTTPHeaderDict" not in warning
    assert "SpecValid" in warning


def test_least_cost_placement_is_admitted_without_a_warning_now_that_the_scaler_places_by_it():
    spec = spec_of(slo={"targetMilliseconds": 25, "placement": "LeastCost"})
    assert checks.review(spec, "ns", file_roots=[ROOT], exists=nothing_missing, nodes=default_fleet()) == []
