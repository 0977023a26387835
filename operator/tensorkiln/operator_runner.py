"""Running the operator: in the foreground (`tensorkiln operator run`, the container's command)
or detached against the local cluster (`tensorkiln operator start|stop`)."""

import asyncio
import os
import sys

from tensorkiln.localcluster import paths, processes, prometheus

PIDFILE = paths.OPERATOR_STATE / "operator.pid"
LOGFILE = paths.OPERATOR_STATE / "operator.log"
LOCAL_WEBHOOK = "tensorkiln-local"  # the ValidatingWebhookConfiguration of `operator start`


def run(namespaces: list[str], log_format: str | None = None) -> None:
    import kopf

    from tensorkiln import peering
    from tensorkiln.controllers import handlers  # registers the handlers
    from tensorkiln.observability import logs, metrics

    settings = handlers.SETTINGS
    logs.configure(log_format or settings.log_format)
    metrics.WatchReconnectCounter.install()
    handlers.WATCHED_NAMESPACES[:] = namespaces
    if settings.webhook_port:  # kopf refuses admission handlers without a server: register only then
        from tensorkiln.admission import webhook

        webhook.register(settings, namespaces)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            identity=peering.IDENTITY,  # how the resync loop tells itself from its peers
            # Answers once the startup handlers are done: the liveness and the readiness probe.
            liveness_endpoint=(
                f"http://{settings.listen_address}:{settings.health_port}/healthz" if settings.health_port else None
            ),
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
        "TENSORKILN_LISTEN_ADDRESS": "127.0.0.1",  # /metrics and /healthz for this machine only
        # Human-readable lines in operator.log; JSON (the default) in a cluster.
        "TENSORKILN_LOG_FORMAT": os.environ.get("TENSORKILN_LOG_FORMAT", "full"),
        # file:// sources only from where `cluster up` stages the sample models.
        "TENSORKILN_MODEL_FILE_ROOTS": str(paths.SAMPLE_MODELS),
        # The admission webhook, registered by the operator itself at https://127.0.0.1:<port>
        # (failurePolicy Ignore: InferenceModels are still admitted while the operator is down).
        "TENSORKILN_WEBHOOK_PORT": os.environ.get("TENSORKILN_WEBHOOK_PORT", "9443"),
        "TENSORKILN_WEBHOOK_MANAGED": LOCAL_WEBHOOK,
    }
    paths.OPERATOR_STATE.mkdir(parents=True, exist_ok=True)
    return processes.start([sys.executable, "-m", "tensorkiln", "operator", "run"], PIDFILE, LOGFILE, env=env)


def stop() -> bool:
    return processes.stop(PIDFILE)
