# Poise Makefile. `make run` serves the bundled examples over xDS; `make test` runs
# the whole test suite. Everything a target needs is installed by the target.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin
IMAGE    ?= ghcr.io/poise-dev/poise:$(VERSION)
PKGS     := ./...

.DEFAULT_GOAL := build

.PHONY: build
# The first build on a machine downloads the modules and compiles some 780
# packages for minutes without a word from go build: it says so first, and
# hack/progress.sh says once a minute that it is still going.
build: ## Build bin/controlplane.
	@[ -e $(BIN)/controlplane ] || echo "building $(BIN)/controlplane: the first build on a machine downloads the Go modules and compiles them, 5 to 9 min on two cores; later builds take seconds"
	@echo '$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/controlplane ./cmd/controlplane'
	@bash hack/progress.sh "building $(BIN)/controlplane" $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/controlplane ./cmd/controlplane

.PHONY: install
install: ## Install controlplane into $$GOBIN (else $$(go env GOPATH)/bin), where the docs call it by its name.
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/controlplane
	@echo "installed $$(d=$$($(GO) env GOBIN); [ -n "$$d" ] || d=$$($(GO) env GOPATH)/bin; echo $$d)/controlplane"

.PHONY: run
run: build ## Build bin/controlplane and serve the bundled examples over xDS on 127.0.0.1 (admin on :19000), watching them for changes.
	$(BIN)/controlplane serve -f examples

.PHONY: demo
demo: build ## Serve the examples with a gRPC backend on each loopback endpoint and grpc-go xDS clients in two zones; print each endpoint's observed share beside explain's, live (DEMO_ARGS=--check: until it agrees; docs/demo.md).
	$(GO) build -o $(BIN)/demo ./cmd/demo
	$(BIN)/demo -f examples --controlplane $(BIN)/controlplane $(DEMO_ARGS)

# Tests save what a person should look at (test/browser's screenshots of the
# traffic map) with t.ArtifactDir(); -artifacts keeps them under
# TEST_OUTPUT/_artifacts/, emptied at each run.
TEST_OUTPUT ?= $(CURDIR)/$(BIN)/test-output

# make test installs what its tests need beyond Go (hack/test-deps.sh: luajit,
# chromium, as root or through sudo), and ends with every test that was
# skipped, why and the command that would run it; it fails for a skip unless
# POISE_ALLOW_SKIPS=1 (docs/testing.md).
.PHONY: test
test: ## Run every test with the race detector (fuzz targets run their seed corpus; test/e2e's control plane is the race-built one); installs luajit and chromium, builds the test apiserver, etcd and helm once; lists every skipped test and fails for it unless POISE_ALLOW_SKIPS=1.
	@GO="$(GO)" bash hack/test.sh "$(TEST_OUTPUT)" $(PKGS)
	@echo "note: the traffic map's screenshots (test/browser): $$(ls "$(TEST_OUTPUT)"/_artifacts/*/*.png 2>/dev/null | tr '\n' ' ')"

# The kind end-to-end suite: a kind cluster with three zones, the image,
# helm install, examples/kubernetes (echo backends, Envoy on ADS), the
# per-zone split through Envoy against /debug/explain, the spill when a
# zone goes unready, and spatial routing through Envoy's spatial listener
# against /debug/explain-route. Needs a Docker engine; kind and helm are built from the
# Go module proxy when missing (hack/kind.sh, hack/helm.sh). The suite's
# knobs (POISE_KIND_KEEP=1, POISE_KIND_REUSE=1, ...) are listed in
# test/kind/kind_test.go and docs/helm.md.
.PHONY: e2e-kind
e2e-kind: ## The kind end-to-end suite (needs Docker): Envoy's per-zone split and spill against /debug/explain.
	@command -v docker >/dev/null 2>&1 || { \
		echo "e2e-kind: docker is not installed. The kind suite runs a Kubernetes cluster in Docker containers;"; \
		echo "e2e-kind: install Docker (or run everything else with 'make test')."; exit 1; }
	@docker info >/dev/null 2>&1 || { \
		echo "e2e-kind: the Docker engine is not reachable ('docker info' failed): start it or set DOCKER_HOST."; exit 1; }
	@kind=$$(bash hack/kind.sh) || { echo "e2e-kind: no kind: put kind on PATH, set KIND, or let hack/kind.sh build it (needs the Go module proxy)."; exit 1; }; \
	helm=$$(bash hack/helm.sh) || { echo "e2e-kind: no helm: hack/helm.sh could not build it."; exit 1; }; \
	KIND="$$kind" HELM="$$helm" $(GO) test -tags kind -count=1 -timeout 45m -v ./test/kind

# The resilience contract's scenarios at full length (docs/resilience.md):
# every replica gone for 60 s instead of make test's 3 s, 2,000 clients in
# the reconnect storm, a replica cut from the apiserver for 2 min, the
# apiserver down for 60 s. About 5 minutes; the Kubernetes scenarios need
# root (network namespaces) and KUBEBUILDER_ASSETS (make test-binaries).
.PHONY: resilience
resilience: ## The resilience scenarios at full length (every replica gone for 60 s, a 2 min partition), each client's history checked.
	POISE_RESILIENCE=full KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$(bash hack/test-binaries.sh)}" $(GO) test -count=1 -timeout 30m -v ./test/resilience

.PHONY: test-binaries
test-binaries: ## Build (once per machine) the real kube-apiserver and etcd the envtest suites use, linked into bin/k8s.
	bash hack/test-binaries.sh

.PHONY: helm
helm: ## Build (once per machine) helm from the Go module proxy, linked to bin/helm.
	bash hack/helm.sh

.PHONY: chart-golden
chart-golden: ## Regenerate the chart's golden renderings in test/chart/testdata.
	@assets=$$(bash hack/test-binaries.sh) && helm=$$(bash hack/helm.sh) && \
	KUBEBUILDER_ASSETS="$$assets" HELM="$$helm" $(GO) test -count=1 ./test/chart -update

.PHONY: image
image: ## Build the container image $(IMAGE) (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

.PHONY: lint
lint: ## gofmt and go vet must be clean (the kind suite is vetted with its build tag too).
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags kind ./test/kind

.PHONY: bench
bench: ## Benchmarks with allocations.
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# The real binary at scale (test/scale/cmd/benchscale): every SIZE (endpoints,
# 20 per upstream) with every CLIENTS count of raw ADS clients; startup, RSS and
# heap, server CPU per flip, and flip -> last client latency for single flips and
# for DURATION of 1,000 flips/s. SERVE_ARGS go to `controlplane serve`;
# BENCH_SCALE_ARGS to the bench (e.g. -delta, -subscribe-all). Results also go
# to bin/bench-scale.json. docs/performance.md says what it prints and how long
# it takes.
SIZE     ?= 100k,1M
CLIENTS  ?= 100,1000
DURATION ?= 60s

.PHONY: bench-scale
bench-scale: build ## The binary at 100k and 1M endpoints with 100 and 1,000 ADS clients (SIZE= CLIENTS= DURATION= SERVE_ARGS=).
	$(GO) run ./test/scale/cmd/benchscale -build=false -binary $(BIN)/controlplane \
		-sizes $(SIZE) -clients $(CLIENTS) -duration $(DURATION) -json $(BIN)/bench-scale.json \
		$(if $(SERVE_ARGS),-serve-args '$(SERVE_ARGS)') $(BENCH_SCALE_ARGS)

# One replica under a fleet (hack/bench-fleet.sh): 5,000 upstreams, 5,000
# Envoy-like and 20,000 gRPC-like clients (two streams a connection), three
# runs; UPSTREAMS= ENVOY= GRPC= PROCS= PHASES= RUNS= SERVE_ARGS=
# change them; STORM=1 kills the replica mid-run and starts it again (a
# reconnect storm of every client). Each run then puts ANCHOR (10,000; 0 for
# none) Envoy-like clients on go-control-plane's LinearCache mirroring the
# replica (ANCHOR_PHASES=). Reports under bin/bench-fleet/.
.PHONY: bench-fleet
bench-fleet: build ## One replica under 25,000 simulated clients, measured with controlplane load (three runs).
	BIN=$(BIN) GO=$(GO) bash hack/bench-fleet.sh

# The same fleet's sustained churn through a real kube-apiserver
# (hack/bench-fleet-kube.sh): 5,000 Upstreams importing Services, one
# replica with --source=kubernetes, 200 EndpointSlice updates a second for
# 5 minutes, three runs. Reports under bin/bench-fleet-kube/.
.PHONY: bench-fleet-kube
bench-fleet-kube: build ## One replica under 25,000 simulated clients while EndpointSlices change through a real apiserver.
	BIN=$(BIN) GO=$(GO) bash hack/bench-fleet-kube.sh

# go-control-plane's LinearCache beside one replica on the same fixture
# (hack/bench-fleet-anchor.sh, docs/performance.md "The anchor"): 500
# upstreams, 500 Envoy-like clients against the replica, then against
# test/scale/cmd/gcpanchor mirroring it; UPSTREAMS= ENVOY= PHASES=
# change them. Reports under bin/bench-fleet-anchor/.
.PHONY: bench-fleet-anchor
bench-fleet-anchor: build ## go-control-plane's LinearCache (test/scale/cmd/gcpanchor) under the same load as one replica.
	BIN=$(BIN) GO=$(GO) bash hack/bench-fleet-anchor.sh

# The churn benchmark of docs/performance.md: writers flip endpoints on a real
# apiserver (CHURN_RATE writes/s for CHURN_SECONDS), first alone, then with one
# plane and 20 ADS clients; it prints rates, latencies and CPU.
.PHONY: churn
churn: ## The Kubernetes churn benchmark (1,000 writes/s for 60 s by default; CHURN_RATE=, CHURN_SECONDS= change them).
	@assets=$$(bash hack/test-binaries.sh) && \
	POISE_CHURN_RATE=$(or $(CHURN_RATE),1000) POISE_CHURN_SECONDS=$(or $(CHURN_SECONDS),60) KUBEBUILDER_ASSETS="$$assets" \
	$(GO) test -count=1 -timeout 30m -run '^TestChurn$$' -v ./test/kube/

# The status writer at scale (docs/kubernetes.md, "Status at
# scale"): 5,000 Upstreams × (3 Localities + 3 EndpointSets) on a real
# apiserver; time from the start to every status, writes per flip, writes of
# a leader handover, then FLIP_RATE flips/s for FLIP_SECONDS. CI runs the same
# test with 200 Upstreams and 3 s of flips.
.PHONY: status-scale
status-scale: ## The status writer with 35,000 objects on a real apiserver (UPSTREAMS=5000 FLIP_RATE=100 FLIP_SECONDS=60 change it).
	@assets=$$(bash hack/test-binaries.sh) && \
	POISE_STATUS_SCALE_UPSTREAMS=$(or $(UPSTREAMS),5000) POISE_STATUS_FLIP_RATE=$(or $(FLIP_RATE),100) \
	POISE_STATUS_FLIP_SECONDS=$(or $(FLIP_SECONDS),60) KUBEBUILDER_ASSETS="$$assets" \
	$(GO) test -count=1 -timeout 40m -run '^TestStatusAtScale$$' -v ./test/kube/

.PHONY: soak
soak: ## Hostile manifests and xDS clients against the real binary for 5 minutes (SOAK_DURATION=10m changes it); reports crashes, wrong publications, peak RSS and a good client's latency.
	POISE_SOAK_DURATION=$(or $(SOAK_DURATION),5m) $(GO) test -count=1 -timeout 60m -run '^TestSoak$$' -v ./test/soak

.PHONY: fuzz
# Each target runs for FUZZTIME; a failing input is minimised for at most
# FUZZMINIMIZETIME, so a slow target does not spend its time minimising.
FUZZ = $(GO) test -run='^$$' -fuzztime=$(or $(FUZZTIME),30s) -fuzzminimizetime=$(or $(FUZZMINIMIZETIME),5s)
fuzz: ## Run each fuzz target, and the xDS protocol model test, for FUZZTIME (default 30s).
	$(FUZZ) -fuzz=FuzzCompute ./pkg/weights
	$(FUZZ) -fuzz=FuzzDecode ./pkg/manifest
	$(FUZZ) -fuzz=FuzzSplit ./pkg/manifest
	$(FUZZ) -fuzz=FuzzFastPath ./pkg/manifest
	$(FUZZ) -fuzz=FuzzParseBBox ./pkg/partitionmap
	$(FUZZ) -fuzz=FuzzCells ./pkg/partitionmap
	$(FUZZ) -fuzz=FuzzDecide ./pkg/partitionmap
	$(FUZZ) -fuzz=FuzzSotwRequest ./pkg/xds/server
	$(FUZZ) -fuzz=FuzzFileSource ./pkg/files
	POISE_MODEL_TIME=$(or $(FUZZTIME),30s) $(GO) test -count=1 -timeout=0 -run='^TestProtocolModel$$' -v ./pkg/xds/server -rapid.checks=1000

.PHONY: clean
clean:
	rm -rf $(BIN)

# ---- BEGIN code generation (api/v1alpha1 → deepcopy + config/crd + the CRD chart) ----
#
# controller-gen is pinned and run through the Go module proxy; `go run pkg@version`
# caches the built binary, so only the first run downloads and compiles it
# (~2 min here); later runs take ~2 s.
CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

CRD_DIR := config/crd
RBAC_DIR := config/rbac
# The CRD chart (charts/poise-crds) ships the CRDs as templates, so `helm
# upgrade` applies their new schemas; hack/crdversion writes them there, each
# with its schema version and helm.sh/resource-policy: keep.
CHART_CRD_DIR := charts/poise-crds/templates

# crd:allowDangerousTypes=true lets float64 fields through: a Partition's extent is
# in degrees (CRS84 longitude/latitude), which integers cannot carry.
# hack/crdversion then writes each CRD's schema version (poise.dev/schema-version,
# a digest of its schemas, which the binary compares with the cluster's) into
# config/crd, and copies the CRDs into the chart.
.PHONY: generate
generate: ## Regenerate api/v1alpha1/zz_generated.deepcopy.go, config/crd/*.yaml (with their schema versions), config/rbac/role.yaml and charts/poise-crds/templates.
	@mkdir -p $(CRD_DIR) $(RBAC_DIR) $(CHART_CRD_DIR)
	rm -f $(CRD_DIR)/poise.dev_*.yaml $(RBAC_DIR)/role.yaml $(CHART_CRD_DIR)/poise.dev_*.yaml
	$(CONTROLLER_GEN) \
		object:headerFile=hack/boilerplate.go.txt \
		crd:allowDangerousTypes=true \
		paths=./api/... \
		output:crd:artifacts:config=$(CRD_DIR)
	$(CONTROLLER_GEN) \
		rbac:roleName=poise-controlplane \
		paths="{./pkg/kube/source/...,./pkg/kube/status/...,./pkg/kube/checks/...,./pkg/kube/outliers/...,./pkg/kube/shares/...,./pkg/kube/leader/...,./pkg/identity/...,./pkg/kube/crdschema/...}" \
		output:rbac:artifacts:config=$(RBAC_DIR)
	$(GO) run ./hack/crdversion -crds $(CRD_DIR) -chart $(CHART_CRD_DIR)

# verify-generate regenerates into the working tree and fails if anything under
# api/, config/crd, config/rbac or charts/poise-crds/templates changed. It compares against
# a snapshot taken just before, not against git, so it works in a fresh clone,
# with no commits, and with uncommitted edits. On failure the regenerated files are left in place for inspection.
.PHONY: verify-generate
verify-generate: ## Fail if generated code or CRDs are out of date.
	@set -e; snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
	mkdir -p "$$snap/config" "$$snap/charts/poise-crds" $(CRD_DIR) $(RBAC_DIR) $(CHART_CRD_DIR); \
	cp -R api "$$snap/api"; cp -R $(CRD_DIR) "$$snap/$(CRD_DIR)"; cp -R $(RBAC_DIR) "$$snap/$(RBAC_DIR)"; \
	cp -R $(CHART_CRD_DIR) "$$snap/$(CHART_CRD_DIR)"; \
	$(MAKE) --no-print-directory generate; \
	if ! diff -ru "$$snap/api" api || ! diff -ru "$$snap/$(CRD_DIR)" $(CRD_DIR) || ! diff -ru "$$snap/$(RBAC_DIR)" $(RBAC_DIR) \
		|| ! diff -ru "$$snap/$(CHART_CRD_DIR)" $(CHART_CRD_DIR); then \
		echo ""; \
		echo "verify-generate: generated files are out of date (see diff above)."; \
		echo "verify-generate: run 'make generate' and commit the result."; \
		exit 1; \
	fi; \
	echo "verify-generate: generated files are up to date."
# ---- END code generation --------------------------------------------------------
