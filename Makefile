# The two commands of the README: `make demo` and `make test`.
.PHONY: deps build test lint demo

deps:
	./deploy/local/install-deps.sh

build: deps
	cargo build --release

lint: deps
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

test: lint
	cargo test --all-targets

demo: deps
	./deploy/local/demo.sh
