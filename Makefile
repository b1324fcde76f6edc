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
TEST_PLUGINS := hostile contract-v1 plain
WASM_OUT     := $(CARGO_TARGET_DIR)/wasm32-wasip2/plugin
BIN          := target/bin/kubeplug

.PHONY: help toolchain plugins host image plugin-images image-check lint unit cluster-check e2e test demo demo-down bench clean

help:
	@echo "make plugins       build target/plugins/*.wasm (and test guests in target/test-plugins/)"
	@echo "make host          build target/bin/kubeplug"
	@echo "make test          every test: lint, unit, plugin fixtures, control-plane checks, e2e"
	@echo "make e2e           acceptance tests against a fresh local control plane"
	@echo "make demo          local control plane + host + the three plugins + sample objects"
	@echo "make image         the host's OCI image (target/images/, no container engine needed)"
	@echo "make plugin-images one OCI image per plugin, for image volumes"
	@echo "make bench         benchmarks (print figures)"

toolchain:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy rustfmt

plugins: toolchain
	@mkdir -p target/plugins target/test-plugins
	@# database v2 (one extra label) for the upgrade tests: built first, since
	@# both builds write the same output file.
	cargo build --profile plugin --target wasm32-wasip2 -p database --features v2
	cp "$(WASM_OUT)/database.wasm" target/test-plugins/database-v2.wasm
	cargo build --profile plugin --target wasm32-wasip2 $(addprefix -p ,$(PLUGINS) $(TEST_PLUGINS))
	@for p in $(PLUGINS); do cp "$(WASM_OUT)/$${p//-/_}.wasm" "target/plugins/$$p.wasm"; done
	@# What `kubectl apply -k deploy/` ships as ConfigMaps.
	@mkdir -p deploy/overlays/configmaps/plugins
	@cp target/plugins/*.wasm deploy/overlays/configmaps/plugins/
	@for p in $(TEST_PLUGINS); do cp "$(WASM_OUT)/$${p//-/_}.wasm" "target/test-plugins/$$p.wasm"; done
	@# A component that takes Cranelift ~10 s and ~600 MiB to compile, for
	@# the compile-quota tests (built natively; it writes the .wasm).
	cargo run --release -q -p compile-bomb -- 100000 target/test-plugins/compile-bomb.wasm
	@ls -l target/plugins target/test-plugins

host: toolchain
	cargo build --release -p kubeplug
	@mkdir -p target/bin && cp "$(CARGO_TARGET_DIR)/release/kubeplug" $(BIN).tmp && mv -f $(BIN).tmp $(BIN)

# The host as a static binary in a FROM-scratch OCI image, built with umoci
# (no container engine, nothing pulled): target/images/kubeplug-<v>.oci.tar.
image: toolchain
	deploy/image/build host

# One tiny OCI image per plugin (the .wasm at its root), for image volumes.
plugin-images: plugins host
	deploy/image/build plugins

# Both kinds of image hold what they should and run as they should.
image-check: image plugin-images
	deploy/image/check

lint: toolchain
	cargo fmt --all -- --check
	cargo clippy --release --workspace --all-targets -- -D warnings

# Everything but the acceptance tests (they need a cluster: `make e2e`).
unit: plugins
	cargo test --release --workspace --exclude kubeplug-e2e

cluster-check:
	tests/cluster/check

# Acceptance tests: the built host and plugins against a fresh local control
# plane. One test at a time: each starts its own host, and two hosts on one
# cluster would both reconcile every parent.
e2e: plugins host
	tests/e2e/run

test: lint unit cluster-check image-check e2e

# The local demo: control plane, CRDs, host with the three plugins, samples.
demo: plugins host
	deploy/demo

demo-down:
	deploy/demo down

# Runtime micro-benchmark, then the operator benchmark (kubeplug vs a native
# kube-rs controller on fresh local control planes; BENCH_N="100 1000").
bench: plugins host
	cargo run --release -p kubeplug --bin kubeplug-bench -- target/plugins
	tests/bench/operator
	tests/bench/upgrade
	tests/bench/rollout

clean:
	rm -rf target
