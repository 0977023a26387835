"""CompileJob -> batch/v1 Job that runs the compiler on a node of the hardware class (pure)."""

import hashlib
import json

from tensorkiln.builders import labels, resources, storage
from tensorkiln.builders.compilejob import DEFAULT_RESOURCES
from tensorkiln.builders.naming import bounded_name
from tensorkiln.settings import Settings

# The compiler exits with this code for bad input (unreadable model, wrong digest, ...):
# retrying cannot help, so the Job fails at once instead of burning its retry budget.
EXIT_INVALID_INPUT = 2
SPEC_ENV = "TENSORKILN_COMPILE_SPEC"
TERMINATION_LOG = "/dev/termination-log"
# The compiler image's USER (compiler-jobs/Dockerfile): the owner of what compile pods publish.
COMPILER_UID = 65532

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


# What shapes a Job besides the compile's options: the image, the pod's placement and resources
# (`hardware`), its deadline and retries. A Job's pod template is immutable, so a change to one of these
# makes a new Job: a compile that failed for its memory, deadline, retries or image runs again once the
# spec fixes them (an engine already compiled is a cache hit instead).
JOB_SHAPING_FIELDS = ("image", "hardware", "deadlineSeconds", "retries")


def job_name(compile_job: dict) -> str:
    """One Job per (CompileJob, options, what shapes the Job, retry after a cluster fault): a changed
    spec or a retry gets a new Job, never an edited one; 8 hex digits of a hash of them."""
    spec = compile_job["spec"]
    shaping_fields = {field: spec.get(field) for field in JOB_SHAPING_FIELDS}
    if spec["source"].get("credentials"):  # only when set, so that every existing name stays what it was
        shaping_fields["sourceCredentials"] = spec["source"]["credentials"]
    # The compiler build keys the engine but not the options hash: a new compilerVersion alone (same image)
    # must get a Job of its own, or the finished Job of the previous build would stand for it.
    if spec.get("compilerVersion"):
        shaping_fields["compilerVersion"] = spec["compilerVersion"]
    shaping = json.dumps(shaping_fields, sort_keys=True)
    retry = compile_job.get("status", {}).get("clusterRetries", 0)
    hashed = [spec["optionsHash"], shaping, *([f"retry {retry}"] if retry else [])]  # no retry: the first name
    digest = hashlib.sha256("\n".join(hashed).encode()).hexdigest()
    return f"{compile_job['metadata']['name']}-{digest[:8]}"


def build_job(
    compile_job: dict,
    registry_secret: str | None = None,
    *,
    push_secret: str | None = None,
    oci_insecure: bool = False,
    image_pull_secrets: tuple[str, ...] = (),
    work_size_limit: str = Settings.compile_work_size_limit,
    tmp_size_limit: str = Settings.compile_tmp_size_limit,
) -> dict:
    """The Job; `registry_secret` names a Secret whose keys become env (S3 credentials); with an oci://
    registry, `push_secret` names a docker-config Secret mounted as the compiler's $DOCKER_CONFIG;
    `image_pull_secrets`, what the kubelet pulls the compiler image with; `work_size_limit` and
    `tmp_size_limit`, the sizeLimits of its /work and /tmp emptyDirs (Settings.compile_*_size_limit)."""
    spec = compile_job["spec"]
    hardware = spec["hardware"]
    source = storage.model_source(spec["source"]["uri"])
    registry = storage.registry(spec["registry"]["uri"])
    credentials = storage.registry_credentials(spec["registry"]["uri"], push_secret, insecure=oci_insecure)
    source_credentials = spec["source"].get("credentials") or {}
    source_secret = storage.source_credentials(source_credentials)
    # The compiler reads both locations as the container sees them.
    pod_spec_json = {**spec, "source": {**spec["source"], "uri": source.uri}, "registry": {"uri": registry.uri}}
    meta = compile_job["metadata"]
    name = job_name(compile_job)
    pod_labels = {
        labels.COMPILE_JOB: meta["name"],
        labels.MODEL: bounded_name(spec["modelName"], max_length=63),
        labels.HARDWARE_CLASS: hardware["className"],
        labels.OPTIONS_HASH: spec["optionsHash"][:16],
        **labels.MANAGED_BY,
    }
    container = {
        "name": "compiler",
        "image": spec["image"],
        "command": ["tensorkiln-compile"],
        "args": ["--termination-log", TERMINATION_LOG, "--work-dir", "/work"],
        # The spec travels in the environment so the pod needs no API access at all.
        "env": [
            {"name": SPEC_ENV, "value": json.dumps(pod_spec_json, sort_keys=True, separators=(",", ":"))},
            # The root filesystem is read-only; OpenVINO and NNCF write caches under $HOME.
            {"name": "HOME", "value": "/tmp"},
            # Recorded in the engine's manifest: another namespace reuses it only after fetching the source.
            {"name": "TENSORKILN_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            *credentials.env,
            *source_secret.env,
        ],
        # The CompileJob's resources (its DEFAULT_RESOURCES when the model sets none), with a cpu and memory
        # request and a memory limit whatever the model set; a CPU limit only where given (the CPU class's default).
        "resources": resources.bounded(hardware.get("resources") or {}, DEFAULT_RESOURCES[hardware["kind"]]),
        "securityContext": RESTRICTED_CONTAINER,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "work", "mountPath": "/work"},
            {"name": "tmp", "mountPath": "/tmp"},
            *source.mounts,
            *registry.mounts,
            *credentials.mounts,
            *source_secret.mounts,
        ],
    }
    if registry_secret:
        container["envFrom"] = [{"secretRef": {"name": registry_secret}}]
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": hardware["nodeSelector"],
        "tolerations": hardware.get("tolerations", []),
        # fsGroup: the kubelet gives a registry volume that supports ownership management (most
        # PersistentVolumes) to this group, writable, so the compiler can publish into it.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": COMPILER_UID,
            "runAsGroup": COMPILER_UID,
            "fsGroup": COMPILER_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [
            {"name": "work", "emptyDir": {"sizeLimit": resources.mebibytes(work_size_limit)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": resources.mebibytes(tmp_size_limit)}},
            *source.volumes,
            *registry.volumes,
            *credentials.volumes,
            *source_secret.volumes,
        ],
    }
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    if source_credentials.get("serviceAccountName"):
        # The cloud's workload identity (IRSA, GKE Workload Identity) works through the pod's token.
        pod_spec["serviceAccountName"] = source_credentials["serviceAccountName"]
        pod_spec["automountServiceAccountToken"] = True
    if "nodeAffinity" in hardware:
        pod_spec["affinity"] = {"nodeAffinity": hardware["nodeAffinity"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": pod_labels,
            "ownerReferences": [labels.owner_reference(compile_job, "CompileJob")],
        },
        "spec": {
            "backoffLimit": spec["retries"],
            "activeDeadlineSeconds": spec["deadlineSeconds"],
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "compiler", "operator": "In", "values": [EXIT_INVALID_INPUT]},
                    },
                    # Evictions and preemptions are not the compiler's fault.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
