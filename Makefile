# ccmkit: an external cloud-controller-manager.
# Tool versions are pinned here and in hack/testbin.sh.

GOLANGCI_LINT_VERSION ?= v2.15.0
MOTO_VERSION ?= 5.2.5
CACHE      := $(CURDIR)/.cache
BIN        := $(CURDIR)/bin
TESTBIN    := $(CACHE)/testbin
GOLANGCI   := $(CACHE)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
MOTO_VENV  := $(CACHE)/venv-moto
# -count=1: the e2e tests run a binary built inside the test, which the
# test cache cannot see, so cached results could hide a change.
GO_TEST    ?= go test -race -count=1
TEST_TIMEOUT ?= 40m

export KUBEBUILDER_ASSETS := $(TESTBIN)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/cloud-controller-manager.
	go build -o $(BIN)/cloud-controller-manager ./cmd/cloud-controller-manager

.PHONY: testbin
testbin: ## Build kube-apiserver, etcd and kwok from source into .cache/testbin (once).
	hack/testbin.sh

.PHONY: test
test: testbin moto ## Run unit, integration and e2e tests with -race (what CI runs).
	go vet ./...
	$(GO_TEST) -timeout $(TEST_TIMEOUT) ./...

.PHONY: moto
moto: $(MOTO_VENV)/.moto-$(MOTO_VERSION) ## Install the moto AWS emulator into .cache/venv-moto (once), for the AWS provider's and the e2e tests.

$(MOTO_VENV)/.moto-$(MOTO_VERSION):
	rm -rf $(MOTO_VENV)
	python3 -m venv $(MOTO_VENV)
	$(MOTO_VENV)/bin/pip install --quiet --disable-pip-version-check 'moto[server]==$(MOTO_VERSION)'
	touch $@

.PHONY: unit
unit: ## Run the tests that need no control plane.
	$(GO_TEST) -short ./...

.PHONY: e2e
e2e: testbin moto ## Run the e2e tests (real binary, real kube-apiserver; the fake cloud, the OpenStack emulator, moto).
	$(GO_TEST) -timeout $(TEST_TIMEOUT) -count=1 -v ./test/e2e/...

.PHONY: bench
bench: testbin ## Run the Go benchmarks and the ccmkit-vs-upstream harness, print their tables (about 40 minutes).
	go test -run '^$$' -bench . -benchmem ./...
	go test -tags bench -count=1 -timeout 30m -run '^TestNodeInitBench$$' -v ./test/bench/
	go test -tags bench -count=1 -timeout 30m -run '^TestRouteBench$$' -v ./test/bench/
	go test -tags bench -count=1 -timeout 30m -run '^TestServiceBench$$' -v ./test/bench/
	go test -tags bench -count=1 -timeout 30m -run '^TestServiceHungShareBench$$' -v ./test/bench/
	go test -tags bench -count=1 -timeout 40m -run '^TestServiceScaleBench$$' -v ./test/bench/
	go test -tags bench -count=1 -timeout 30m -run '^TestMemoryBench$$' -v ./test/bench/

$(GOLANGCI):
	GOBIN=$(CACHE)/bin go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(CACHE)/bin/golangci-lint $(GOLANGCI)

.PHONY: lint
lint: $(GOLANGCI) ## Run golangci-lint.
	$(GOLANGCI) run ./...

NODES ?= 3
# RUN_FLAGS: extra playground flags, e.g. -non-interactive, -dir, -ccm-port, -admin-port; after
# --, flags for the cloud-controller-manager, e.g. -- --node-monitor-period=1s.
RUN_FLAGS ?=
.PHONY: run
run: testbin build ## Bring up a local control plane, NODES (3) kwok Nodes, ccmkit with the fake cloud and a demo LoadBalancer Service; Ctrl-C stops it all.
	go build -o $(BIN)/playground ./hack/playground
	$(BIN)/playground -nodes $(NODES) $(RUN_FLAGS)

.PHONY: run-down
run-down: ## Stop a `make run` left in the background.
	go build -o $(BIN)/playground ./hack/playground
	$(BIN)/playground -down $(RUN_FLAGS)

KUBECONFIG ?= $(HOME)/.kube/config
FAKE_CONFIG ?= hack/fake-cloud.yaml
.PHONY: run-cluster
run-cluster: build ## Run the CCM with the fake cloud against the cluster in $KUBECONFIG.
	$(BIN)/cloud-controller-manager --cloud-provider=fake --cloud-config=$(FAKE_CONFIG) --cluster-cidr=10.244.0.0/16 \
		--kubeconfig=$(KUBECONFIG) --authentication-kubeconfig=$(KUBECONFIG) --authorization-kubeconfig=$(KUBECONFIG) \
		--bind-address=127.0.0.1 --v=2

.PHONY: clean
clean: ## Remove build outputs (keeps .cache).
	rm -rf $(BIN)
