"""Specs the API refuses because Kubernetes or Triton would refuse an object derived from them (the
Deployment, HorizontalPodAutoscaler, Job or Triton model config), each with the field its error names.

Found by the fault suite's admission fuzz (e2e/faults/test_fuzz_admission.py), once admitted: checked
against pydantic in tests/unit/test_refused_objects.py and against the API server (the CRD's schema
and CEL rules) in tests/integration/test_admission.py, so the two refuse alike.
"""

_POOL = {"name": "p", "nodeSelector": {"a": "b"}}


def _tolerating(*tolerations: dict) -> dict:
    return {"hardware": {"mode": "Explicit", "pools": [{**_POOL, "tolerations": list(tolerations)}]}}


def _resources(**resources: dict) -> dict:
    return {"serving": {"resources": resources}}


def _slo(**slo) -> dict:
    return {"slo": {"targetMilliseconds": 20, "mode": "HPA", **slo}}


_TOLERATION = "spec.hardware.pools[0].tolerations[0]"
_RESOURCES = "spec.serving.resources"

# why -> (spec, the field an error names); every spec has a valid source added.
REFUSED = {
    "Triton's max_queue_size is a uint32": (
        {"serving": {"dynamicBatching": {"queuePolicy": {"maxQueueSize": 2**32}}}},
        "spec.serving.dynamicBatching.queuePolicy.maxQueueSize",
    ),
    "an HPA's stabilization window is at most 3600 s": (
        _slo(scaleDownStabilizationSeconds=3601),
        "spec.slo.scaleDownStabilizationSeconds",
    ),
    "an HPA's stabilization window is an int32": (
        _slo(scaleUpStabilizationSeconds=2**31),
        "spec.slo.scaleUpStabilizationSeconds",
    ),
    "an HPA's maxReplicas is an int32": (_slo(maxReplicas=2**31), "spec.slo.maxReplicas"),
    "maxSurge 0 beside the operator's maxUnavailable 0": ({"rollout": {"maxSurge": 0}}, "spec.rollout.maxSurge"),
    "maxSurge 0% beside the operator's maxUnavailable 0": ({"rollout": {"maxSurge": "0%"}}, "spec.rollout.maxSurge"),
    "a toleration with Exists has no value": (
        _tolerating({"key": "k", "operator": "Exists", "value": "x"}),
        f"{_TOLERATION}.value",
    ),
    "a toleration key is a qualified name": (_tolerating({"key": "bad key!"}), f"{_TOLERATION}.key"),
    "a toleration without a key has operator Exists": (_tolerating({"operator": "Equal"}), f"{_TOLERATION}.key"),
    "a toleration key's prefix is at most 253 characters": (
        _tolerating({"key": "a" * 254 + "/k", "operator": "Exists"}),
        f"{_TOLERATION}.key",
    ),
    "a toleration value is a label value": (_tolerating({"key": "k", "value": "a b"}), f"{_TOLERATION}.value"),
    "tolerationSeconds needs effect NoExecute": (
        _tolerating({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}),
        f"{_TOLERATION}.effect",
    ),
    "an extended resource is a whole number": (
        _resources(limits={"example.com/foo": "500m"}),
        f"{_RESOURCES}.limits",
    ),
    "an extended resource's request needs a limit": (
        _resources(requests={"example.com/foo": "1"}),
        f"{_RESOURCES}.limits",
    ),
    "an extended resource's request equals its limit": (
        _resources(requests={"example.com/foo": "1"}, limits={"example.com/foo": "2"}),
        f"{_RESOURCES}.requests",
    ),
    "a request is at most its limit": (
        _resources(requests={"cpu": "2"}, limits={"cpu": "1500m"}),
        f"{_RESOURCES}.requests",
    ),
    "a resource quantity is not negative": (_resources(limits={"memory": "-1Gi"}), f"{_RESOURCES}.limits.memory"),
    "a resource is a standard or a domain-prefixed name": (_resources(limits={"gpu": 1}), f"{_RESOURCES}.limits"),
}
