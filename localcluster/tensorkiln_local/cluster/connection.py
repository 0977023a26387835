"""The one way the local CLI, its tests and benchmarks reach a local cluster's API server.

Always the kubeconfig of the cluster the process names (TENSORKILN_CLUSTER: paths.KUBECONFIG), never
$KUBECONFIG, ~/.kube/config or in-cluster credentials: the demo's and the tests' clusters are both local, and
a client that followed the shell's context talked to one with the other's CA (issue 44)."""

from kubernetes import client
from tensorkiln import kube

from tensorkiln_local.cluster import paths


def api_client() -> client.ApiClient:
    """A client of this process's local cluster, from its own kubeconfig."""
    return kube.api_client(str(paths.KUBECONFIG))
