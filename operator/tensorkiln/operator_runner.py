"""Running the operator in the foreground: `tensorkiln-operator run`, the container's command.
(The chart's Deployment runs it; tests also run it as a process of this machine.)

The one place where the settings are read and the clients built: they go into an
OperatorContext, with which the handlers and the webhook are registered into a kopf registry
of this run's own."""

import asyncio

from tensorkiln.leadership import Timings


def run(
    namespaces: list[str],
    log_format: str | None = None,
    lease: str | None = None,
    lease_namespace: str | None = None,
    timings: Timings | None = None,
) -> None:
    import kopf

    from tensorkiln import incluster, memory
    from tensorkiln.controllers import handlers
    from tensorkiln.controllers.context import OperatorContext
    from tensorkiln.observability import logs, metrics
    from tensorkiln.settings import Settings

    memory.limit_arenas()  # before any thread starts
    settings = Settings.from_env()
    logs.configure(log_format or settings.log_format)
    metrics.WatchReconnectCounter.install()
    where = lease_namespace or settings.pod_namespace
    if lease and not where:
        raise SystemExit(
            "--leader-election-lease needs --leader-election-namespace or POD_NAMESPACE (the chart sets it)"
        )
    context = OperatorContext.build(settings, namespaces, lease, where or "", timings or Timings())
    registry = kopf.OperatorRegistry()
    incluster.register_login(registry)
    handlers.register(registry, context)
    if settings.webhook_port:  # kopf refuses admission handlers without a server: register only then
        from tensorkiln.admission import webhook

        webhook.register(context, registry)
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            # Answers once the startup handlers are done: the liveness and the readiness probe.
            liveness_endpoint=(
                f"http://{settings.listen_address}:{settings.health_port}/healthz" if settings.health_port else None
            ),
        )
    )
