# pg-kinetic — everyday tasks.
#
#   make test          install deps, build, vet, run every test with -race,
#                      then the e2e and client suites again in transaction pooling
#                      (end-to-end tests start real PostgreSQL 15 via test/pgtest),
#                      then make conformance, the differential test's
#                      regression seeds in every mode and 10,000 random
#                      sequences in session pooling, then make fuzz for 3 s a
#                      target (CI_FUZZTIME), then make deploy-check
#   make conformance   pgx's, lib/pq's, bun pgdriver's and go-pg's own test suites directly
#                      and through kineticd in four configurations, and PostgreSQL's
#                      regression suite in the same four (test/conformance,
#                      ~23 minutes, no -race)
#   make differential  10,000 seeded random protocol sequences per mode, each
#                      replayed against PostgreSQL and through kineticd in four
#                      configurations, answers compared (test/differential);
#                      not part of make test while it still finds mismatches
#   make fuzz          every fuzz target of a decoder run on client bytes, for
#                      FUZZTIME (10s) each, one after another (scripts/fuzz.sh)
#   make demo          run kineticd in front of a throwaway primary + replica
#   make build         bin/kineticd
#   make check-config  validate deploy/kineticd.example.toml
#   make check-systemd systemd-analyze verify deploy/systemd/kineticd.service
#   make deb           the Debian package bin/kineticd_<version>_<arch>.deb (nfpm)
#   make check-deb     build it, dpkg -i it, use it, purge it (as root)
#   make image         the container image (deploy/container), with buildah
#   make check-image   build it, run kineticd --version/--check-config inside
#   make check-helm    helm lint + helm template | kubeconform -strict (offline schemas)
#   make deploy-check  all four check-* above (make test ends with it)
#
# From a fresh clone on Debian with only Go installed, `make test` as root
# installs PostgreSQL 15 and gcc first (scripts/install-deps.sh).
#
# The first build compiles pg_query_go's C parser (a few minutes); Go's build
# cache keeps it afterwards, so nothing here forces rebuilds or moves GOCACHE.

# Deps before build before tests, even under make -j.
.NOTPARALLEL:

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

# cgo is required (pg_query_go, the race detector). -buildvcs=false because
# stamping VCS data fails when root builds a checkout another user owns; the
# version comes from -ldflags. A GOFLAGS of your own replaces this.
export CGO_ENABLED := 1
export GOFLAGS ?= -buildvcs=false

# Extra flags for go test, e.g. make test GOTESTFLAGS=-v or GOTESTFLAGS='-run Promote'.
GOTESTFLAGS ?=

.PHONY: all deps build demo test conformance differential check-config fmt clean bench

all: build

deps:
	bash scripts/install-deps.sh

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/kineticd ./cmd/kineticd

demo: deps build
	$(GO) run ./test/demo -kineticd bin/kineticd

test: deps build
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m $(GOTESTFLAGS) ./...
	# The end-to-end and client suites once more, in transaction pooling.
	KINETIC_TEST_POOL_MODE=transaction $(GO) test -race -count=1 -timeout 25m $(GOTESTFLAGS) ./test/e2e/ ./test/compat/
	$(CONFORMANCE)
	KINETIC_DIFF_N=0 $(DIFFERENTIAL)
	# Race sequences with the proxy's race windows widened (testdata/races.txt).
	KINETIC_DIFF_N=0 KINETIC_DIFF_WIDEN=1 $(DIFFERENTIAL)
	# 10,000 random sequences in each of the four modes (about 2 minutes).
	KINETIC_DIFF_N=10000 KINETIC_DIFF_SEED=616161 KINETIC_DIFF_REGRESSIONS=0 $(DIFFERENTIAL)
	# A bounded fuzz run of the decoders of client bytes (issue 16): 16
	# targets, CI_FUZZTIME each (most of the time is building each one).
	$(MAKE) fuzz FUZZTIME=$(CI_FUZZTIME)
	# Deployment artifacts (issue 15): the unit, the package, the image, the chart.
	$(MAKE) deploy-check

# Every deployment check: systemd-analyze verify of the unit, the Debian
# package installed/used/purged (root), the container image built and run
# with buildah, the Helm chart linted and validated with kubeconform.
.PHONY: deploy-check
deploy-check: check-systemd check-deb check-image check-helm

# pgx's, lib/pq's, bun pgdriver's and go-pg's test suites against PostgreSQL and through kineticd (session and
# transaction pooling, read routing off and on), and PostgreSQL's regression
# suite (the same four); test/conformance/doc.go.
# go test ./... above skips it: it runs only with KINETIC_CONFORMANCE=1.
# Without -race: kineticd runs as its own binary (kinetictest.StartProcess),
# and pgx's timing-sensitive tests are meant to run at full speed.
CONFORMANCE = KINETIC_CONFORMANCE=1 $(GO) test -count=1 -timeout 40m -v ./test/conformance/
conformance: deps build
	$(CONFORMANCE)

# The differential protocol test (test/differential/doc.go): go test ./...
# skips it, it runs with KINETIC_DIFFERENTIAL=1; without -race (kineticd
# runs in the test process), so 10,000 sequences per mode take about two
# minutes. make test replays its committed regression seeds in every mode
# (KINETIC_DIFF_N=0, and again with the race windows widened) and runs
# 10,000 random sequences (base seed 616161) in every mode
# (test/differential/doc.go). KINETIC_DIFF_N and KINETIC_DIFF_SEED choose
# another run.
DIFFERENTIAL = KINETIC_DIFFERENTIAL=1 $(GO) test -count=1 -timeout 30m ./test/differential/
differential: deps build
	$(DIFFERENTIAL)

# Native Go fuzzing of the decoders kineticd runs on client bytes (startup,
# authentication, frontend messages, the relay loop, pg_kinetic.* commands,
# classifier and hints, tokens, admin commands): FUZZTIME per target, exec
# counts printed, fails on any failing input (written by go test under the
# package's testdata/fuzz/<Target>/ and named in the output). FUZZTARGETS
# ('pkg:Target ...') runs a subset.
FUZZTIME ?= 10s
CI_FUZZTIME ?= 10s
.PHONY: fuzz
fuzz: deps
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash scripts/fuzz.sh

# make bench: every benchmark, none of them part of make test
# (test/bench/README.md): the Go micro-benchmarks, the connection-scale run
# and the pgbench matrix.
bench: bench-go bench-connscale bench-pgbench

# Go benchmarks with -benchmem: classifier (cache hit, literal-varying,
# miss), eligibility decision, message relay (direct vs through kineticd).
bench-go: deps
	$(GO) test -run '^$$' -bench . -benchmem ./classify/ ./freshness/ ./test/bench/relay/

# kineticd vs PgBouncer vs pgpool-II vs direct under pgbench; installs
# pgbouncer and pgpool2. Flags for test/bench/run go in BENCHFLAGS, e.g.
# make bench-pgbench BENCHFLAGS='-seconds 3 -rounds 1 -clients 1,16' (a -out
# there replaces the default report file).
bench-pgbench: deps build
	bash scripts/install-bench-deps.sh
	$(GO) run ./test/bench/run -kineticd bin/kineticd -out test/bench/results/latest.md $(BENCHFLAGS)

check-config: build
	bin/kineticd --check-config deploy/kineticd.example.toml

# deploy/systemd/kineticd.service: systemd-analyze verify against the built
# binary in a throwaway root (no running systemd needed), and the settings
# issue 15 asks for (scripts/check-systemd.sh).
.PHONY: check-systemd
check-systemd: build
	bash scripts/check-systemd.sh bin/kineticd

# The Debian package (deploy/nfpm.yaml), built with nfpm as a Go tool.
# DEB_VERSION is VERSION as a Debian version (scripts/deb-version.sh: a
# commit with no tag gives 0.0.0~git<commits>.<hash>). make check-deb
# installs it, runs it, removes and purges it, and leaves the machine as it
# was, also when it fails (scripts/check-deb.sh; root).
NFPM = $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DEB_VERSION ?= $(shell bash scripts/deb-version.sh '$(VERSION)')
DEB_ARCH ?= $(shell $(GO) env GOARCH)
DEB = bin/kineticd_$(DEB_VERSION)_$(DEB_ARCH).deb
.PHONY: deb check-deb
deb: build
	@test -n "$(DEB_VERSION)" || { echo "make deb: no Debian version for VERSION=$(VERSION)"; exit 1; }
	rm -f bin/kineticd_*.deb
	KINETICD_DEB_VERSION='$(DEB_VERSION)' KINETICD_DEB_ARCH='$(DEB_ARCH)' \
		$(NFPM) package --config deploy/nfpm.yaml --packager deb --target $(DEB)

check-deb: deb
	bash scripts/check-deb.sh $(DEB) '$(VERSION)'

# The container image (deploy/container/Containerfile) in local buildah
# storage as localhost/kineticd:latest; base images are made from Debian
# packages once (no image registry is reachable here). make check-image also
# runs kineticd --version and --check-config inside it and checks its user.
.PHONY: image check-image
image:
	bash deploy/container/build.sh

check-image:
	bash scripts/check-image.sh

# The Helm chart deploy/helm/kineticd: helm lint, then helm template piped
# into kubeconform -strict against schemas made offline from the
# k8s.io/kubernetes and Prometheus Operator modules (deploy/helm/k8sschema),
# plus --check-config of the rendered kineticd.toml (scripts/check-helm.sh).
.PHONY: check-helm
check-helm:
	bash scripts/check-helm.sh

fmt:
	$(GO) fmt ./...

clean:
	rm -rf bin .demo

# Connection-scale benchmark, not part of make test: RSS per idle client and
# the TPS of 64 active clients among 10000 idle ones (test/bench/connscale),
# for kineticd and then for PgBouncer with the same pool settings; installs
# pgbouncer. Flags go in CONNSCALEFLAGS (both runs), e.g.
# make bench-connscale CONNSCALEFLAGS='-pool-mode session -pool 250 -clients 200'
CONNSCALEFLAGS ?=
.PHONY: bench-connscale bench-go bench-pgbench
bench-connscale: deps build
	bash scripts/install-bench-deps.sh
	$(GO) run ./test/bench/connscale -kineticd bin/kineticd $(CONNSCALEFLAGS)
	$(GO) run ./test/bench/connscale -target pgbouncer $(CONNSCALEFLAGS)

# The soak (issue 16, item 6; docs/soak-report.md), not part of make test:
# the kineticd binary under SOAK_CLIENTS clients in transaction pooling with
# read routing, the consistency checker's fault loop and hostile clients,
# for SOAK_DURATION; samples every minute, writes a markdown report
# (SOAK_REPORT, default a new file under /tmp, path printed) and fails on a
# violation, an error no fault explains or a leaked server connection.
# make soak SOAK_DURATION=3m SOAK_CLIENTS=200 for a short run.
SOAK_DURATION ?= 30m
SOAK_CLIENTS ?= 1000
SOAK_TIMEOUT ?= 3h
.PHONY: soak
soak: deps
	KINETIC_SOAK=1 SOAK_DURATION=$(SOAK_DURATION) SOAK_CLIENTS=$(SOAK_CLIENTS) \
		$(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -v -run '^TestSoak$$' ./test/consistency/
