# The two commands of the README: `make demo` and `make test`.
.PHONY: deps build test lint lint-deploy demo demo-spark bench fuzz

deps:
	./deploy/local/install-deps.sh

# The release binary; without the `failpoints` feature it has no fault points.
build: deps
	cargo build --release

lint: deps
	cargo fmt --all -- --check
	python3 deploy/check/module-graph.py --quiet
	cargo deny --log-level error check licenses bans sources
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features failpoints -- -D warnings
	cargo clippy --lib --no-default-features -- -D warnings

# Deployment assets: Helm chart (helm lint/template), compose file (compose-go + checks), Grafana
# dashboard, container image config; helm and compose-go are built once from the Go module proxy.
lint-deploy:
	cargo build --quiet --bin icepack
	./deploy/check/lint-deploy.sh "$${CARGO_TARGET_DIR:-target}/debug/icepack"

# First the command-line tests on a build without fault points, as `make build` and the image make
# it: there ICEPACK_FAILPOINTS is ignored. Then unit, property and integration tests with the fault
# points the crash and full-disk tests arm (`--features failpoints`); the end-to-end ones need the
# local stack (podman's Docker API, the Spark + Iceberg image, a host Spark), which with-stack.sh
# starts and stops; those are #[ignore]d (a plain `cargo test` lists them as ignored), so they run
# here with --include-ignored, all but the two measurements (`measure_*`). Then a smoke of every benchmark (figures printed, never asserted), so none of
# them rots.
test: lint lint-deploy
	cargo test --test cli
	./deploy/local/with-stack.sh sh -c 'cargo test --features failpoints --lib --bins --tests -- --include-ignored --skip measure_ && bench/run-all.sh --smoke'
	./fuzz/run.sh 20

# Longer fuzzing (TESTING.md): every target for 10 minutes.
fuzz:
	./fuzz/run.sh 600

# The figures of BENCHMARKS.md.
bench: deps
	./deploy/local/with-stack.sh bench/run-all.sh

# The demo compacts with icepack's own engine and prepares no Spark; demo-spark is the same job in
# a Spark container through the Docker Engine API.
demo:
	./deploy/local/demo.sh

demo-spark: deps
	ICEPACK_DEMO_ENGINE=spark ./deploy/local/demo.sh
