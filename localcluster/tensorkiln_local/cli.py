"""`tensorkiln-local`: the local development cluster, TensorKiln's images and its installation on
the cluster, and the files generated from the code (CRDs, plain manifests)."""

import argparse
import sys
from pathlib import Path

from tensorkiln_local.cluster import paths
from tensorkiln_local.cluster.binaries import BINARIES
from tensorkiln_local.cluster.engine_registry import KINDS as ENGINE_REGISTRIES


def _cluster(args) -> int:
    from tensorkiln_local.cluster import cluster

    if args.action == "up":
        cluster.up(Path(args.pools) if args.pools else None, stop_others=args.stop_others, profile=args.profile)
    elif args.action == "stop":
        cluster.stop()
    elif args.action == "down":
        cluster.down()
    elif args.action == "status":
        return cluster.status()
    elif args.action == "env":
        print(cluster.env(), end="")
    elif args.action == "build":
        unknown = sorted(set(args.names) - set(BINARIES))
        if unknown:
            print(f"unknown binaries {', '.join(unknown)}: choose from {', '.join(sorted(BINARIES))}", file=sys.stderr)
            return 2
        cluster.build(args.names)
    return 0


def _node(args) -> int:
    from kubernetes import client

    from tensorkiln_local.cluster import cluster, connection, nodes

    with connection.api_client() as api:
        if args.action == "up":
            cluster.start_node(client.CoreV1Api(api), args.name)
            print(f"real node {args.name} is Ready (log: {nodes.RealNode(args.name).log('kubelet')})")
        else:
            nodes.delete(client.CoreV1Api(api), args.name)
            print(f"real node {args.name} stopped and deleted")
    return 0


def _crds(args) -> int:
    from tensorkiln_local.crdgen import write_crds

    chart = Path(args.chart_output) if args.chart_output else None
    for path in write_crds(Path(args.output), chart):
        print(path)
    return 0


def _prepare(args) -> int:
    from tensorkiln_local.prepare import prepare

    prepare(tests=args.tests)
    return 0


def _docs(args) -> int:
    from tensorkiln_local import apireference

    print(apireference.write(Path(args.output)))
    return 0


def _manifests(args) -> int:
    from tensorkiln_local import installmanifests

    for path in installmanifests.write(Path(args.output)):
        print(path)
    return 0


def _images(args) -> int:
    from tensorkiln_local.images import build as images
    from tensorkiln_local.images import runtime_check
    from tensorkiln_local.images.catalog import ALL, COMPILER_GPU, LOCAL_PRODUCT

    names = args.names or [image.name for image in LOCAL_PRODUCT]
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        print(f"unknown images {', '.join(unknown)}: choose from {', '.join(sorted(ALL))}", file=sys.stderr)
        return 2
    built = images.build_all(names)
    if args.action == "build":
        for b in built:
            print(f"{b.name:<12} {b.reference}  {b.size_bytes / 1e6:.0f} MB")
            if b.name == COMPILER_GPU.name:
                print(f"{'':<12} TensorRT {runtime_check.check_tensorrt(COMPILER_GPU, b.reference)}, as its target's")
        return 0
    from tensorkiln_local import chart_oci

    registry = args.registry.rstrip("/")
    local = registry.split("/")[0].split(":")[0] in ("localhost", "127.0.0.1")
    tag = args.tag or chart_oci.chart(paths.CHART_DIR).app_version  # the tag the chart's values name
    for b in built:
        pushed = images.push(b, registry, tag, tls_verify=not local)
        print(f"{b.name:<12} {pushed.repository}:{pushed.tag}@{pushed.digest}")
    return 0


def _install(args) -> int:
    from tensorkiln_local import install

    values = install.install(tuple(args.namespace or install.SAMPLE_NAMESPACES), engine_registry=args.engine_registry)
    image = values["image"]
    print(f"installed: helm release {install.RELEASE} in {install.NAMESPACE}, {image['repository']}@{image['digest']}")
    print(f"engine registry: {install.registry_values(args.engine_registry)}")
    return 0


def _engines(args) -> int:
    from tensorkiln_api.registry.oci import OciRegistry

    from tensorkiln_local.cluster import engine_registry

    registry = OciRegistry.from_uri(engine_registry.uri(), {"TENSORKILN_OCI_INSECURE": "true"})
    listing = registry.listing()
    print(f"{registry.uri}: {len(listing)} tags")
    for tag, annotations in listing.items():
        print(f"  {tag}")
        for name, value in sorted(annotations.items()):
            print(f"      {name}: {value}")
    return 0


def _wait(args) -> int:
    from tensorkiln_local import converge

    return converge.wait(args.timeout)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tensorkiln-local", description=" ".join(__doc__.split()))
    commands = root.add_subparsers(dest="command", required=True)

    cluster = commands.add_parser("cluster", help="the local cluster (real control plane, kwok GPU pools, local-0)")
    cluster_actions = cluster.add_subparsers(dest="action", required=True)
    up = cluster_actions.add_parser("up", help="create or restart the cluster and converge pools and CRDs (idempotent)")
    up.add_argument("--pools", help=f"node pool file (default: the profile's; default's: {paths.DEFAULT_POOLS})")
    up.add_argument(
        "--profile",
        choices=("default", "kind"),
        help="the cluster's shape, chosen when it is created (then kept): default (simulated GPU pools, NFD labels) "
        "or kind (one control-plane node, no NFD or GFD labels, no RWX storage)",
    )
    up.add_argument(
        "--stop-others", action="store_true", help="stop another local cluster that runs (its state kept), not refuse"
    )
    cluster_actions.add_parser(
        "stop", help="stop every process of the cluster, keeping its state (as a machine shut down); `up` resumes it"
    )
    cluster_actions.add_parser(
        "down", help="stop the real nodes, kube-proxy, registry and control plane; delete the cluster and its network"
    )
    cluster_actions.add_parser("status", help="what runs; exit 1 if the API server is down")
    cluster_actions.add_parser("env", help='shell exports: eval "$(tensorkiln-local cluster env)"')
    build = cluster_actions.add_parser("build", help="build or reuse the cached binaries (helm only when named)")
    # A wrong name is refused with the list, not a KeyError (argparse's choices refuse an empty list).
    build.add_argument(
        "names", nargs="*", metavar="NAME", help=f"of {', '.join(sorted(BINARIES))}; default: the cluster's own"
    )
    cluster.set_defaults(func=_cluster)

    node = commands.add_parser(
        "node", help="more real nodes on this machine (local-1 ..), beside the cluster's local-0"
    )
    node_actions = node.add_subparsers(dest="action", required=True)
    for action, text in (
        ("up", "start its kubelet and containerd (idempotent); its pods get 10.244.N.x"),
        ("down", "stop it, remove its containers, mounts, cgroups and bridge, delete the Node"),
    ):
        node_actions.add_parser(action, help=text).add_argument("name", choices=[f"local-{i}" for i in range(1, 10)])
    node.set_defaults(func=_node)

    crds = commands.add_parser("crds", help="generate crds/*.yaml from the pydantic API types")
    crds.add_argument("--output", default=str(paths.CRDS_DIR))
    crds.add_argument(
        "--chart-output",
        default=str(paths.CHART_DIR / "crds"),
        help="the chart's copy ('' to skip; default: %(default)s)",
    )
    crds.set_defaults(func=_crds)

    prepare = commands.add_parser(
        "prepare",
        help="build what `cluster up` and `install` need (Go binaries, images) at once, where the caches lack it",
    )
    prepare.add_argument("--tests", action="store_true", help="also what only the tests run (versitygw, kstatus)")
    prepare.set_defaults(func=_prepare)

    docs = commands.add_parser("docs", help="generate docs/reference/api.md from the pydantic API types")
    docs.add_argument("--output", default=str(paths.API_REFERENCE))
    docs.set_defaults(func=_docs)

    manifests = commands.add_parser(
        "manifests",
        help="render manifests/install/ and manifests/kustomization.yaml from the Helm chart (default values)",
    )
    manifests.add_argument("--output", default=str(paths.MANIFESTS_DIR))
    manifests.set_defaults(func=_manifests)

    images = commands.add_parser("images", help="build TensorKiln's images with buildah (cached by content); push them")
    image_actions = images.add_subparsers(dest="action", required=True)
    build_images = image_actions.add_parser(
        "build", help="build (or reuse) the images; default: operator, compiler, engine-fetch, serving"
    )
    build_images.add_argument("names", nargs="*", metavar="NAME")
    push = image_actions.add_parser("push", help="build, then copy them to a registry (skopeo), printing each digest")
    push.add_argument("names", nargs="*", metavar="NAME")
    push.add_argument("--registry", required=True, help="e.g. ghcr.io/you (TLS verified unless localhost)")
    push.add_argument("--tag", help="default: the chart's appVersion")
    images.set_defaults(func=_images)

    install = commands.add_parser(
        "install",
        help="helm-install TensorKiln on the local cluster from its images (pushed to the local registry)",
    )
    install.add_argument(
        "--namespace", action="append", default=None, help="where InferenceModels go (default: default)"
    )
    install.add_argument(
        "--engine-registry",
        choices=ENGINE_REGISTRIES,
        default=ENGINE_REGISTRIES[0],
        help="oci: the cluster's OCI registry (default); pvc: a registry claim in each --namespace",
    )
    install.set_defaults(func=_install)

    engines = commands.add_parser(
        "engines", help="the local cluster's engine registry: each tag and its artifact's annotations"
    )
    engines.set_defaults(func=_engines)

    wait = commands.add_parser("wait", help="wait until every InferenceModel is handled and its compile pods placed")
    wait.add_argument("--timeout", type=float, default=300, help="seconds (default: %(default)s)")
    wait.set_defaults(func=_wait)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))
