"""Running the operator: in the foreground (`tensorkiln operator run`, the container's command)
or detached against the local cluster (`tensorkiln operator start|stop`)."""

import asyncio
import os
import sys

from tensorkiln.localcluster import paths, processes, prometheus

PIDFILE = paths.OPERATOR_STATE / "operator.pid"
LOGFILE = paths.OPERATOR_STATE / "operator.log"


def run(namespaces: list[str]) -> None:
    import kopf

    from tensorkiln.controllers import handlers  # registers the handlers

    handlers.WATCHED_NAMESPACES[:] = namespaces
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
        )
    )


def start() -> int:
    """Start the operator detached, pointed at the local cluster; returns its pid."""
    env = {
        **os.environ,
        "KUBECONFIG": str(paths.KUBECONFIG),
        # The local cluster's Triton has only the Python backend (builders.tritonconfig).
        "TENSORKILN_SERVING_RUNTIME": "python-backend",
        "TENSORKILN_PROMETHEUS_URL": prometheus.url(),
        "PYTHONUNBUFFERED": "1",
    }
    paths.OPERATOR_STATE.mkdir(parents=True, exist_ok=True)
    return processes.start([sys.executable, "-m", "tensorkiln", "operator", "run"], PIDFILE, LOGFILE, env=env)


def stop() -> bool:
    return processes.stop(PIDFILE)
