"""Why a pod's containers do not start, as the kubelet reports it (pure)."""

# Waiting reasons that do not pass by themselves: a bad image, a missing ConfigMap or Secret, a crash loop.
STUCK = (
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ImageNotMappable",
)


def container_problem(pod_name: str, status: dict) -> str | None:
    """A container that exited non-zero or waits for good, with the kubelet's words (they name the
    image and the registry's answer for a failed pull)."""
    state, last = status.get("state", {}), status.get("lastState", {})
    terminated = state.get("terminated") or last.get("terminated")
    if terminated and terminated.get("exitCode", 0) != 0:
        detail = (terminated.get("message") or terminated.get("reason") or "").strip()
        return f"pod {pod_name}: container {status['name']} exited {terminated['exitCode']}: {detail}"
    waiting = stuck_waiting(status)
    if waiting:
        return f"pod {pod_name}: container {status['name']}: {waiting[0]}: {waiting[1]}".rstrip(": ")
    return None


def stuck_waiting(status: dict) -> tuple[str, str] | None:
    """(reason, message) of a container status waiting for good, else None."""
    waiting = status.get("state", {}).get("waiting") or {}
    if waiting.get("reason") in STUCK:
        return waiting["reason"], waiting.get("message", "")
    return None


def stuck_container(pod: dict | None) -> tuple[str, str] | None:
    """(reason, message) of the first of the pod's containers (init containers first) that waits for good."""
    status = (pod or {}).get("status", {})
    for container in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        waiting = stuck_waiting(container)
        if waiting:
            image = container.get("image", "")
            return waiting[0], f"container {container['name']} (image {image}): {waiting[1]}".rstrip(": ")
    return None
