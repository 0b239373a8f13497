# The two commands of the README: `make demo` and `make test`.
.PHONY: deps build test lint lint-deploy demo bench fuzz

deps:
	./deploy/local/install-deps.sh

build: deps
	cargo build --release

lint: deps
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# Deployment assets: Helm chart (helm lint/template), compose file (compose-go + checks), Grafana
# dashboard, container image config; helm and compose-go are built once from the Go module proxy.
lint-deploy:
	cargo build --quiet --bin icepack
	./deploy/check/lint-deploy.sh "$${CARGO_TARGET_DIR:-target}/debug/icepack"

# Unit, property and integration tests; the end-to-end ones need the local stack (podman's Docker
# API, the Spark + Iceberg image, a host Spark), which with-stack.sh starts and stops. Then a smoke of
# every benchmark (figures printed, never asserted), so none of them rots.
test: lint lint-deploy
	./deploy/local/with-stack.sh sh -c 'cargo test --lib --bins --tests && bench/run-all.sh --smoke'
	./fuzz/run.sh 20

# Longer fuzzing (TESTING.md): every target for 10 minutes.
fuzz:
	./fuzz/run.sh 600

# The figures of BENCHMARKS.md.
bench: deps
	./deploy/local/with-stack.sh bench/run-all.sh

demo: deps
	./deploy/local/demo.sh
