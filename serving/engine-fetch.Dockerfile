# syntax=docker/dockerfile:1
# The engine-fetch image: `tensorkiln-engine-fetch` in the init container of Triton pods (the operator's
# TENSORKILN_ENGINE_FETCH_IMAGE names it), which fetches the engine from the registry, verifies it and lays
# out Triton's model repository. An image of its own, built only from what engine-fetch runs (the contract
# package and the serving distribution), so that its tag changes only with that code: a new compiler image
# or compiler version leaves every Triton pod template, and so every served model, as it was.
#
#   docker build -f serving/engine-fetch.Dockerfile -t ghcr.io/tensorkiln/engine-fetch:0.1.0 .   # from the repo root
#   make images                                                                                 # here: buildah, BASE from Debian
#
# BASE: a Debian bookworm with Python 3.11 and its venv module. Default: the official python
# image, pinned by exact tag and by the digest of its multi-architecture index (amd64, arm64).
# Where Docker Hub is out of reach, `make images` passes a base made from Debian's own packages.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Only the serving side's distribution and the contract package's: no compiler, no onnxruntime or OpenVINO.
# Every dependency version comes from constraints.txt. The s3 and oci extras: engines fetched from an S3
# or an OCI registry (minio client, oras); file:// and pvc:// registries need neither.
WORKDIR /build
COPY constraints.txt ./
COPY api/pyproject.toml api/
COPY api/tensorkiln_api/ api/tensorkiln_api/
COPY serving/pyproject.toml serving/
COPY serving/tensorkiln_serving/ serving/tensorkiln_serving/
# The optional build secret `ca-bundle`: a build host behind a TLS-inspecting proxy passes its CA
# bundle (`--secret id=ca-bundle,src=...`); elsewhere pip trusts the base's own certificates.
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /opt/tensorkiln \
    && /opt/tensorkiln/bin/pip install --no-compile -c constraints.txt ./api[s3,oci] ./serving

# The runtime stage: the base and the virtual environment, no build context, no pip cache.
FROM ${BASE}
COPY --from=build /opt/tensorkiln /opt/tensorkiln
ENV PATH=/opt/tensorkiln/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    # As in the compiler image, where engine-fetch ran before: the same environment.
    HOME=/tmp
WORKDIR /
# Non-root, numeric (runAsNonRoot can check it). Triton pods run every container as their pod's UID
# (builders/serving.py: runAsUser 1000); anywhere else the image runs as the compiler's and the operator's user.
USER 65532:65532
ENTRYPOINT ["tensorkiln-engine-fetch"]
