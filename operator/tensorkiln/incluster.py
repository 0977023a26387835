"""What the Helm chart's Deployment adds to a plain `tensorkiln operator run`: kopf peering.

`tensorkiln operator run --peering NAME` joins the kopf peering object NAME (a ClusterKopfPeering
when watching all namespaces, else a KopfPeering in each watched namespace; the chart creates
them and kopf's peering CRDs). A second operator for the same objects then pauses instead of
fighting: a rollout's new pod (the chart also uses `strategy: Recreate`), or a developer's run
against the same cluster. Without --peering the operator runs standalone, as it does locally.
"""

import kopf


def join_peering(name: str, registry: kopf.OperatorRegistry | None = None) -> None:
    """Make the next kopf.operator() join peering `name` (mandatory: paused while kopf's CRDs are missing)."""

    @kopf.on.startup(id="tensorkiln-peering", registry=registry)
    def peering(settings: kopf.OperatorSettings, **_) -> None:
        # Startup handlers run before kopf starts its peering and watch tasks, so this takes effect
        # whatever `standalone` the runner passed.
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.name = name
