# TensorKiln: `make demo` runs the operator on the local cluster; `make test` runs every test.
VENV   := .venv
PY     := $(VENV)/bin/python
TKL    := $(VENV)/bin/tensorkiln-local
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv prepare prepare-builds demo test lint docs unit integration kind-like faults matrix crds manifests down images images-gpu push

# Every deployable's distribution, editable, with the development tools (pyproject.toml) and the local cluster.
DISTRIBUTIONS := api operator compiler-jobs serving client localcluster
$(STAMP): pyproject.toml $(DISTRIBUTIONS:%=%/pyproject.toml) constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -c constraints.txt -e . -e './api[s3,oci]' -e './operator[s3,oci]' -e './compiler-jobs[gcs,hf]' \
		-e ./serving -e ./client -e ./localcluster
	touch $@

venv: $(STAMP)

## prepare: build what the cluster and the install need (Go binaries, images) at once, where the caches
## lack it (cold: the Go build and the image builds side by side); with warm caches it only checks them.
## It needs only the standard library, so it runs with the machine's python3 beside the venv's install.
PREPARE_FLAGS := $(if $(filter test integration,$(MAKECMDGOALS)),--tests)
prepare:
	$(MAKE) --no-print-directory -j2 venv prepare-builds PREPARE_FLAGS="$(PREPARE_FLAGS)"

prepare-builds:
	PYTHONPATH=localcluster python3 -m tensorkiln_local prepare $(PREPARE_FLAGS)

## demo: build/reuse the cluster binaries and images, start the cluster (real control plane, kwok GPU
## pools, the real node local-0: kubelet + containerd), helm-install TensorKiln's chart and images from the local
## registry (oci://localhost:5000/charts/tensorkiln, all pinned by digest), its engine registry the cluster's OCI
## registry, apply the samples, wait until the real CPU model is compiled and
## served, send it one request through its Service (a rendered text line that `cluster up` staged), show
## the result and the engine registry's tags. The GPU samples stay in phase Simulated: their pools are kwok's.
DEMO_INPUT := $${TENSORKILN_LOCAL_DATA:-/var/lib/tensorkiln}/models/rapidocr/cls-demo-line.npy
POD_IMAGES := custom-columns=NAMESPACE:.metadata.namespace,POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,IMAGES:.status.containerStatuses[*].imageID
demo: prepare
	$(TKL) cluster up --stop-others
	$(TKL) install
	eval "$$($(TKL) cluster env)" && kubectl apply --server-side -f manifests/samples/
	$(TKL) wait --timeout 300
	eval "$$($(TKL) cluster env)" && kubectl wait im/ocr-cls --for=jsonpath='{.status.phase}'=Ready --timeout=600s
	eval "$$($(TKL) cluster env)" && $(VENV)/bin/tensorkiln infer ocr-cls --input "$(DEMO_INPUT)" --labels "upright,upside down"
	$(TKL) engines
	eval "$$($(TKL) cluster env)" && kubectl get im && kubectl get cjob -o wide && kubectl get pods -A -o wide --field-selector spec.nodeName=local-0
	eval "$$($(TKL) cluster env)" && kubectl get pods -A -o '$(POD_IMAGES)' --field-selector spec.nodeName=local-0

## images: TensorKiln's images (operator, compiler, engine-fetch, serving) built with buildah, cached by content
## (an unchanged tree rebuilds nothing); prints each image's tag and size.
images: venv
	$(TKL) images build

## images-gpu: the GPU compile image (compiler-jobs/Dockerfile, VARIANT=gpu), checked to import the TensorRT of
## its serving target; its TensorRT libraries come from NVIDIA's package index (pypi.nvidia.com), which the
## build host must reach.
images-gpu: venv
	$(TKL) images build compiler-gpu

## push: build, then copy the images to REGISTRY (e.g. make push REGISTRY=ghcr.io/you), tagged with the
## chart's appVersion, and push the chart to oci://REGISTRY/charts (helm push; plain HTTP only to a
## localhost registry), printing every digest.
push: venv
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=registry.example.com/path"; exit 2; }
	$(TKL) images push --registry "$(REGISTRY)"
	$(PY) -m tensorkiln_local.chart_oci push --registry "$(REGISTRY)"

## test: lint, unit tests, then integration tests against the local cluster (started if needed) and
## TensorKiln installed on it from its images (the same `install` as the demo's)
test: lint prepare unit integration

lint: venv docs
	$(VENV)/bin/ruff check api operator compiler-jobs serving client localcluster tests e2e
	$(VENV)/bin/ruff format --check api operator compiler-jobs serving client localcluster tests e2e
	$(VENV)/bin/lint-imports

## docs: docs/ built with MkDocs into site/, strictly (a broken link or a page left out of the nav fails;
## not --quiet: mkdocs then hides the warnings that strict mode counts)
docs: venv
	$(VENV)/bin/mkdocs build --strict

# The chart tests render with helm: built once from its pinned Go module (cached like the cluster's).
unit: venv
	$(TKL) cluster build helm
	$(PY) -m pytest tests/unit -q

# The integration tests run on a local cluster of their own, `tensorkiln-test` (its own kwok, state and data
# directories): never on the demo's, whose state they neither touch nor inherit. It is stopped at the end,
# its state kept, so the next run resumes it. One local cluster runs at a time (they share local-0's
# network): a demo's cluster that runs is stopped first (its state kept: `make demo` resumes it), and `make
# demo` likewise stops the tests' cluster if it still runs.
TEST_CLUSTER := TENSORKILN_CLUSTER=tensorkiln-test TENSORKILN_LOCAL_DATA=/var/lib/tensorkiln-test
integration: prepare
	export $(TEST_CLUSTER); $(TKL) cluster up --stop-others || exit; trap '$(TKL) cluster stop' EXIT; \
		$(TKL) install --engine-registry pvc && $(PY) -m pytest tests/integration -q --durations=25

## kind-like: docs/quickstart-kind.md on a local cluster of its own, `tensorkiln-kind`, with the kind-like profile
## (one real node labelled control-plane, no NFD or GFD labels, no simulated pools, no registry claim: the OCI
## engine registry); stopped at the end, its state kept. About 10 minutes warm, so not part of `test`.
KIND_CLUSTER := TENSORKILN_CLUSTER=tensorkiln-kind TENSORKILN_LOCAL_DATA=/var/lib/tensorkiln-kind
kind-like: prepare
	export $(KIND_CLUSTER); $(TKL) cluster up --profile kind --stop-others || exit; trap '$(TKL) cluster stop' EXIT; \
		$(TKL) install && $(PY) -m pytest tests/kindlike -q -rs

## faults: the fault suite (e2e/faults): operator SIGKILLs, an API server restart, the registry
## away, killed compile pods, admission fuzzing, against the installed operator; long (about 12
## minutes here), so not part of `test`.
## Holds the shared cluster lock throughout; TENSORKILN_FAULTS_SEED=N repeats a run's choices.
CLUSTER_LOCK ?= /tmp/tensorkiln-cluster.lock
faults: venv
	flock $(CLUSTER_LOCK) sh -c '$(TKL) cluster up && $(TKL) install && $(PY) -m pytest e2e/faults -v -s -p no:cacheprovider --timeout 3000'

## matrix: the coverage matrix of real models (e2e/bench_models.py): each real ONNX model from a
## pinned PyPI wheel applied with a minimal spec on local-0, served and compared with onnxruntime, or
## refused with its exact message; writes e2e/results/models.md. Long (a compile per model), not in `test`.
matrix: venv
	flock $(CLUSTER_LOCK) sh -c '$(TKL) cluster up && $(TKL) install && $(PY) e2e/bench_models.py'

## crds: crds/ and the chart's charts/tensorkiln/crds/ from the pydantic API types
crds: venv
	$(TKL) crds

## manifests: manifests/install/ (kustomize) rendered from the chart with default values
manifests: venv
	$(TKL) cluster build helm
	$(TKL) manifests

down: venv
	$(TKL) cluster down
	$(TEST_CLUSTER) $(TKL) cluster down
	$(KIND_CLUSTER) $(TKL) cluster down
