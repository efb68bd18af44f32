# The two entry points of the README, and the chores behind them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-mesh conformance conformance-report lint protos bench bench-smoke deploy-manifests clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "meshplane needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@# xds-protos ships an older copy of the OpenTelemetry protos under the same module names; whichever
	@# package installs last wins, so the OTLP exporter's own copy is put back on top.
	$(BIN)/pip install --quiet --force-reinstall --no-deps "opentelemetry-proto==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))')"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/meshplane demo

# The real-Istio and DNS tests (istiod, sidecars, gateways, bind9, external-dns) run as their own step:
# `make test` is everything else, `make test-mesh` is them; CI runs both.
MESH_TESTS := tests/istio tests/dns
# Two workers, a test file each at a time (its module fixtures stay in one worker): most tests wait on real
# processes rather than compute, so two halve the time on two cores.
TEST_WORKERS := -n 2 --dist loadfile

test: $(STAMP) lint
	$(BIN)/pytest -q $(TEST_WORKERS) $(addprefix --ignore=,$(MESH_TESTS))

test-mesh: $(STAMP)
	$(BIN)/pytest -q $(MESH_TESTS)

# The Gateway API conformance suite on a test cluster of real parts; its report goes to build/conformance/ and
# must claim what the committed one in docs/conformance/ does. conformance-report writes it there instead.
conformance: $(STAMP)
	PYTHON=$(abspath $(BIN))/python scripts/run-gateway-conformance

conformance-report: $(STAMP)
	PYTHON=$(abspath $(BIN))/python scripts/run-gateway-conformance --update

lint: $(STAMP)
	$(BIN)/ruff check meshplane meshplane_testing tests bench
	$(BIN)/ruff format --check meshplane meshplane_testing tests bench
	@# The pure cores (placement, projection, render, translate) import no store, web, gRPC or tracing.
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_pure_cores.py

# Every benchmark in full mode, each printing one JSON object (takes a while); bench-smoke runs each in its
# `--quick` mode, only to prove it still runs (CI does, after the tests).
BENCHES := dataplane propagation writes fanout catchup storm replicas incremental kill_rounds console

bench: $(STAMP)
	@status=0; for b in $(BENCHES); do echo "== bench.$$b" >&2; $(BIN)/python -m bench.$$b || status=1; done; exit $$status

bench-smoke: $(STAMP)
	@status=0; for b in $(BENCHES); do echo "== bench.$$b --quick" >&2; $(BIN)/python -m bench.$$b --quick || status=1; done; exit $$status

protos: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH scripts/gen-protos

# deploy/ rendered from the Helm chart (charts/meshplane) with deploy/server-values.yaml and
# deploy/agent-values.yaml; the chart's crds/ first regenerated from the models.
deploy-manifests: $(STAMP)
	scripts/build-helm
	$(BIN)/python -m meshplane crds --out charts/meshplane/crds
	scripts/deploy-manifests deploy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
