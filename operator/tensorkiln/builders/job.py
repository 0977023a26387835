"""CompileJob -> batch/v1 Job that runs the compiler on a node of the hardware class (pure)."""

import json

from tensorkiln.builders import labels, storage
from tensorkiln.builders.naming import bounded_name

# The compiler exits with this code for bad input (unreadable model, wrong digest, ...):
# retrying cannot help, so the Job fails at once instead of burning its retry budget.
EXIT_INVALID_INPUT = 2
SPEC_ENV = "TENSORKILN_COMPILE_SPEC"
TERMINATION_LOG = "/dev/termination-log"

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def job_name(compile_job: dict) -> str:
    """One Job per (CompileJob, options): a changed spec gets a new Job, never an edited one."""
    return f"{compile_job['metadata']['name']}-{compile_job['spec']['optionsHash'][:8]}"


def build_job(compile_job: dict, registry_secret: str | None = None) -> dict:
    """The Job; `registry_secret` names a Secret whose keys become env (S3 credentials)."""
    spec = compile_job["spec"]
    hardware = spec["hardware"]
    source = storage.model_source(spec["source"]["uri"])
    registry = storage.registry(spec["registry"]["uri"])
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
        ],
        "resources": hardware.get("resources", {}),
        "securityContext": RESTRICTED_CONTAINER,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "work", "mountPath": "/work"},
            {"name": "tmp", "mountPath": "/tmp"},
            *source.mounts,
            *registry.mounts,
        ],
    }
    if registry_secret:
        container["envFrom"] = [{"secretRef": {"name": registry_secret}}]
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": hardware["nodeSelector"],
        "tolerations": hardware.get("tolerations", []),
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            *source.volumes,
            *registry.volumes,
        ],
    }
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
