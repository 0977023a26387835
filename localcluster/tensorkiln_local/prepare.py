"""`tensorkiln-local prepare`: build at once what `cluster up` and `install` would otherwise build one
after the other the first time: the cluster's Go binaries with helm and cert-manager, and
TensorKiln's images. The Go builds wait on module downloads and link on one core, the image builds
on apt, pip and layer writes, so side by side they keep 2 cores busier than in a row. With warm
caches it does nothing but check them."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tensorkiln_local.cluster import binaries, packages
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import LOCAL_PRODUCT

# The longest build first: the kube binary alone is most of a cold start.
BINARIES = (*binaries.CLUSTER_BINARIES, "helm", "certmanager")
# What only the tests run: the S3 server of the registry tests, kstatus for the GitOps test.
TEST_BINARIES = ("versitygw", "kstatus")


def prepare(tests: bool = False) -> None:
    packages.ensure({**packages.CLUSTER, **packages.IMAGES})  # apt-get once, before anything runs beside it
    with ThreadPoolExecutor(max_workers=2) as pool:
        builds = [
            pool.submit(_timed, "Go binaries", binaries.ensure, BINARIES + (TEST_BINARIES if tests else ())),
            pool.submit(_timed, "images", images.build_all, [image.name for image in LOCAL_PRODUCT]),
        ]
        for done in builds:
            done.result()


def _timed(what: str, build: Callable, names) -> None:
    """Run one side, saying how long it took (a cold start's figures; a warm check takes seconds)."""
    started = time.monotonic()
    build(names)
    print(f"prepare: {what} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
