"""One thread per pod: plan it, run its containers, probe them, report status, tear it down.

The worker owns everything about its pod and is driven by a short tick: each tick it looks at
the latest pod object it was given, advances the containers (init containers one by one, then
the app containers together), runs due probes, enforces activeDeadlineSeconds, and sends the
status when it changed. A failed API call is simply retried on a later tick.

Status semantics follow the kubelet: restartPolicy Never / OnFailure / Always with an
exponential back-off (immediate, then 10 s doubling up to 5 min, reset after 10 min of good
running); a deleted pod's processes get SIGTERM, then SIGKILL after the grace period, its
final phase is reported, and the pod object is deleted with grace period 0.

Projected service-account tokens are renewed while the pod runs (podspec.token_refresh_seconds);
a failed renewal is retried every SETUP_RETRY_S and the old token stays meanwhile. ConfigMap,
Secret and downwardAPI contents are re-synced every VOLUME_SYNC_S (podspec.synced_volumes), so a
renewed certificate reaches a running pod. The kubelet takes up to about a minute (its sync
period); 15 s keeps a renewal's round trip short for tests and costs one GET per referenced object
per pod and period, little for a one-machine cluster. A volume that cannot be filled (a missing
Secret) holds the pod in ContainerCreating and is retried; each failure is also recorded as a
Warning Event (FailedMount, or Failed for a container's config), counted up while it repeats.

Agent restarts: a previous agent's processes were killed (runtime.sweep), so containers the
API still shows running are reported lost (exit 137, ContainerStatusUnknown) and restarted
when the restart policy allows; completed init containers are not run again.
"""

from __future__ import annotations

import calendar
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cgroups import ContainerCgroup, MemoryCgroups
from .ipam import IpAllocator, IpExhausted
from .kube import Kube, delete_pod_now, describe, is_status, retry
from .node import HOST_IP
from .podspec import (
    VOLUME_PENDING,
    ContainerPlan,
    PlanError,
    PodContext,
    PodPlan,
    Resolver,
    plan_pod,
    plan_volume,
    synced_volumes,
    token_refresh_seconds,
    token_volumes,
    write_atomically,
)
from .probes import ProbeTracker, run_probe
from .runtime import Process, StartError
from .status import (
    TERMINAL_PHASES,
    ContainerState,
    exit_code,
    pod_conditions,
    pod_event,
    pod_phase,
    pod_status,
    restarts,
    running,
    terminated,
    termination_message,
    timestamp,
    waiting,
)

log = logging.getLogger(__name__)

TICK_S = 0.5
SETUP_RETRY_S = 5
VOLUME_SYNC_S = 15
BACKOFF_INITIAL_S = 10
BACKOFF_CAP_S = 300
BACKOFF_RESET_S = 600
DEFAULT_GRACE_S = 30
STATUS_RETRY_CAP_S = 30
DEADLINE_REASON = "DeadlineExceeded"
OOM_KILLED = "OOMKilled"
INITIAL_PROBE_RESULT = {"startup": None, "readiness": False, "liveness": True}  # as the kubelet's prober
LOST = dict(
    exit_code=137,
    reason="ContainerStatusUnknown",
    message="The container could not be located when the pod was terminated",
)


@dataclass(frozen=True)
class NodeEnv:
    """What every worker shares."""

    kube: Kube
    resolver: Resolver
    ipam: IpAllocator
    node_name: str
    state_dir: Path
    search_path: str
    shutdown_grace_s: float = 5
    apiserver: str = ""  # for pods' in-cluster access (podspec); "": none
    memory: MemoryCgroups | None = None  # None: memory limits are not enforced on this node

    def pod_dir(self, uid: str) -> Path:
        return self.state_dir / "pods" / uid

    def release(self, uid: str) -> None:
        """Forget a pod that no longer exists: its IP and its directory."""
        self.ipam.release(uid)
        shutil.rmtree(self.pod_dir(uid), ignore_errors=True)


@dataclass
class Container:
    state: ContainerState
    init: bool
    plan: ContainerPlan | None = None
    process: Process | None = None
    start_at: float | None = 0.0  # monotonic time of the next start; None: never again
    backoff: int = 0
    run_started: float = 0.0
    probes: dict[str, ProbeTracker] = field(default_factory=dict)


class PodWorker:
    def __init__(self, pod: dict, env: NodeEnv):
        meta = pod["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.env = env
        self.created = time.monotonic()
        self.finished = threading.Event()
        self._pod = pod
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stop_reason: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"pod {self.namespace}/{self.name}", daemon=True)
        spec = pod["spec"]
        self._policy = spec.get("restartPolicy", "Always")
        self._inits = [
            Container(ContainerState(c["name"], c.get("image", "")), True) for c in spec.get("initContainers", [])
        ]
        self._apps = [Container(ContainerState(c["name"], c.get("image", "")), False) for c in spec["containers"]]
        status = pod.get("status") or {}
        self._start_time = status.get("startTime") or timestamp()
        self._conditions = {c["type"]: c for c in status.get("conditions", [])}
        self._plan: PodPlan | None = None
        self._pod_ip = HOST_IP if spec.get("hostNetwork") else ""
        self._setup_at = 0.0
        self._ctx: PodContext | None = None
        self._token_refresh_at: float | None = None  # monotonic; None: no projected tokens
        self._sync_at = 0.0  # monotonic time of the next volume sync
        self._event: tuple[str, str, str, int] | None = None  # reason, message, name, count: the last Event
        self._failure: tuple[str, str] | None = None  # pod-level reason, message: the pod failed
        self._final = False  # nothing restarts any more
        self._pushed: dict | None = None
        self._push_after = 0.0  # back off after a failed status update
        self._push_delay = 0.0
        self._resume(status)

    # -- control, from the agent's thread --------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def observe(self, pod: dict) -> None:
        self._pod = pod
        self._wake.set()

    def stop(self, reason: str) -> None:
        """reason "gone": the pod left the API; "shutdown": the agent stops (report nothing)."""
        self._stop_reason = reason
        self._stopping.set()
        self._wake.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    # -- the pod's thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # one bad pod must not take the agent down
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)
            self._kill_all(0)
            self._failure = ("AgentError", f"local node agent error: {type(exc).__name__}: {exc}")
            self._push(self._status())
        finally:
            self.finished.set()

    def _loop(self) -> None:
        while True:
            if self._stop_reason:
                self._stop(self._stop_reason)
                return
            if self._pod["metadata"].get("deletionTimestamp"):
                self._delete()
                return
            now = time.monotonic()
            if self._plan is None and self._failure is None and now >= self._setup_at:
                self._setup(now)
            if self._plan is not None and not self._final:
                self._advance(now)
                self._enforce_deadline()
                if self._token_refresh_at is not None and now >= self._token_refresh_at:
                    self._refresh_tokens(now)
                if now >= self._sync_at:
                    self._sync_volumes(now)
            status = self._status()
            if self._push(status) and status["phase"] in TERMINAL_PHASES:
                log.info("pod %s/%s: %s", self.namespace, self.name, status["phase"])
                return
            self._wake.wait(TICK_S)
            self._wake.clear()

    def _resume(self, status: dict) -> None:
        """Carry restart counts and finished containers over from what the API shows."""
        prior = {s["name"]: s for s in status.get("initContainerStatuses", []) + status.get("containerStatuses", [])}
        for c in self._inits + self._apps:
            before = prior.get(c.state.name)
            if not before:
                continue
            c.state.restart_count = before.get("restartCount", 0)
            c.state.last_state = before.get("lastState") or {}
            state = before.get("state") or {}
            if "running" in state:
                state = terminated(
                    LOST["exit_code"],
                    reason=LOST["reason"],
                    message=LOST["message"],
                    started_at=state["running"].get("startedAt"),
                    finished_at=timestamp(),
                )
            if "terminated" not in state:
                continue
            if restarts(self._policy, init=c.init, exit_code=state["terminated"]["exitCode"]):
                c.state.last_state = state
            else:
                c.state.state, c.start_at = state, None
        for c in self._inits:
            c.state.ready = c.state.exit_code == 0

    def _setup(self, now: float) -> None:
        try:
            if not self._pod_ip:
                self._pod_ip = self.env.ipam.allocate(self.uid)
            ctx = PodContext(
                self.env.pod_dir(self.uid),
                self._pod_ip,
                HOST_IP,
                self.env.node_name,
                self.env.search_path,
                apiserver=self.env.apiserver,
            )
            plan = plan_pod(self._pod, ctx, self.env.resolver)
            _prepare_volumes(plan)
        except (PlanError, IpExhausted, OSError) as exc:
            self._setup_failed(exc, now)
            return
        self._ctx = ctx
        self._sync_at = now + VOLUME_SYNC_S
        refresh_s = token_refresh_seconds(self._pod)
        self._token_refresh_at = None if refresh_s is None else now + refresh_s
        for c, container_plan in zip(self._inits + self._apps, plan.init_containers + plan.containers):
            c.plan = container_plan
            if c.start_at is not None:
                c.state.state = waiting("PodInitializing" if self._inits and not c.init else "ContainerCreating")
        self._plan = plan

    def _setup_failed(self, exc: Exception, now: float) -> None:
        error = (
            exc
            if isinstance(exc, PlanError)
            else PlanError("IpExhausted" if isinstance(exc, IpExhausted) else "SetupFailed", str(exc), permanent=False)
        )
        log.warning("pod %s/%s: %s: %s", self.namespace, self.name, error.reason, error.message)
        if isinstance(exc, PlanError):
            self._warn(exc)
        for c in self._inits + self._apps:
            if c.start_at is not None and error.container in (None, c.state.name):
                c.state.state = waiting(error.reason, error.message)
        if error.permanent:
            self._failure, self._final = (error.reason, error.message), True
        else:
            self._setup_at = now + SETUP_RETRY_S

    def _refresh_tokens(self, now: float) -> None:
        """New projected service-account tokens, as the kubelet rotates them."""
        try:
            for volume in token_volumes(self._pod, self._ctx, self.env.resolver):
                write_atomically(volume.path, volume.files)
        except (PlanError, OSError) as exc:
            log.warning("pod %s/%s: renewing service-account tokens: %s", self.namespace, self.name, exc)
            self._token_refresh_at = now + SETUP_RETRY_S
            return
        self._token_refresh_at = now + token_refresh_seconds(self._pod)

    def _sync_volumes(self, now: float) -> None:
        """Rewrite the ConfigMap, Secret and downwardAPI volumes whose contents changed. One that
        cannot be read keeps its files (as the kubelet's), and says so in an Event."""
        for volume in synced_volumes(self._pod):
            try:
                plan = plan_volume(volume, self._pod, self._ctx, self.env.resolver)
                if write_atomically(plan.path, plan.files):
                    log.info("pod %s/%s: volume %s updated", self.namespace, self.name, plan.name)
            except (PlanError, OSError) as exc:
                log.warning("pod %s/%s: syncing volume %s: %s", self.namespace, self.name, volume["name"], exc)
                if isinstance(exc, PlanError):
                    self._warn(exc)
        self._sync_at = now + VOLUME_SYNC_S

    def _warn(self, error: PlanError) -> None:
        """A Warning Event for the error, as the kubelet records one; a repeat counts up the last."""
        reason, message = (
            ("FailedMount", error.message) if error.reason == VOLUME_PENDING else ("Failed", f"Error: {error.message}")
        )
        events = f"/api/v1/namespaces/{self.namespace}/events"
        try:
            if self._event and self._event[:2] == (reason, message):
                _, _, name, count = self._event
                patch = {"count": count + 1, "lastTimestamp": timestamp()}
                self.env.kube.call("PATCH", f"{events}/{name}", body=patch, patch="merge")
                self._event = (reason, message, name, count + 1)
                return
            body = pod_event(
                self._pod,
                node_name=self.env.node_name,
                reason=reason,
                message=message,
                now=timestamp(),
                now_ns=time.time_ns(),
            )
            self.env.kube.call("POST", events, body=body)
            self._event = (reason, message, body["metadata"]["name"], 1)
        except Exception as exc:  # an Event is a courtesy: the status says it too
            self._event = None  # perhaps expired (events live an hour): the next one is new
            log.warning("pod %s/%s: recording event %s: %s", self.namespace, self.name, reason, describe(exc))

    def _advance(self, now: float) -> None:
        pending_init = next((c for c in self._inits if c.state.exit_code != 0), None)
        if pending_init is not None:
            self._drive(pending_init, now)
            return
        for c in self._apps:
            self._drive(c, now)

    def _drive(self, c: Container, now: float) -> None:
        if c.process is None:
            if c.start_at is not None and now >= c.start_at:
                self._start(c, now)
            return
        code = c.process.poll()
        if code is not None:
            self._ended(c, code)
        elif not c.init:
            self._probe(c)

    def _start(self, c: Container, now: float) -> None:
        if c.state.last_state:
            c.state.restart_count += 1
        c.run_started, c.start_at = now, None
        try:
            c.process = Process.spawn(c.plan, self._memory_cgroup(c))
        except (StartError, OSError) as exc:
            self._exited(c, 128, reason="StartError", message=str(exc))
            return
        c.state.container_id = f"local://{c.process.pid}"
        c.state.state = running(timestamp())
        c.probes = {
            kind: ProbeTracker(probe, started_at=now, initial=INITIAL_PROBE_RESULT[kind])
            for kind, probe in c.plan.probes.items()
        }
        c.state.started = "startup" not in c.probes
        c.state.ready = c.state.started and "readiness" not in c.probes and not c.init

    def _probe(self, c: Container) -> None:
        for kind, tracker in c.probes.items():
            if (kind == "startup") == c.state.started or not tracker.due(time.monotonic()):
                continue  # a startup probe runs until it passes; the others only after that
            passed, detail = run_probe(tracker.probe, env=c.plan.env, cwd=c.plan.cwd)
            result = tracker.record(passed, time.monotonic())
            if kind == "readiness":
                c.state.ready = bool(result)
            elif kind == "startup" and result:  # a passing liveness probe changes nothing
                c.state.started = True
                c.state.ready = "readiness" not in c.probes
            elif result is False:  # startup or liveness failed: the kubelet kills the container
                log.info(
                    "pod %s/%s: container %s failed its %s probe (%s), killing it",
                    self.namespace,
                    self.name,
                    c.state.name,
                    kind,
                    detail,
                )
                self._ended(c, c.process.stop(self._grace_s()))
                return

    def _memory_cgroup(self, c: Container) -> ContainerCgroup | None:
        """The container's memory cgroup, with its limit; None without a limit or enforcement."""
        if c.plan.memory_limit is None or self.env.memory is None:
            return None
        return self.env.memory.create(f"{self.uid}_{c.state.name}", c.plan.memory_limit)

    def _ended(self, c: Container, returncode: int) -> None:
        """The container's process ended (a Popen return code); OOMKilled when the kernel's OOM
        killer struck in its memory cgroup, whatever the exit code (as containerd reports it)."""
        process = c.process
        if process.oom_killed:
            log.info(
                "pod %s/%s: container %s OOMKilled (exit code %d, memory limit %d bytes, peak %s bytes)",
                self.namespace,
                self.name,
                c.state.name,
                exit_code(returncode),
                c.plan.memory_limit,
                process.peak_bytes,
            )
        self._exited(c, exit_code(returncode), reason=OOM_KILLED if process.oom_killed else None)

    def _exited(self, c: Container, code: int, *, reason: str | None = None, message: str | None = None) -> None:
        if message is None:
            message = termination_message(
                _read_text(c.plan.termination_path),
                c.process.log_text(),
                exit_code=code,
                fallback_to_logs=c.plan.fallback_to_logs,
            )
        started_at = c.state.state.get("running", {}).get("startedAt")
        final_state = terminated(
            code,
            started_at=started_at,
            finished_at=timestamp(),
            message=message,
            reason=reason,
            container_id=c.state.container_id,
        )
        c.process, c.probes = None, {}
        c.state.ready = c.init and code == 0
        c.state.started = False
        if self._final or not restarts(self._policy, init=c.init, exit_code=code):
            c.state.state = final_state
            return
        if time.monotonic() - c.run_started >= BACKOFF_RESET_S:
            c.backoff = 0  # it ran well for a long time: this is a new failure, not a crash loop
        delay = 0 if c.backoff == 0 else min(BACKOFF_INITIAL_S * 2 ** (c.backoff - 1), BACKOFF_CAP_S)
        c.backoff += 1
        c.start_at = time.monotonic() + delay
        c.state.last_state = final_state
        c.state.state = waiting(
            "CrashLoopBackOff",
            f"back-off {delay}s restarting failed container="
            f"{c.state.name} pod={self.name}_{self.namespace}({self.uid})",
        )

    def _enforce_deadline(self) -> None:
        deadline = self._pod["spec"].get("activeDeadlineSeconds")
        if deadline is None:
            return
        started = calendar.timegm(time.strptime(self._start_time, "%Y-%m-%dT%H:%M:%SZ"))
        if time.time() - started >= deadline:
            log.info("pod %s/%s: active deadline of %ss exceeded", self.namespace, self.name, deadline)
            self._kill_all(self._grace_s())
            self._failure = (DEADLINE_REASON, "Pod was active on the node longer than the specified deadline")

    def _kill_all(self, grace_s: float) -> None:
        """SIGTERM every running container at once, then collect them (SIGKILL after grace_s)."""
        self._final = True
        live = [c for c in self._inits + self._apps if c.process is not None]
        deadline = time.monotonic() + grace_s
        for c in live:
            c.process.terminate()
        for c in live:
            self._ended(c, c.process.wait(deadline))
        for c in self._inits + self._apps:
            c.start_at = None

    def _delete(self) -> None:
        meta = self._pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        self._kill_all(self._grace_s() if grace is None else grace)
        status = self._status()
        if status["phase"] != "Succeeded":
            status["phase"] = "Failed"  # like the kubelet: a deleted pod ends in a terminal phase
        what = f"pod {self.namespace}/{self.name}"
        if retry(lambda: self._push(status), what=f"final status of {what}", stop=self._stopping) and retry(
            lambda: delete_pod_now(self.env.kube, meta), what=f"deleting {what}", stop=self._stopping
        ):
            self.env.release(self.uid)
            log.info("%s: deleted", what)

    def _stop(self, reason: str) -> None:
        self._kill_all(self.env.shutdown_grace_s if reason == "shutdown" else self._grace_s())
        if reason == "gone":
            self.env.release(self.uid)

    def _grace_s(self) -> float:
        grace = self._pod["spec"].get("terminationGracePeriodSeconds")
        return DEFAULT_GRACE_S if grace is None else grace

    def _status(self) -> dict:
        inits, apps = [c.state for c in self._inits], [c.state for c in self._apps]
        phase = "Failed" if self._failure else pod_phase(self._policy, inits, apps, final=self._final)
        conditions = pod_conditions(phase, inits, apps, self._conditions, timestamp())
        self._conditions = {c["type"]: c for c in conditions}
        reason, message = self._failure or (None, None)
        return pod_status(
            phase=phase,
            inits=inits,
            apps=apps,
            conditions=conditions,
            pod_ip=self._pod_ip or None,
            host_ip=HOST_IP,
            start_time=self._start_time,
            reason=reason,
            message=message,
        )

    def _push(self, status: dict) -> bool:
        if status == self._pushed:
            return True
        if time.monotonic() < self._push_after:
            return False
        try:
            self.env.kube.call(
                "PATCH",
                f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
                body={"status": status},
                patch="strategic",
            )
        except Exception as exc:
            if is_status(exc, 404):
                self.stop("gone")
            self._push_delay = min(max(2 * self._push_delay, 1), STATUS_RETRY_CAP_S)
            self._push_after = time.monotonic() + self._push_delay
            log.warning(
                "pod %s/%s: status update failed (retrying in %.0fs): %s",
                self.namespace,
                self.name,
                self._push_delay,
                describe(exc),
            )
            return False
        self._pushed, self._push_delay = status, 0.0
        return True


def _prepare_volumes(plan: PodPlan) -> None:
    for volume in plan.volumes:
        if volume.filled:
            write_atomically(volume.path, volume.files)
        elif volume.create:
            volume.path.mkdir(parents=True, exist_ok=True)
    for container in plan.init_containers + plan.containers:  # the mount views
        for link, target in container.links.items():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(target, target_is_directory=True)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
