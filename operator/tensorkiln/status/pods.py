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
        detail = why(terminated.get("message") or "") or terminated.get("reason") or ""
        return f"pod {pod_name}: container {status['name']} exited {terminated['exitCode']}: {detail}"
    waiting = stuck_waiting(status)
    if waiting:
        return f"pod {pod_name}: container {status['name']}: {waiting[0]}: {waiting[1]}".rstrip(": ")
    return None


def why(message: str) -> str:
    """What a termination message says of why the container exited: a model Triton could not load (its
    model table's status, `UNAVAILABLE: ...`, wrapped over rows; the message is the log's tail,
    FallbackToLogsOnError), else the last line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    model, status = None, []
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 3 and cells[2].startswith("UNAVAILABLE:") and model is None:
            model, status = cells[0], [cells[2]]
        elif len(cells) == 3 and model is not None and not cells[0] and not cells[1]:
            status.append(cells[2])  # the same status, wrapped
        elif model is not None:
            break
    if model is not None:
        return f"model {model}: {' '.join(status)}"
    return lines[-1] if lines else ""


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
