# TensorKiln: `make demo` runs the operator on the local cluster; `make test` runs every test.
VENV   := .venv
PY     := $(VENV)/bin/python
TKL    := $(VENV)/bin/tensorkiln-local
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test lint unit integration faults matrix crds manifests down

$(STAMP): pyproject.toml localcluster/pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -c constraints.txt -e '.[test]' -e ./localcluster
	touch $@

venv: $(STAMP)

## demo: build/reuse the cluster binaries, start cluster + operator, apply the samples, wait until
## the real CPU model serves, send it one request (a rendered text line that `cluster up` staged),
## show the result. The GPU samples stay in phase Simulated: their pools are kwok's.
DEMO_INPUT := $${TENSORKILN_LOCAL_DATA:-/var/lib/tensorkiln}/models/rapidocr/cls-demo-line.npy
demo: venv
	$(TKL) cluster up
	$(TKL) operator start
	eval "$$($(TKL) cluster env)" && kubectl apply --server-side -f manifests/samples/
	$(TKL) wait --timeout 300
	eval "$$($(TKL) cluster env)" && kubectl wait im/ocr-cls --for=jsonpath='{.status.phase}'=Ready --timeout=600s
	eval "$$($(TKL) cluster env)" && $(VENV)/bin/tensorkiln infer ocr-cls --input "$(DEMO_INPUT)" --labels "upright,upside down"
	eval "$$($(TKL) cluster env)" && kubectl get im && kubectl get cjob,jobs,pods -o wide

## test: lint, unit tests, then integration tests against the local cluster (started if needed)
test: lint unit integration

lint: venv
	$(VENV)/bin/ruff check operator compiler-jobs localcluster tests e2e
	$(VENV)/bin/ruff format --check operator compiler-jobs localcluster tests e2e

# The chart tests render with helm: built once from its pinned Go module (cached like the cluster's).
unit: venv
	$(TKL) cluster build helm
	$(PY) -m pytest tests/unit -q

integration: venv
	$(TKL) cluster up
	$(PY) -m pytest tests/integration -q

## faults: the fault suite (e2e/faults): operator SIGKILLs, an API server restart, the registry
## away, killed compile pods, admission fuzzing; long (about 8 minutes here), so not part of `test`.
## Holds the shared cluster lock throughout; TENSORKILN_FAULTS_SEED=N repeats a run's choices.
CLUSTER_LOCK ?= /tmp/tensorkiln-cluster.lock
faults: venv
	flock $(CLUSTER_LOCK) sh -c '$(TKL) cluster up && $(PY) -m pytest e2e/faults -v -s -p no:cacheprovider --timeout 3000'

## matrix: the coverage matrix of real models (e2e/bench_models.py): each real ONNX model from a
## pinned PyPI wheel applied with a minimal spec on local-0, served and compared with onnxruntime, or
## refused with its exact message; writes e2e/results/models.md. Long (a compile per model), not in `test`.
matrix: venv
	flock $(CLUSTER_LOCK) sh -c '$(TKL) cluster up && $(TKL) operator start && $(PY) e2e/bench_models.py'

## crds: crds/ and the chart's charts/tensorkiln/crds/ from the pydantic API types
crds: venv
	$(TKL) crds

## manifests: manifests/install/ (kustomize) rendered from the chart with default values
manifests: venv
	$(TKL) cluster build helm
	$(TKL) manifests

down: venv
	$(TKL) cluster down
