# The two commands of the README: `make demo` and `make test`.
.PHONY: deps build test lint demo

deps:
	./deploy/local/install-deps.sh

build: deps
	cargo build --release

lint: deps
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

# Unit, property and integration tests; the end-to-end ones need the local stack (podman's Docker
# API, the Spark + Iceberg image, a host Spark), which with-stack.sh starts and stops.
test: lint
	./deploy/local/with-stack.sh cargo test --all-targets

demo: deps
	./deploy/local/demo.sh
