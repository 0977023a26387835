"""What the Helm chart's Deployment adds to a plain `tensorkiln-operator run` besides leader
election (tensorkiln.leadership): logging in as the pod's ServiceAccount.

Login: kopf talks to the API with its own client and, by default, takes its credentials from the
kubernetes client's in-cluster loader, which reads the token at the fixed standard path. `login`
reads it where `kube.load_incluster` does, so kopf and the operator's own client act as the same
ServiceAccount, under the chart's RBAC. Outside a pod it is kopf's own kubeconfig login.
"""

from typing import Any

import kopf
from kubernetes import client, config

from tensorkiln import kube

LOGIN_ID = "tensorkiln-login"


def login(*, logger: Any, settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's credentials: the pod's ServiceAccount (kube.load_incluster), else kopf's kubeconfig
    login. kopf calls it again when the API answers 401, so a renewed token is picked up."""
    configuration = client.Configuration()
    try:
        kube.load_incluster(configuration)
    except config.ConfigException:
        return kopf.login_via_client(logger=logger, settings=settings, **kwargs)
    scheme, token = configuration.api_key["BearerToken"].split(" ", 1)
    namespace_file = kube.service_account_dir() / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else None
    logger.debug("Logging in as the pod's ServiceAccount (%s).", kube.service_account_dir())
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        scheme=scheme,
        token=token,
        default_namespace=namespace or None,
        trust_env=settings.networking.trust_env,
    )


def register_login(registry: kopf.OperatorRegistry) -> None:
    """Use `login` instead of kopf's default logins."""
    kopf.on.login(id=LOGIN_ID, registry=registry)(login)
