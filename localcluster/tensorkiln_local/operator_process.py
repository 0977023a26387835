"""The operator as a detached process against the local cluster: `tensorkiln-local operator start|stop`.
It runs `tensorkiln operator run`, the container's command, with the local cluster's settings."""

import os
import sys

from tensorkiln_local.cluster import paths, processes, prometheus

PIDFILE = paths.OPERATOR_STATE / "operator.pid"
LOGFILE = paths.OPERATOR_STATE / "operator.log"
LOCAL_WEBHOOK = "tensorkiln-local"  # the ValidatingWebhookConfiguration of `operator start`


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
