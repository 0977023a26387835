"""`tensorkiln-local prepare`: build at once what `cluster up` and `install` would otherwise build one
after the other the first time: the cluster's Go binaries with helm and cert-manager, TensorKiln's
images, and the cluster's own images of those binaries. With warm caches it does nothing but check them.

Cold, the Go build is the longest path (the kube binary is most of it), so it never waits: the images,
which also wait on apt, pip and layer writes, build beside it at a lower CPU priority and take the CPU
it leaves; the cluster images (pause, coredns, cert-manager) follow them once the binaries are there.
It imports the standard library only, so `make prepare` runs it with the machine's python3 while the
virtualenv installs (PYTHONPATH=localcluster)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from tensorkiln_local.cluster import binaries, packages
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import CLUSTER, LOCAL_PRODUCT

BINARIES = (*binaries.CLUSTER_BINARIES, "helm", "certmanager")
# What only the tests run: the S3 server of the registry tests, kstatus for the GitOps test.
TEST_BINARIES = ("versitygw", "kstatus")
# The image builds' nice value: below the Go build, which is the longer path.
IMAGES_NICE = 10


def prepare(tests: bool = False) -> None:
    packages.ensure({**packages.CLUSTER, **packages.IMAGES})  # apt-get once, before anything runs beside it
    with ThreadPoolExecutor(max_workers=2) as pool:
        go = pool.submit(_timed, "Go binaries", binaries.ensure, BINARIES + (TEST_BINARIES if tests else ()))
        built = pool.submit(_timed, "images", _niced(_images), go)
        for done in (go, built):
            done.result()


def _images(go: Future) -> None:
    """The product images, then (the binaries they hold built) the cluster's, one build at a time."""
    images.build_all([image.name for image in LOCAL_PRODUCT])
    go.result()
    images.build_all([image.name for image in CLUSTER])


def _niced(build: Callable) -> Callable:
    """`build`, run with this thread's nice value raised: Linux keeps one per thread, and the processes
    the thread starts (buildah, pip, the compilers in the build) inherit it."""

    def run(*args):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IMAGES_NICE)
        return build(*args)

    return run


def _timed(what: str, build: Callable, *args) -> None:
    """Run one side, saying how long it took (a cold start's figures; a warm check takes seconds)."""
    started = time.monotonic()
    build(*args)
    print(f"prepare: {what} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
