"""Map a Pod spec onto a plan for running it as local processes.

Pure given a `Resolver` (the ConfigMaps, Secrets and tokens the pod refers to), so every
mapping rule below is unit-tested without a cluster.

Layout under the agent's state dir:

    pods/<uid>/                              HOME and default working dir of every container
    pods/<uid>/volumes/<volume>/             emptyDir, configMap, secret, downwardAPI, projected
    pods/<uid>/<container>/log               stdout+stderr of all runs of the container
    pods/<uid>/<container>/termination-log   the container's terminationMessagePath

Path mapping. There is no mount namespace, so a volume is "mounted" by rewriting paths: in
the command, args, env values, workingDir and exec-probe commands, every occurrence of a
volumeMount's mountPath at the start of a path (not inside a longer path or name) is replaced
with the volume's local directory (plus subPath), longest mountPath first, in one pass (a
file:// URI's path included: file:///data/x with /data mounted names the volume's x). The
terminationMessagePath (default /dev/termination-log) is mapped onto the container's
termination-log the same way. hostPath volumes map to the host path itself, and so does a
persistentVolumeClaim bound to a hostPath or local PersistentVolume (what the kubelet mounts).
Only text the pod spec carries is rewritten: a program that builds a mount path itself, or
reads one from a file, sees the host filesystem. For those, each container has a mount view,
`pods/<uid>/<container>/root/`, where every volumeMount's mountPath is a symlink to its local
directory (a mount nested in another mount's path is left out of the view); an image rule that
knows its program's setting for such a path can point it there (images.operator_launch).

In-cluster API access. A container that mounts the service-account token volume (the projected
`kube-api-access-*` that ServiceAccount admission adds at /var/run/secrets/kubernetes.io/
serviceaccount) gets KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT(_HTTPS) naming the real
API server (what the kubelet's service env plus kube-proxy give a pod; this node has no
kube-proxy for the `kubernetes` Service's ClusterIP), and TENSORKILN_SERVICE_ACCOUNT_DIR naming
the volume's local directory. Clients that read the fixed path do not find it; the project's
own (tensorkiln.kube.load_incluster, and the operator's kopf login) read the token, CA and
namespace there, so they authenticate as the pod's ServiceAccount and RBAC applies. The kubelet
sets the service env for every pod; here only where the token is mounted.
Projected service-account tokens are requested again at 80% of their expirationSeconds (at most
every 24 h), as the kubelet does, and the files replaced atomically (`token_volumes`).

Volumes the agent fills (configMap, secret, downwardAPI, projected) are written as the kubelet's
AtomicWriter writes them (`write_atomically`): the files go into a new hidden directory, the
`..data` symlink is swapped to it in one rename, and each top-level name is a symlink through
`..data`, so a reader sees the old key set or the new one, never a mix (tls.crt and tls.key of
one certificate). A missing ConfigMap or Secret that is not `optional` holds the pod, as the
kubelet's mount does: reason ContainerCreating, message `MountVolume.SetUp failed for volume "v" :
secret "s" not found`, retried until it exists. Running pods' volumes are re-synced
(`synced_volumes`) so renewed certificates reach them, except volumes mounted through a subPath
(the kubelet does not update those either) and projected volumes holding tokens (rewritten when
the tokens are renewed: a sync must not request a token each time).

Env follows the kubelet: POD_IP, HOSTNAME, HOME and a PATH with the project venv first, then
envFrom, then env, with $(VAR) expansion in env values, command and args. A volume mounted at
/tmp also sets TMPDIR (unless the pod does), so temporary files land in the volume.

Resources: a container's `limits.memory` becomes `ContainerPlan.memory_limit` (bytes, rounded up;
0 means none, as for the kubelet), which the agent enforces with a memory cgroup where it can
(cgroups.py). Not enforced: requests, CPU limits, securityContext, readOnly mounts, ports (a
process binds what it likes; the pod IP gives each pod its own loopback address).
"""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from kubernetes.utils import parse_quantity

from .images import IMAGE_RULES, ImageRule, Launch, rule_for
from .probes import Probe, ProbeError, parse_probe

DEFAULT_TERMINATION_PATH = "/dev/termination-log"
DEFAULT_FILE_MODE = 0o644
CONFIG_ERROR = "CreateContainerConfigError"
VOLUME_PENDING = "ContainerCreating"  # the kubelet's waiting reason while a volume cannot be mounted yet
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# Read by tensorkiln.kube.load_incluster (same name there).
SERVICE_ACCOUNT_DIR_ENV = "TENSORKILN_SERVICE_ACCOUNT_DIR"
TOKEN_REFRESH_CAP_S = 24 * 3600
DATA_LINK = "..data"  # the kubelet AtomicWriter's name for the current generation of a volume's files
# PersistentVolume spec fields that are not the volume source.
_PV_COMMON = {
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
}
_KIND_NAMES = {"configmaps": "ConfigMap", "secrets": "Secret"}
_VAR_REF = re.compile(r"\$\$|\$\(([^)]*)\)")
_FIELD_KEY = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


class PlanError(Exception):
    """The pod cannot start. Permanent errors fail the pod; the others are retried."""

    def __init__(self, reason: str, message: str, *, permanent: bool):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent
        self.container: str | None = None  # the container it concerns, None for the whole pod


class Resolver(Protocol):
    def lookup(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """The object of a core/v1 resource ("configmaps", "secrets", "persistentvolumeclaims";
        "persistentvolumes" with namespace None), None when it does not exist."""

    def service_account_token(self, pod: dict, audience: str | None, expiration_seconds: int) -> str:
        """A token bound to the pod, as the kubelet requests for projected volumes."""


@dataclass(frozen=True)
class PodContext:
    pod_dir: Path
    pod_ip: str
    host_ip: str
    node_name: str
    search_path: str  # PATH for every container
    apiserver: str = ""  # https://host:port of the API server, for in-cluster access; "": none


@dataclass(frozen=True)
class VolumePlan:
    name: str
    path: Path
    files: dict[str, tuple[bytes, int]]  # relative path -> (content, mode)
    create: bool  # False for a hostPath that must already exist
    filled: bool = False  # the agent writes its whole contents (write_atomically), kept in sync


@dataclass(frozen=True)
class ContainerPlan:
    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    termination_path: Path
    fallback_to_logs: bool
    probes: dict[str, Probe]  # "startup" / "readiness" / "liveness"
    links: dict[Path, Path] = field(default_factory=dict)  # the mount view: symlink -> local directory
    memory_limit: int | None = None  # resources.limits.memory in bytes; None: no limit


@dataclass(frozen=True)
class PodPlan:
    volumes: list[VolumePlan]
    init_containers: list[ContainerPlan]
    containers: list[ContainerPlan]


def plan_pod(pod: dict, ctx: PodContext, resolver: Resolver, rules: tuple[ImageRule, ...] = IMAGE_RULES) -> PodPlan:
    spec = pod["spec"]
    volumes = [plan_volume(v, pod, ctx, resolver) for v in spec.get("volumes", [])]
    by_name = {v.name: v for v in volumes}

    def plan(c: dict) -> ContainerPlan:
        try:
            return _plan_container(c, pod, ctx, resolver, by_name, rules)
        except PlanError as exc:
            exc.container = c["name"]
            raise

    return PodPlan(volumes, [plan(c) for c in spec.get("initContainers", [])], [plan(c) for c in spec["containers"]])


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: unknown references stay as written, $$ escapes a $."""
    return _VAR_REF.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def path_rewriter(mapping: list[tuple[str, Path]]) -> Callable[[str], str]:
    """Replace each mountPath that starts a path with its local directory (see module doc)."""
    targets = {src.rstrip("/") or "/": str(dst) for src, dst in mapping}
    if not targets:
        return lambda text: text
    longest_first = "|".join(re.escape(src) for src in sorted(targets, key=len, reverse=True))
    # A path starts where no path or name character precedes it, or right after `file://`.
    pattern = re.compile(rf"(?:(?<![\w.\-/])|(?<=file://))({longest_first})(?![\w.\-])")
    return lambda text: pattern.sub(lambda m: targets[m[1]], text)


def _plan_container(
    c: dict,
    pod: dict,
    ctx: PodContext,
    resolver: Resolver,
    volumes: dict[str, VolumePlan],
    rules: tuple[ImageRule, ...],
) -> ContainerPlan:
    name, image = c["name"], c.get("image", "")
    container_dir = ctx.pod_dir / name
    base = _agent_env(pod, ctx) | _in_cluster_env(c, ctx, volumes)
    env = _container_env(c, pod, ctx, resolver, base)
    # The agent's own values (its PATH names this machine's directories) are not container
    # paths: only values the pod spec set, or overrode, are rewritten through the mounts.
    agent_values = {k: v for k, v in base.items() if env.get(k) == v}
    mounts = []
    for mount in c.get("volumeMounts", []):
        local = volumes[mount["name"]].path
        sub = mount.get("subPath") or expand(mount.get("subPathExpr", ""), env)
        mounts.append((mount["mountPath"], local / sub if sub else local))
    root = container_dir / "root"
    rule = rule_for(image, rules)
    launch = Launch(list(c.get("command", [])), list(c.get("args", [])), env, root=str(root))
    if rule:
        launch = rule.rewrite(launch)
        # What a rule adds is this machine's too (a library path, a setting into the mount view).
        agent_values |= {k: v for k, v in launch.env.items() if k not in env}
    argv = launch.command + launch.args
    if not argv or (rule is None and not launch.command):
        raise PlanError(
            "ImageNotMappable",
            f'container "{name}": image "{image}" has no local mapping; set command, or add a rule to IMAGE_RULES',
            permanent=True,
        )
    env = dict(launch.env)
    argv = [expand(arg, env) for arg in argv]
    # What a rule put in argv (this machine's executable, say) is a host path, never a container
    # path: only the pod's own command and args go through the mounts (a venv under /tmp must not
    # land in the pod's /tmp volume).
    from_pod = {expand(arg, env) for arg in [*c.get("command", []), *c.get("args", [])]}

    termination_path = container_dir / "termination-log"
    mapping = [(c.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH, termination_path), *mounts]
    if any(path.rstrip("/") == "/tmp" for path, _ in mounts):
        env.setdefault("TMPDIR", "/tmp")  # rewritten below: programs' temp files land in the volume
    rewrite = path_rewriter(mapping)

    ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if p.get("name")}
    try:
        probes = {
            kind: parse_probe(c[f"{kind}Probe"], pod_ip=ctx.pod_ip, ports=ports, rewrite=rewrite)
            for kind in ("startup", "readiness", "liveness")
            if c.get(f"{kind}Probe")
        }
    except ProbeError as exc:
        raise PlanError("ProbeNotSupported", f'container "{name}": {exc}', permanent=True) from exc

    working_dir = c.get("workingDir")
    return ContainerPlan(
        name=name,
        argv=[rewrite(arg) if arg in from_pod else arg for arg in argv],
        env={key: value if agent_values.get(key) == value else rewrite(value) for key, value in env.items()},
        cwd=Path(rewrite(working_dir)) if working_dir else ctx.pod_dir,
        log_path=container_dir / "log",
        termination_path=termination_path,
        fallback_to_logs=c.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        probes=probes,
        links=mount_view(root, mounts),
        memory_limit=memory_limit(c),
    )


def memory_limit(c: dict) -> int | None:
    """resources.limits.memory in bytes, rounded up as the kubelet does; None when unset or 0."""
    text = ((c.get("resources") or {}).get("limits") or {}).get("memory")
    if text is None:
        return None
    try:
        value = parse_quantity(text)
    except ValueError:
        value = -1
    if value < 0:
        raise PlanError(
            CONFIG_ERROR,
            f'container "{c["name"]}": resources.limits.memory {text!r} is not a memory quantity',
            permanent=True,
        )
    return math.ceil(value) or None


def mount_view(root: Path, mounts: list[tuple[str, Path]]) -> dict[Path, Path]:
    """Symlinks under `root` at each mountPath, to the volume's local directory. A mount inside
    another mount's path is left out: its link would land inside that volume's real directory."""
    paths = [path.rstrip("/") for path, _ in mounts]
    return {
        root / path.lstrip("/"): local
        for path, (_, local) in zip(paths, mounts, strict=True)
        if path and not any(path.startswith(other + "/") for other in paths if other and other != path)
    }


def _in_cluster_env(c: dict, ctx: PodContext, volumes: dict[str, VolumePlan]) -> dict[str, str]:
    """The API server and the token volume's local directory, for a container that mounts the token."""
    mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == SERVICE_ACCOUNT_MOUNT), None)
    if mount is None or not ctx.apiserver:
        return {}
    server = urlsplit(ctx.apiserver)
    port = str(server.port or 443)
    local = volumes[mount["name"]].path
    return {
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        SERVICE_ACCOUNT_DIR_ENV: str(local / mount["subPath"] if mount.get("subPath") else local),
    }


def _agent_env(pod: dict, ctx: PodContext) -> dict[str, str]:
    return {
        "PATH": ctx.search_path,
        "HOME": str(ctx.pod_dir),
        "HOSTNAME": pod["metadata"]["name"],
        "POD_IP": ctx.pod_ip,
    }


def _container_env(c: dict, pod: dict, ctx: PodContext, resolver: Resolver, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    namespace = pod["metadata"]["namespace"]
    for source in c.get("envFrom", []):
        kind, ref = (
            ("configmaps", source["configMapRef"]) if "configMapRef" in source else ("secrets", source["secretRef"])
        )
        values = _values(kind, namespace, ref["name"], ref.get("optional", False), resolver)
        prefix = source.get("prefix", "")
        env.update(
            {
                prefix + key: value.decode(errors="replace")
                for key, value in values.items()
                if _ENV_NAME.fullmatch(prefix + key)
            }
        )  # the kubelet skips invalid names too
    for var in c.get("env", []):
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = expand(var.get("value", ""), env)
            continue
        value = _env_source_value(source, pod, ctx, resolver)
        if value is not None:
            env[var["name"]] = value
    return env


def _env_source_value(source: dict, pod: dict, ctx: PodContext, resolver: Resolver) -> str | None:
    if "fieldRef" in source:
        return _field_value(pod, ctx, source["fieldRef"]["fieldPath"])
    for key, kind in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
        if key in source:
            ref = source[key]
            optional = ref.get("optional", False)
            values = _values(kind, pod["metadata"]["namespace"], ref["name"], optional, resolver)
            if ref["key"] in values:
                return values[ref["key"]].decode(errors="replace")
            if optional:
                return None
            raise PlanError(
                CONFIG_ERROR,
                f"couldn't find key {ref['key']} in {_KIND_NAMES[kind]} {pod['metadata']['namespace']}/{ref['name']}",
                permanent=False,
            )
    raise PlanError(CONFIG_ERROR, f"env source {sorted(source)} is not supported on the local node", permanent=True)


def _values(kind: str, namespace: str, name: str, optional: bool, resolver: Resolver) -> dict[str, bytes]:
    """Decoded data of a ConfigMap or Secret; {} when it is missing and optional."""
    obj = resolver.lookup(kind, namespace, name)
    if obj is None:
        if optional:
            return {}
        raise PlanError(CONFIG_ERROR, f'{_KIND_NAMES[kind].lower()} "{name}" not found', permanent=False)
    if kind == "secrets":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    values = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    values.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return values


def _field_value(pod: dict, ctx: PodContext, path: str) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": ctx.node_name,
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
    }
    if path in simple:
        return simple[path]
    if match := _FIELD_KEY.fullmatch(path):
        return (meta.get(match[1]) or {}).get(match[2], "")
    if path in ("metadata.labels", "metadata.annotations"):  # downwardAPI volume files
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{key}="{value}"' for key, value in sorted(items.items()))
    raise PlanError(CONFIG_ERROR, f"fieldRef {path!r} is not supported on the local node", permanent=True)


def plan_volume(volume: dict, pod: dict, ctx: PodContext, resolver: Resolver) -> VolumePlan:
    """The volume's local directory and, for the volumes the agent fills, their files. A retryable
    error filling one (a missing Secret, the API unreachable) is the kubelet's mount failure."""
    try:
        return _plan_volume(volume, pod, ctx, resolver)
    except PlanError as exc:
        if exc.permanent or exc.reason == VOLUME_PENDING:
            raise
        raise PlanError(
            VOLUME_PENDING, f'MountVolume.SetUp failed for volume "{volume["name"]}" : {exc.message}', permanent=False
        ) from exc


def _plan_volume(volume: dict, pod: dict, ctx: PodContext, resolver: Resolver) -> VolumePlan:
    name = volume["name"]
    local = ctx.pod_dir / "volumes" / name
    if "hostPath" in volume:
        host = volume["hostPath"]
        return VolumePlan(name, Path(host["path"]), {}, create=host.get("type") == "DirectoryOrCreate")
    if "emptyDir" in volume:
        return VolumePlan(name, local, {}, create=True)
    namespace = pod["metadata"]["namespace"]
    if "configMap" in volume or "secret" in volume:
        kind, src = ("configmaps", volume["configMap"]) if "configMap" in volume else ("secrets", volume["secret"])
        mode = src.get("defaultMode", DEFAULT_FILE_MODE)
        ref_name = src.get("name") or src.get("secretName")
        return VolumePlan(name, local, _keyed_files(kind, namespace, ref_name, src, mode, resolver), True, True)
    if "downwardAPI" in volume:
        src = volume["downwardAPI"]
        files = _downward_files(src, pod, ctx, src.get("defaultMode", DEFAULT_FILE_MODE))
        return VolumePlan(name, local, files, True, True)
    if "projected" in volume:
        return VolumePlan(name, local, _projected_files(volume["projected"], pod, ctx, resolver), True, True)
    if "persistentVolumeClaim" in volume:
        return _claimed_volume(name, volume["persistentVolumeClaim"]["claimName"], namespace, resolver)
    kind = next((key for key in volume if key != "name"), "unknown")
    raise PlanError(
        "VolumeNotSupported",
        f'volume "{name}": {kind} volumes are not supported on the local node '
        "(emptyDir, configMap, secret, downwardAPI, projected, hostPath and persistentVolumeClaim are)",
        permanent=True,
    )


def _claimed_volume(name: str, claim_name: str, namespace: str, resolver: Resolver) -> VolumePlan:
    """The claim's bound PersistentVolume, as the kubelet mounts it: for a hostPath or local PV,
    that directory of this machine. Not found or not bound yet: retried, as the kubelet waits."""
    claim = resolver.lookup("persistentvolumeclaims", namespace, claim_name)
    if claim is None:
        raise PlanError(VOLUME_PENDING, f'persistentvolumeclaim "{claim_name}" not found', permanent=False)
    pv_name = (claim.get("spec") or {}).get("volumeName")
    if not pv_name or (claim.get("status") or {}).get("phase") != "Bound":
        raise PlanError(VOLUME_PENDING, f'persistentvolumeclaim "{claim_name}" is not bound', permanent=False)
    pv = resolver.lookup("persistentvolumes", None, pv_name)
    if pv is None:
        raise PlanError(VOLUME_PENDING, f'persistentvolume "{pv_name}" not found', permanent=False)
    spec = pv.get("spec") or {}
    if "hostPath" in spec:
        host = spec["hostPath"]
        return VolumePlan(name, Path(host["path"]), {}, create=host.get("type") == "DirectoryOrCreate")
    if "local" in spec:
        return VolumePlan(name, Path(spec["local"]["path"]), {}, create=False)
    kind = next((key for key in spec if key not in _PV_COMMON), "unknown")
    raise PlanError(
        "VolumeNotSupported",
        f'volume "{name}": persistentvolume "{pv_name}" is a {kind} volume; only hostPath and local '
        "persistent volumes are supported on the local node",
        permanent=True,
    )


def _token_sources(volume: dict) -> list[dict]:
    sources = (volume.get("projected") or {}).get("sources") or []
    return [source["serviceAccountToken"] for source in sources if "serviceAccountToken" in source]


def token_refresh_seconds(pod: dict) -> float | None:
    """When the pod's projected tokens want renewing, as the kubelet: at 80% of the shortest
    expirationSeconds, at most every 24 h. None: the pod has none."""
    ttls = [t.get("expirationSeconds", 3600) for v in pod["spec"].get("volumes", []) for t in _token_sources(v)]
    return min(0.8 * min(ttls), TOKEN_REFRESH_CAP_S) if ttls else None


def token_volumes(pod: dict, ctx: PodContext, resolver: Resolver) -> list[VolumePlan]:
    """The pod's projected volumes that hold service-account tokens, planned again: new tokens."""
    return [plan_volume(v, pod, ctx, resolver) for v in pod["spec"].get("volumes", []) if _token_sources(v)]


def synced_volumes(pod: dict) -> list[dict]:
    """The volumes a periodic sync rewrites, as the kubelet keeps Secret and ConfigMap contents in
    step: those the agent fills, less token volumes (see token_volumes) and volumes some container
    mounts through a subPath (the kubelet bind-mounts the file as it was at the container's start)."""
    spec = pod["spec"]
    containers = spec.get("initContainers", []) + spec["containers"]
    sub_mounted = {
        m["name"] for c in containers for m in c.get("volumeMounts", []) if m.get("subPath") or m.get("subPathExpr")
    }
    return [
        v
        for v in spec.get("volumes", [])
        if any(kind in v for kind in ("configMap", "secret", "downwardAPI", "projected"))
        and not _token_sources(v)
        and v["name"] not in sub_mounted
    ]


def write_atomically(directory: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    """Make `directory` hold exactly `files` (relative path -> content, mode) as the kubelet's
    AtomicWriter does: a new `..<timestamp>` directory, `..data` swapped to it by one rename, and
    a `name -> ..data/name` symlink per top-level name. False when the files were already so.

    A name left from an earlier layout (a plain file or directory) is replaced by its symlink."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / DATA_LINK
    old = directory / os.readlink(data) if data.is_symlink() else None
    if old is not None and old.is_dir() and _holds(old, files):
        return False
    new = Path(tempfile.mkdtemp(prefix=time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()), dir=directory))
    try:
        new.chmod(0o755)
        for relative, (content, mode) in files.items():
            target = new / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)
        _swap_symlink(directory / "..data_tmp", data, new.name)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    tops = {Path(relative).parts[0] for relative in files}
    for top in tops:
        link = directory / top
        if not (link.is_symlink() and os.readlink(link) == f"{DATA_LINK}/{top}"):
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            _swap_symlink(directory / f"..{top}_tmp", link, f"{DATA_LINK}/{top}")
    for entry in directory.iterdir():  # names the new set no longer has
        if entry.name not in tops and entry.is_symlink() and os.readlink(entry).startswith(f"{DATA_LINK}/"):
            entry.unlink()
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return True


def _holds(directory: Path, files: dict[str, tuple[bytes, int]]) -> bool:
    """Whether `directory` has exactly these files, contents and modes."""
    present = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
    if present != set(files):
        return False
    for relative, (content, mode) in files.items():
        path = directory / relative
        if path.read_bytes() != content or path.stat().st_mode & 0o7777 != mode:
            return False
    return True


def _swap_symlink(temporary: Path, link: Path, target: str) -> None:
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)


def _keyed_files(
    kind: str, namespace: str, name: str, src: dict, mode: int, resolver: Resolver
) -> dict[str, tuple[bytes, int]]:
    optional = src.get("optional", False)
    values = _values(kind, namespace, name, optional, resolver)
    if "items" not in src:
        return {key: (value, mode) for key, value in values.items()}
    files = {}
    for item in src["items"]:
        if item["key"] in values:
            files[item["path"]] = (values[item["key"]], item.get("mode", mode))
        elif not optional:
            raise PlanError(
                CONFIG_ERROR,
                f"couldn't find key {item['key']} in {_KIND_NAMES[kind]} {namespace}/{name}",
                permanent=False,
            )
    return files


def _downward_files(src: dict, pod: dict, ctx: PodContext, mode: int) -> dict[str, tuple[bytes, int]]:
    files = {}
    for item in src.get("items", []):
        if "fieldRef" not in item:
            raise PlanError(
                CONFIG_ERROR,
                f"downwardAPI item {item['path']!r}: only fieldRef is supported on the local node",
                permanent=True,
            )
        files[item["path"]] = (_field_value(pod, ctx, item["fieldRef"]["fieldPath"]).encode(), item.get("mode", mode))
    return files


def _projected_files(src: dict, pod: dict, ctx: PodContext, resolver: Resolver) -> dict[str, tuple[bytes, int]]:
    mode = src.get("defaultMode", DEFAULT_FILE_MODE)
    namespace = pod["metadata"]["namespace"]
    files: dict[str, tuple[bytes, int]] = {}
    for source in src.get("sources") or []:
        if "configMap" in source:
            files.update(
                _keyed_files("configmaps", namespace, source["configMap"]["name"], source["configMap"], mode, resolver)
            )
        elif "secret" in source:
            files.update(_keyed_files("secrets", namespace, source["secret"]["name"], source["secret"], mode, resolver))
        elif "downwardAPI" in source:
            files.update(_downward_files(source["downwardAPI"], pod, ctx, mode))
        elif "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            value = resolver.service_account_token(pod, token.get("audience"), token.get("expirationSeconds", 3600))
            files[token["path"]] = (value.encode(), mode)
        else:
            raise PlanError(
                "VolumeNotSupported",
                f"projected source {sorted(source)} is not supported on the local node",
                permanent=True,
            )
    return files
