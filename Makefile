# ovn-egress — see README.md. Every target works from a clean clone.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN_DIR := $(CURDIR)/bin
TESTBIN_DIR ?= $(BIN_DIR)/testbin
TOOLS_DIR ?= $(BIN_DIR)/tools
GO_TEST_FLAGS ?=
export TESTBIN_DIR
# iproute2, nft, ovs and ovn tools live in /usr/sbin on Debian; a root shell
# from `su` without `-` lacks it.
export PATH := $(PATH):/usr/sbin:/sbin

DEMO_ARGS ?=

# The packages whose tests run OVN (NB/SB/northd, RAFT, the dataplane):
# test-ovn25 runs them on OVN 25.03.
OVN_TEST_PKGS := ./internal/testenv/ ./pkg/ovn/ ./pkg/k8s/translation/ ./pkg/k8s/master/ ./cmd/ovn-egress/ ./test/e2e/local/ ./test/scale/ ./test/helm/
# test/scale's 10,000 Services cost the API server 4 to 10 minutes to create
# on 2 cores (its ClusterIP allocator counts every IPAddress at each
# allocation: quadratic, docs/performance.md), and more than the package's
# 20 minutes on a loaded machine (seen with two busy loops beside it). So
# `make test` and `make test-ovn25` run the same path (a host's report in
# several ConfigMaps, the whole handshake) at 2,000, and `make test-scale`
# at 10,000.
SCALE_SERVICES ?= 2000
OVN25_SCALE_SERVICES ?= 2000

.PHONY: all build image deps fuzz test test-scale test-ovn25 ovn25 unit testbin generate verify vulncheck lint demo e2e chaos false-failover oracle bench clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build bin/ovn-egress
	go build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/ovn-egress ./cmd/ovn-egress

image: ## the image, from Debian's packages and the static binary, as an OCI archive: bin/ovn-egress-image.tar (reproducible; hack/image.sh)
	./hack/image.sh

deps: ## install the Debian packages the tests and the demo need, only what is missing (hack/install-deps.sh)
	./hack/install-deps.sh

testbin: ## build kube-apiserver, etcd, kubectl, MetalLB (controller, speaker, CRDs) and helm into bin/testbin (cold: ~6 min once)
	./hack/build-testbin.sh

test: deps testbin build ## run every test against real OVN, kube-apiserver and network namespaces
	@# Compile every test binary first (running none): on a cold build cache
	@# the compiler would otherwise compete with the first packages' timing.
	@# The timeout is a hang guard per package: test/e2e/local takes ~7 min
	@# on 2 idle cores and took 18.7 min with both kept busy (issue 36).
	go test $(GO_TEST_FLAGS) -count=1 -exec /bin/true ./... >/dev/null
	OVN_EGRESS_SCALE_SERVICES=$(SCALE_SERVICES) go test $(GO_TEST_FLAGS) -count=1 -timeout 30m ./...

test-scale: deps testbin build ## a host serving 10,000 EgressServices through the real agent and API server (test/scale at full size; ~10 min)
	OVN_EGRESS_SCALE_SERVICES=10000 go test $(GO_TEST_FLAGS) -count=1 -timeout 40m -v -run TestHostServes10000Services ./test/scale/

ovn25: ## prepare OVN 25.03 (Debian 13's packages) in a root outside the repo, once per machine (~1 min)
	./hack/ovn-root.sh

test-ovn25: deps testbin build ovn25 ## every OVN-facing suite and the local e2e on OVN 25.03 (OVN_VERSION=25.03)
	OVN_VERSION=25.03 OVN_EGRESS_SCALE_SERVICES=$(OVN25_SCALE_SERVICES) go test $(GO_TEST_FLAGS) -count=1 -timeout 30m $(OVN_TEST_PKGS)

e2e: deps testbin ## the local end-to-end suite: real packets through OVN, the product as real processes
	go test -count=1 -timeout 30m -v ./test/e2e/local/

chaos: deps testbin build ## a seeded soak: faults while the cluster changes, checked from outside (CHAOS_ARGS=-chaos.duration=60s -chaos.seed=N); docs/reliability.md
	go test -tags chaos -count=1 -timeout 40m -run '^TestChaos$$' -v ./test/e2e/local/ -args $(CHAOS_ARGS)

false-failover: deps testbin build ## the health checks at their defaults under CPU starvation drain no live host (STARVE_ARGS=-starve.duration=10m -starve.hogs=4); docs/reliability.md
	go test -tags chaos -count=1 -timeout 40m -run '^TestNoFalseFailover$$' -v ./test/e2e/local/ -args $(STARVE_ARGS)

ORACLE_TIME ?= 5m
oracle: deps ## the translation controller checked against the whole translation, random seeds for ORACLE_TIME (OVN_EGRESS_ORACLE_SEED=N replays one; make test runs four)
	OVN_EGRESS_ORACLE=$(ORACLE_TIME) go test -count=1 -timeout 3h -v -run '^TestTranslationOracle$$' ./pkg/k8s/translation/

FUZZTIME ?= 10s
FUZZ_PKGS ?= ./pkg/translate/ ./pkg/translate/egressip/ ./pkg/translate/egressservice/ ./pkg/translate/hosts/ ./pkg/translate/nodeplan/
fuzz: ## run every fuzz target (what tenants, agents and ovn-kubernetes write) for FUZZTIME each; their seeds run in make test
	@for pkg in $(FUZZ_PKGS); do \
	  for t in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
	    go test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench: deps testbin ## benchmarks against the physical limit (BENCH_ARGS=-quick: CI size); docs/performance.md
	go run ./test/bench $(BENCH_ARGS)

demo: deps testbin ## the product end to end on this machine; DEMO_ARGS=--once exits after showing
	go test -c -tags demo -o $(BIN_DIR)/e2e-demo.test ./test/e2e/local
	cd test/e2e/local && $(BIN_DIR)/e2e-demo.test -test.run '^TestDemo$$' -test.timeout 0 $(DEMO_ARGS)

unit: ## fast tests of the pure packages only
	go test -count=1 ./pkg/translate/... ./pkg/ipfamily/...

generate: ## regenerate pkg/nbdb, pkg/sbdb, the API deepcopy/clients, the CRD and dist/ from the Helm chart
	./hack/update-codegen.sh

vulncheck: ## the known vulnerabilities (Go vulnerability database, pinned: VULNDB_VERSION in hack/vulncheck.sh) the code calls; part of make verify
	./hack/vulncheck.sh

verify: ## fail when generated code is stale, code is not gofmt'ed, go vet complains, or the code calls a known vulnerability of a required module (make vulncheck)
	./hack/verify.sh

lint: ## staticcheck (pinned in hack/tools) on the hand-written packages
	cd hack/tools && go build -o $(TOOLS_DIR)/ honnef.co/go/tools/cmd/staticcheck
	$(TOOLS_DIR)/staticcheck $$(go list ./... | grep -v -e /pkg/nbdb -e /pkg/sbdb -e /pkg/k8s/client/)

clean: ## remove build outputs (keeps bin/testbin)
	rm -rf $(BIN_DIR)/ovn-egress $(TOOLS_DIR)
