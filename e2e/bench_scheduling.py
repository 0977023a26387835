"""Benchmark: apply N InferenceModels at once and time until every compile pod is scheduled.

Runs against the local cluster with TensorKiln installed (`make demo` leaves both up, or
`tensorkiln-local cluster up && tensorkiln-local install`). It first converges the cluster to
e2e/pools-scale.yaml (130 simulated GPU nodes: a compile pod holds its GPU while it runs, so
the default pools cannot place 300 at once) and restores the default pools at the end.
The GPU nodes are simulated by kwok, so this measures the control plane and the operator
(API writes, kube-scheduler placement), not any compile work.
Usage: .venv/bin/python e2e/bench_scheduling.py [--models 100]
"""

import argparse
import copy
import time
import uuid
from pathlib import Path

import yaml
from kubernetes import client
from tensorkiln.builders.labels import COMPILE_JOB
from tensorkiln.hardware.classes import GPU_PRODUCT
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install
from tensorkiln_local.cluster import cluster, connection, paths

SAMPLE = Path(__file__).resolve().parents[1] / "manifests" / "samples" / "resnet50-gpu.yaml"
SCALE_POOLS = Path(__file__).resolve().parent / "pools-scale.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    cluster.up(SCALE_POOLS)
    try:
        run(args)
    finally:
        cluster.up(paths.DEFAULT_POOLS)


def run(args) -> None:
    with connection.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        products = {
            n.metadata.labels[GPU_PRODUCT] for n in core.list_node().items if GPU_PRODUCT in (n.metadata.labels or {})
        }
        expected = args.models * len(products)
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        install.create_namespace(core, namespace)  # with the registry claim compile pods mount
        template = yaml.safe_load(SAMPLE.read_text())
        try:
            start = time.monotonic()
            for i in range(args.models):
                body = copy.deepcopy(template)
                body["metadata"] = {"name": f"model-{i:03d}", "namespace": namespace}
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)
            applied = time.monotonic() - start
            scheduled, marks = 0, {}
            while scheduled < expected:
                if time.monotonic() - start > args.timeout:
                    raise SystemExit(f"timeout: {scheduled}/{expected} compile pods scheduled")
                pods = core.list_namespaced_pod(namespace, label_selector=COMPILE_JOB).items
                scheduled = sum(1 for p in pods if p.spec.node_name)
                for fraction in (0.5, 0.9):
                    if scheduled >= fraction * expected and fraction not in marks:
                        marks[fraction] = time.monotonic() - start
                time.sleep(0.5)
            total = time.monotonic() - start
            print(f"models: {args.models}  GPU products: {len(products)}  compile pods: {expected}")
            print(f"all {args.models} InferenceModels created in {applied:.1f}s")
            print(f"50% of compile pods scheduled after {marks[0.5]:.1f}s, 90% after {marks[0.9]:.1f}s")
            print(
                f"every compile pod scheduled {total:.1f}s after the first apply "
                f"({expected / total:.1f} pods/s end to end)"
            )
        finally:
            install.delete_namespace(core, namespace, timeout=600)


if __name__ == "__main__":
    main()
