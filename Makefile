# Sluice build. Every target works on a fresh machine with Go installed;
# `make proto` also needs Debian's protobuf-compiler, `make check-monitoring`
# Debian's prometheus package (promtool) and `make examples` Debian's
# python3-grpcio, python3-grpc-tools, nodejs and npm, `make kafka-clients`
# Debian's kcat, python3-confluent-kafka, nodejs and npm; .ci/run installs them.
GO      ?= go
BIN     := bin
PKGS    := ./...
TESTTIMEOUT ?= 20m
# The build tag of the test machinery (fault injection, --hosts;
# docs/design.md decision 52): the tests run with it, `make build` and
# the image without it.
TESTTAGS := sluicetest

.PHONY: all build run examples kafka-clients kafka-etl image cluster cluster-stop test test-short proto lint-proto check-monitoring bench bench-failover bench-scale bench-restart bench-cluster bench-jetstream lint vet cross fmt clean chaos

all: build

build:
	$(GO) build -o $(BIN)/sluiced ./cmd/sluiced
	$(GO) build -o $(BIN)/sluice ./cmd/sluice

# Single-node Sluice on 127.0.0.1:9400 (Kafka clients: 127.0.0.1:9092) with
# data in ./sluice-data. GODEBUG
# keeps the Go runtime's monitor thread off the deep sleep that cost a futex
# wake-up per request (docs/design.md decision 47); a GODEBUG of your own wins.
run: build
	GODEBUG=$${GODEBUG:-schedtrace=2147483647} $(BIN)/sluiced $(ARGS)

# The Python and Node.js clients of examples/ (public protos only) against
# a single sluiced on free loopback ports: idempotent produce, fetch,
# transactions; fails if either fails or a tool is missing (Debian's
# python3-grpcio, python3-grpc-tools, nodejs, npm: .ci/run installs them).
# Runs `npm ci` in examples/node when needed. See examples/README.md.
examples:
	GO=$(GO) BIN=$(BIN) scripts/examples.sh

# Kafka clients nobody here wrote against real nodes' Kafka listeners:
# librdkafka through Debian's kcat (metadata, every codec, keys, headers)
# and python3-confluent-kafka (examples/kafka/python), and kafkajs
# (examples/kafka/node), first on one sluiced, then on three nodes of
# scripts/cluster.sh (all brokers in Metadata, replication factor 3), where
# franz-go's own kgo integration tests run too (TestGroupETL's classic
# subtests among them; docs/kafka.md lists what is left out); free
# loopback ports, never 9092. Fails if any client fails or a tool is
# missing (.ci/run installs them). Runs `npm ci` in examples/kafka/node
# when needed. See examples/kafka/README.md and docs/kafka.md.
kafka-clients:
	GO=$(GO) BIN=$(BIN) scripts/kafka-clients.sh

FAULTS ?= 0
# The long form of franz-go's exactly-once tests (TestGroupETL, TestTxnEtl:
# a million records) against three nodes; FAULTS=1 SIGKILLs and pauses
# nodes while they run. See scripts/kafka-etl.sh.
kafka-etl:
	GO=$(GO) BIN=$(BIN) FAULTS=$(FAULTS) scripts/kafka-etl.sh

# The container image of deploy/Dockerfile, built with Debian's buildah
# from binaries built here (no base image is downloaded), checked (non-root
# user, entry point, volume, ports), run (a node from the image serves a
# produce and a consume), and written to bin/sluice-image.tar for
# `docker load`. Needs root or buildah's rootless set-up; .ci/run installs
# buildah. See scripts/image.sh and docs/kubernetes.md.
image:
	GO=$(GO) BIN=$(BIN) scripts/image.sh

# Three local nodes (controller and broker each) on 127.0.0.1:9510, 9520,
# 9530 (the Kafka protocol on 9515, 9525, 9535) in the background, data and
# logs under $(CLUSTER_DIR); stop them with
# `make cluster-stop`. See scripts/cluster.sh and docs/kubernetes.md.
CLUSTER_DIR ?= sluice-cluster
cluster:
	DIR=$(CLUSTER_DIR) GO=$(GO) BIN=$(BIN) scripts/cluster.sh start

cluster-stop:
	DIR=$(CLUSTER_DIR) scripts/cluster.sh stop

# All tests: vet, formatting, cross-builds, unit, API, end-to-end (builds
# the binaries itself), with the test machinery's tag so that the fault
# tests run too (a plain `go test ./...` skips them).
test: lint
	$(GO) test -tags $(TESTTAGS) -race -count=1 -timeout $(TESTTIMEOUT) $(PKGS)

test-short:
	$(GO) test -tags $(TESTTAGS) -count=1 -short $(PKGS)

# Regenerate protobuf Go code with Debian's protoc and the plugins pinned in go.mod.
proto:
	$(GO) build -o $(BIN)/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o $(BIN)/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc -I proto -I /usr/include \
		--plugin=protoc-gen-go=$(BIN)/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(BIN)/protoc-gen-go-grpc \
		--go_out=. --go_opt=module=github.com/sluice-io/sluice \
		--go-grpc_out=. --go-grpc_opt=module=github.com/sluice-io/sluice \
		proto/sluice/v1/*.proto proto/sluice/internal/v1/*.proto
	$(GO) run ./scripts/gen-errors-doc > docs/errors.md

# buf lint of the public .proto files (proto/sluice/v1) with the rules and
# reasoned exemptions in buf.yaml, and a check that proto/ compiles as the
# one include root a client uses (docs/clients.md). buf is pinned in its own module,
# tools/buf/go.mod, so the main go.mod does not carry its dependencies;
# the first build downloads them from the Go module proxy (a few minutes).
lint-proto:
	cd tools/buf && $(GO) build -o $(abspath $(BIN))/buf github.com/bufbuild/buf/cmd/buf
	$(BIN)/buf lint
	protoc -I proto -o /dev/null proto/sluice/v1/*.proto proto/google/rpc/*.proto proto/grpc/health/v1/*.proto

# The Prometheus rules in deploy/monitoring: syntax (promtool check rules),
# their unit tests (promtool test rules), and the lint of a real scrape of
# a node's /metrics (promtool check metrics) except the two names kept
# from before the lint ran (`_ms` units, docs/operations.md). Fails when
# promtool is missing: CI installs it (.ci/run).
PROMTOOL ?= promtool
SCRAPE   := $(BIN)/metrics-scrape.txt
check-monitoring:
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
		echo "check-monitoring: $(PROMTOOL) not found; install Debian's prometheus package (apt-get install prometheus)" >&2; exit 1; }
	$(PROMTOOL) check rules deploy/monitoring/alerts.yaml
	cd deploy/monitoring && $(PROMTOOL) test rules alerts_test.yaml
	@mkdir -p $(BIN)
	SLUICE_METRICS_SCRAPE_OUT=$(abspath $(SCRAPE)) $(GO) test -count=1 -run '^TestMetricsMoveWithRequests$$' ./node/
	@out=$$($(PROMTOOL) check metrics < $(SCRAPE) 2>&1 | \
		grep -v -e '^sluice_oldest_open_transaction_age_ms metric names should not contain abbreviated units$$' \
			-e '^sluice_max_active_transaction_duration_ms metric names should not contain abbreviated units$$'); \
	if [ -n "$$out" ]; then echo "promtool check metrics:"; echo "$$out"; exit 1; fi; \
	echo "promtool check metrics: $(SCRAPE) OK"

# Component benchmarks (storage, batch codec). `sluice bench` drives a running cluster;
# see docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./proto/... ./storage/...

# Controller and partition failover of a real 3-node cluster (SIGKILL of the
# controller leader, 5 times); not part of `make test`. See docs/benchmarks.md.
bench-failover:
	$(GO) test -run '^$$' -bench BenchmarkFailover -benchtime 5x ./e2e/

# Ten thousand partitions on three nodes (issue 31): for each count in
# SCALE_PARTITIONS (default 1000,3000,10000) a fresh 3-node cluster gets
# that many partitions (replication factor 3); the benchmark measures the
# creation, each node's idle CPU, RSS, descriptors and goroutines, and the
# failover and restart of a broker. Minutes per count; 10000 is the most
# an open-files limit of 20000 allows (ulimit -n). SCALE_CPUPROFILE=DIR
# keeps CPU profiles of every node during the creation, of the idle
# controller leader and of the controller during the failover, and the
# nodes' logs. Not part of
# `make test`. See e2e/scale_bench_test.go.
bench-scale:
	$(GO) test -tags $(TESTTAGS) -run '^$$' -bench BenchmarkScale -benchtime 1x -timeout 60m ./e2e/

# Opening logs after a SIGKILL (issue 31: "10 GB in 1,000 segments"): 10 GiB
# as one log of 1,000 segments and as 100 logs of 10, recovered with a warm
# and a dropped page cache (storage BenchmarkOpenAfterCrash); needs about
# 11 GB free in $$TMPDIR and a few minutes. Not part of `make test`. See
# docs/benchmarks.md, "Restart after a crash".
bench-restart:
	SLUICE_BENCH_RESTART_BYTES=10737418240 $(GO) test -run '^$$' -bench BenchmarkOpenAfterCrash -benchtime 2x -timeout 60m ./storage/

# Produce throughput and latency of a local 3-node cluster, replication
# factor 3 (acks=1 and acks=all, 100 B and 1 KiB records, and one record
# at a time with --sync); about 2 min. ONLY=REGEX runs only the runs whose
# label matches (e.g. ONLY=synchronous).
# Not part of `make test`. See docs/benchmarks.md and scripts/bench-cluster.sh.
bench-cluster:
	GO=$(GO) scripts/bench-cluster.sh

# NATS JetStream on the same terms (three servers, R3, one publisher): the
# side-by-side figures of docs/benchmarks.md. Installs nats-server and the
# nats CLI (pinned) with go install into .cache/nats. Not part of `make test`.
bench-jetstream:
	GO=$(GO) scripts/bench-jetstream.sh

# Chaos run: a 3-node cluster of real processes under random faults for
# CHAOS_DURATION (default 10m) with seed CHAOS_SEED (default: random,
# printed), running the idempotent, transactional and copier workloads by
# default (--txn-producers 0 --copier=false for the idempotent one alone),
# and the same through the nodes' Kafka listeners with franz-go
# (--kafka-txn-producers 0 --kafka-consumers 0 --kafka-copier-members 0
# turns that off);
# and CHAOS_RDK librdkafka copiers (default 2; python3-confluent-kafka,
# which make kafka-clients' prerequisites install; CHAOS_RDK=0 without);
# exits non-zero on any anomaly. CHAOS_ARGS adds sluice-chaos
# flags (e.g. --nodes 5, --faults kill:leader,partition). See docs/chaos.md.
CHAOS_DURATION ?= 10m
CHAOS_SEED ?=
CHAOS_RDK ?= 2
CHAOS_ARGS ?=
chaos:
	GO=$(GO) scripts/chaos.sh --duration $(CHAOS_DURATION) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --kafka-rdk-copiers $(CHAOS_RDK) $(CHAOS_ARGS)

lint: vet cross
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(TESTTAGS) $(PKGS)

# The module builds for Windows and macOS too (issue 30): the shipped
# build, and a vet (which compiles the tests) with the test machinery's tag.
CROSS := windows/amd64 darwin/arm64
cross:
	@set -e; for p in $(CROSS); do \
		echo "GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build $(PKGS), vet -tags $(TESTTAGS)"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build $(PKGS); \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet -tags $(TESTTAGS) $(PKGS); \
	done

fmt:
	gofmt -w $$(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go')

clean:
	rm -rf $(BIN)
