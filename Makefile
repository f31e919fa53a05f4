# Poise Makefile. `make run` explains the bundled examples; `make test` runs
# the whole test suite. Everything a target needs is installed by the target.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin
PKGS     := ./...

.DEFAULT_GOAL := build

.PHONY: build
build: ## Build bin/controlplane.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/controlplane ./cmd/controlplane

.PHONY: run
run: ## Serve the bundled examples over xDS on 127.0.0.1 (admin on :19000), watching them for changes.
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/controlplane serve -f examples

.PHONY: test
test: ## Run every test with the race detector (fuzz targets run their seed corpus).
	$(GO) test -race -count=1 $(PKGS)

.PHONY: lint
lint: ## gofmt and go vet must be clean.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: bench
bench: ## Benchmarks with allocations.
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	$(GO) test -run='^$$' -fuzz=FuzzCompute -fuzztime=$(or $(FUZZTIME),30s) ./pkg/weights
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(or $(FUZZTIME),30s) ./pkg/manifest

.PHONY: clean
clean:
	rm -rf $(BIN)

# ---- BEGIN code generation (api/v1alpha1 → deepcopy + config/crd) ----------------
#
# controller-gen is pinned and run through the Go module proxy; `go run pkg@version`
# caches the built binary, so only the first run downloads and compiles it
# (~2 min here); later runs take ~2 s.
CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

CRD_DIR := config/crd

.PHONY: generate
generate: ## Regenerate api/v1alpha1/zz_generated.deepcopy.go and config/crd/*.yaml.
	@mkdir -p $(CRD_DIR)
	rm -f $(CRD_DIR)/poise.dev_*.yaml
	$(CONTROLLER_GEN) \
		object:headerFile=hack/boilerplate.go.txt \
		crd \
		paths=./api/... \
		output:crd:artifacts:config=$(CRD_DIR)

# verify-generate regenerates into the working tree and fails if anything under
# api/ or config/crd changed. It compares against a snapshot taken just before, not
# against git, so it works in a fresh clone, with no commits, and with uncommitted
# edits. On failure the regenerated files are left in place for inspection.
.PHONY: verify-generate
verify-generate: ## Fail if generated code or CRDs are out of date.
	@set -e; snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
	mkdir -p "$$snap/config" $(CRD_DIR); \
	cp -R api "$$snap/api"; cp -R $(CRD_DIR) "$$snap/$(CRD_DIR)"; \
	$(MAKE) --no-print-directory generate; \
	if ! diff -ru "$$snap/api" api || ! diff -ru "$$snap/$(CRD_DIR)" $(CRD_DIR); then \
		echo ""; \
		echo "verify-generate: generated files are out of date (see diff above)."; \
		echo "verify-generate: run 'make generate' and commit the result."; \
		exit 1; \
	fi; \
	echo "verify-generate: generated files are up to date."
# ---- END code generation --------------------------------------------------------
