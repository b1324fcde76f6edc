# kubeplug: the one front door. `make help` lists the targets.
#
# Build caches live outside the clone so fresh clones (CI) build quickly on a
# machine that built before; a machine without them still builds from scratch.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

export CARGO_TARGET_DIR ?= $(HOME)/.cache/kubeplug/target
export KUBEPLUG_CACHE ?= $(HOME)/.cache/kubeplug

# Plugins shipped with the host, and test guests (never deployed).
PLUGINS      := database myapp pod-annotator
TEST_PLUGINS := hostile contract-v1 plain disruption-budget
# SDK plugins are built without WASI (wasm32-unknown-unknown, made a
# component by the wasm-component-ld that rustup ships): no WASI imports, so
# an instance costs a few microseconds less per call (docs/benchmarks/runtime.md).
# The rest are built as other toolchains build them, with WASI (wasip2):
# `hostile` sleeps and reads clocks through it.
WASI_PLUGINS := hostile contract-v1 plain
PURE_TEST_PLUGINS := $(filter-out $(WASI_PLUGINS),$(TEST_PLUGINS))
PURE_TARGET  := wasm32-unknown-unknown
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER := wasm-component-ld
# Plugins in other languages, built by their SDKs' scripts with pinned
# toolchains (a venv for componentize-py, `npm ci` for componentize-js),
# outputs cached by content under $(KUBEPLUG_CACHE)/{py,ts}.
PY_BUILD     := plugins/sdk-python/build
TS_BUILD     := plugins/sdk-ts/build
WASM_OUT     := $(CARGO_TARGET_DIR)/wasm32-wasip2/plugin
PURE_OUT     := $(CARGO_TARGET_DIR)/$(PURE_TARGET)/plugin
BIN          := target/bin/kubeplug
HOST_TARGET  := x86_64-unknown-linux-musl
HOST_OUT     := $(CARGO_TARGET_DIR)/$(HOST_TARGET)/release/kubeplug
# Builds with the workspace's toolchain (rust-version in Cargo.toml).
CARGO_DENY_VERSION := 0.20.2

.PHONY: help toolchain host-toolchain deny-tool shipped-plugins plugins polyglot-plugins host image plugin-images image-check lint chart-check audit unit cluster-check e2e test flake-hunt demo demo-down bench clean

help:
	@echo "make plugins       build target/plugins/*.wasm and the test guests in target/test-plugins/"
	@echo "make shipped-plugins  build target/plugins/*.wasm only (what the demo runs)"
	@echo "make host          build target/bin/kubeplug (static, as the image ships it)"
	@echo "make test          every test: lint, unit, plugin fixtures, chart, control-plane checks, e2e (timed per stage)"
	@echo "make flake-hunt    the e2e suite N times (FLAKE_RUNS, default 3) beside a CPU hog; lists every test that failed once"
	@echo "make chart-check   the Helm chart renders what the kustomization renders (deploy/chart/check)"
	@echo "make e2e           acceptance tests against a fresh local control plane"
	@echo "make demo          local control plane + host + the three plugins + sample objects"
	@echo "make image         the host's OCI image (target/images/, no container engine needed)"
	@echo "make plugin-images one OCI image per plugin, for image volumes"
	@echo "make bench         benchmarks (print figures)"
	@echo "make audit         RustSec advisories (needs the advisory database: GitHub access)"

toolchain:
	@rustup target list --installed | grep -qx $(PURE_TARGET) || rustup target add $(PURE_TARGET)
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy rustfmt

# The host is one static binary (musl), built once: the tests, the demo and
# the image all run it. musl-gcc (Debian's musl-tools) compiles its C parts.
host-toolchain: toolchain
	@rustup target list --installed | grep -qx $(HOST_TARGET) || rustup target add $(HOST_TARGET)
	@command -v musl-gcc >/dev/null || { [[ "$$(id -u)" == 0 ]] && command -v apt-get >/dev/null && \
	  apt-get update -qq && apt-get install -y -qq musl-tools; } || \
	  { echo "musl-gcc not found: install musl-tools (apt-get install musl-tools)" >&2; exit 1; }

# deny.toml's checks (`make lint`, `make audit`): cargo-deny, built once.
deny-tool:
	@command -v cargo-deny >/dev/null || cargo install --locked cargo-deny@$(CARGO_DENY_VERSION)

# What the host ships and the demo runs: the three seeds and pod-labeler.
shipped-plugins: toolchain
	@mkdir -p target/plugins
	cargo build --profile plugin --target $(PURE_TARGET) $(addprefix -p ,$(PLUGINS))
	@for p in $(PLUGINS); do cp "$(PURE_OUT)/$${p//-/_}.wasm" "target/plugins/$$p.wasm"; done
	$(PY_BUILD) plugins/pod-labeler target/plugins/pod-labeler.wasm

# Everything the tests load: the shipped plugins and the test guests.
plugins: shipped-plugins
	@# Test guests that use WASI are built for wasip2.
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@mkdir -p target/test-plugins
	@# database v2 (one extra label) for the upgrade tests; both builds write
	@# the same output file, so each is copied right after its build.
	cargo build --profile plugin --target $(PURE_TARGET) -p database --features v2
	cp "$(PURE_OUT)/database.wasm" target/test-plugins/database-v2.wasm
	@# hostile without WASI too (hostile-pure): a panic's message must reach
	@# the trap's report through the SDK's error log.
	cargo build --profile plugin --target $(PURE_TARGET) $(addprefix -p ,$(PURE_TEST_PLUGINS) hostile)
	cp "$(PURE_OUT)/hostile.wasm" target/test-plugins/hostile-pure.wasm
	cargo build --profile plugin --target wasm32-wasip2 $(addprefix -p ,$(WASI_PLUGINS))
	@# What `kubectl apply -k deploy/` ships as ConfigMaps (the chart ships no plugin).
	@mkdir -p deploy/overlays/configmaps/plugins
	@for p in $(PLUGINS); do cp "target/plugins/$$p.wasm" deploy/overlays/configmaps/plugins/; done
	@for p in $(PURE_TEST_PLUGINS); do cp "$(PURE_OUT)/$${p//-/_}.wasm" "target/test-plugins/$$p.wasm"; done
	@for p in $(WASI_PLUGINS); do cp "$(WASM_OUT)/$${p//-/_}.wasm" "target/test-plugins/$$p.wasm"; done
	@# A component that takes Cranelift ~10 s and ~600 MiB to compile, for
	@# the compile-quota tests (built natively; it writes the .wasm).
	cargo run --release -q -p compile-bomb -- 100000 target/test-plugins/compile-bomb.wasm
	@# Go: database's port, the hostile Go guest and one of every export,
	@# built by the Go SDK (the standard toolchain, then this tree's
	@# kubeplug composes them).
	cargo build --release -q -p kubeplug --bin kubeplug
	KUBEPLUG="$(CARGO_TARGET_DIR)/release/kubeplug" plugins/sdk-go/build plugins/database-go target/test-plugins/database-go.wasm
	KUBEPLUG="$(CARGO_TARGET_DIR)/release/kubeplug" plugins/sdk-go/build plugins/testing/hostile-go target/test-plugins/hostile-go.wasm
	KUBEPLUG="$(CARGO_TARGET_DIR)/release/kubeplug" plugins/sdk-go/build plugins/testing/exports-go target/test-plugins/exports-go.wasm
	$(MAKE) --no-print-directory polyglot-plugins
	@ls -l target/plugins target/test-plugins

# Python and TypeScript test guests (pod-labeler, 18 MB and too big for a
# ConfigMap, ships with the seeds: shipped-plugins): the ports of myapp run
# myapp's fixtures; the rest are test guests.
polyglot-plugins:
	@mkdir -p target/plugins target/test-plugins
	$(PY_BUILD) plugins/myapp-py target/test-plugins/myapp-py.wasm
	@# pod-labeler 0.2.0 (same logic, new version) for the live-upgrade test.
	@rm -rf target/pod-labeler-v2 && cp -r plugins/pod-labeler target/pod-labeler-v2
	sed -i 's/^VERSION = "0.1.0"$$/VERSION = "0.2.0"/' target/pod-labeler-v2/app.py
	grep -q '^VERSION = "0.2.0"$$' target/pod-labeler-v2/app.py
	$(PY_BUILD) target/pod-labeler-v2 target/test-plugins/pod-labeler-v2.wasm
	$(PY_BUILD) --wit plugins/testing/unprovided-py/wit --world plugin-with-store \
		plugins/testing/unprovided-py target/test-plugins/unprovided-py.wasm
	$(TS_BUILD) plugins/myapp-ts target/test-plugins/myapp-ts.wasm
	$(TS_BUILD) plugins/testing/throws-ts target/test-plugins/throws-ts.wasm
	@# componentize-js's default features: imports wasi:http.
	$(TS_BUILD) --world plugin --all-features plugins/testing/fetch-ts target/test-plugins/fetch-ts.wasm

host: host-toolchain
	cargo build --release --target $(HOST_TARGET) -p kubeplug --bin kubeplug
	@mkdir -p target/bin && cp "$(HOST_OUT)" $(BIN).tmp && mv -f $(BIN).tmp $(BIN)
	@# kubectl finds plugins by name on PATH: `kubectl kubeplug ...`.
	@ln -sf kubeplug target/bin/kubectl-kubeplug

# The host's binary in a FROM-scratch OCI image, built with umoci (no
# container engine, nothing pulled): target/images/kubeplug-<v>.oci.tar.
image: host
	deploy/image/build host

# One tiny OCI image per plugin (the .wasm at its root), for image volumes.
plugin-images: shipped-plugins host
	deploy/image/build plugins

# Both kinds of image hold what they should and run as they should.
image-check: image plugin-images
	deploy/image/check

lint: toolchain deny-tool
	cargo fmt --all -- --check
	@# Each host crate within its layer (docs/architecture.md).
	host/layers
	@# No module of a host crate imports another in a circle (its docstring says how).
	host/modules
	@# No function over 120 lines, a reason atop every file over 600, a thin binary.
	host/sizes
	@# Every relative link in the Markdown resolves, #anchors included.
	docs/check-links
	@# The release profile, as the tests build: build scripts and proc
	@# macros are compiled once for both. Traces (`otel`) are a default
	@# feature; the host without them is checked too.
	cargo clippy --release --workspace --all-targets -- -D warnings
	cargo clippy --release -p kubeplug --no-default-features -- -D warnings
	cargo deny check bans licenses sources
	@# The Go SDK's hand-written glue still matches wit/plugin.wit; gofmt,
	@# go vet and its tests.
	plugins/sdk-go/check-wit
	@# The Helm chart (Helm built once from its Go module, tests/helm/build):
	@# lints and renders with its defaults (chart-check compares each choice).
	helm="$$(tests/helm/build)"; \
	  "$$helm" lint --strict --with-subcharts deploy/chart; \
	  "$$helm" template kubeplug deploy/chart --namespace kubeplug-system >/dev/null

# The chart renders the same objects as the kustomization, for each choice
# (plugins from ConfigMaps or image volumes, the aggregated API, every
# component); needs kubectl from the control plane build.
chart-check: plugins
	deploy/chart/check

# Known vulnerabilities and unmaintained crates (deny.toml). Not in `lint`:
# the RustSec database is fetched from GitHub, which this project's machines
# do not reach; run it where they do.
audit: deny-tool
	cargo deny check advisories

# Everything but the acceptance tests (they need a cluster: `make e2e`).
unit: plugins
	cargo test --release --workspace --exclude kubeplug-e2e
	@# The Python SDK without Wasm: its unit tests, pod-labeler's fixtures,
	@# and myapp's fixtures through the Python port.
	PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s plugins/sdk-python/tests
	plugins/sdk-python/test plugins/pod-labeler
	plugins/sdk-python/test plugins/myapp-py plugins/myapp
	@# The TypeScript SDK's committed WIT types match wit/.
	plugins/sdk-ts/check-types

cluster-check:
	tests/cluster/check

# Acceptance tests: the built host and plugins against fresh local control
# planes, E2E_SHARDS of them (default 2) side by side, each running one test
# at a time: a test starts its own host, and two hosts on one cluster would
# both reconcile every parent. The install tests run the host from its image
# (target/images).
e2e: plugins host image
	tests/e2e/run

# Every stage in turn, timed: the stages' wall times are printed at the end
# (also when one fails), so a slower suite shows in every CI log.
TEST_STAGES := lint plugins unit host chart-check cluster-check image-check e2e
test:
	tests/stages $(TEST_STAGES)

# The e2e suite FLAKE_RUNS times (fresh control planes each run) beside a CPU
# hog (FLAKE_HOGS busy processes, default 1): every test that failed once is
# listed.
FLAKE_RUNS ?= 3
flake-hunt: plugins host image
	tests/e2e/flake-hunt $(FLAKE_RUNS)

# The local demo: control plane, CRDs, host with the three plugins, samples.
demo: shipped-plugins host
	deploy/demo

demo-down:
	deploy/demo down

# The operator benchmark's rows: N:contenders (tests/bench/operator). The
# scale curve: kubeplug with its defaults against itself without a client
# limit, the reflector baseline and the floor (no controller), up to 10,000;
# scale out: the database grant sharded, 1 replica against 3 (docs/benchmarks/scale-out.md).
OPERATOR_BENCH_RUNS ?= 1000:kubeplug,kubeplug-unlimited,reflector,floor 3000:kubeplug,reflector,floor,sharded-1,sharded-3 10000:kubeplug,reflector

# Runtime micro-benchmark, then the operator benchmark (kubeplug against the
# kube-rs controllers and the floor on fresh local control planes, about an
# hour), the upgrade and rollout benchmarks.
bench: plugins host
	cargo build --release -p kubeplug-bench --bins
	@rm -rf target/bench && mkdir -p target/bench/rust target/bench/languages
	@for p in $(PLUGINS); do cp "target/plugins/$$p.wasm" target/bench/rust/; done
	cargo run --release -p kubeplug-bench --bin kubeplug-bench -- target/bench/rust
	@# Per language: myapp in Rust, Python and TypeScript (same logic, same
	@# requests), database in Rust and Go, and the two Pod decorators (Rust,
	@# Python).
	cp target/plugins/myapp.wasm target/test-plugins/myapp-py.wasm target/test-plugins/myapp-ts.wasm \
		target/plugins/database.wasm target/test-plugins/database-go.wasm \
		target/plugins/pod-annotator.wasm target/plugins/pod-labeler.wasm target/bench/languages/
	cargo run --release -p kubeplug-bench --bin kubeplug-bench -- --compiles 1 --calls 1000 --copies 5 target/bench/languages
	BENCH_RUNS="$(OPERATOR_BENCH_RUNS)" tests/bench/operator
	tests/bench/upgrade
	tests/bench/rollout
	tests/bench/admission
	tests/bench/whatif

clean:
	rm -rf target
