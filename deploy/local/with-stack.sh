#!/usr/bin/env bash
# Runs a command with the local stack the end-to-end tests use, then tears the stack down:
#   - a podman service answering the Docker Engine API (DOCKER_HOST),
#   - the Spark + Iceberg image built without a registry (deploy/spark/build-image-rootfs.sh),
#   - a host Spark with the same jars, for the spark-sql process runner (deploy/local/spark-dist.sh),
#   - Spark 4.0 with Iceberg for the Spark Connect servers tests start (deploy/local/spark-connect.sh):
#     one per test process, shared, that also creates and checks the tests' tables,
#   - Iceberg's REST catalog server, assembled from Maven (deploy/local/rest-catalog.sh),
#   - ElasticMQ's jars, a second SQS server beside moto (deploy/local/elasticmq.sh),
#   - PyIceberg, an independent reader of what the native engine writes (deploy/local/pyiceberg.sh).
# The S3 + SQS server (moto), the REST catalog servers and ElasticMQ are started by each test
# itself, on free ports.
#
#   deploy/local/with-stack.sh cargo test --all-targets -- --include-ignored   (the stack's tests are #[ignore]d)
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\033[1m[stack]\033[0m %s\n' "$*" >&2; }

./deploy/local/install-deps.sh

socket_dir=$(mktemp -d /tmp/icepack-podman.XXXXXX)
stop_stack() {
  ./deploy/local/podman-service.sh stop "$socket_dir" >/dev/null 2>&1 || true
  rm -rf "$socket_dir"
}
trap stop_stack EXIT

step "container engine (podman, Docker Engine API)"
docker_host=$(./deploy/local/podman-service.sh start "$socket_dir" | tail -n 1)
export "${docker_host?}"

step "Spark + Iceberg image (cached after the first build)"
started=$SECONDS
image=$(./deploy/spark/build-image-rootfs.sh | tail -n 1)
image=${image#IMAGE=}
step "image $image ready in $((SECONDS - started)) s"

step "host Spark for the process runner"
eval "$(./deploy/local/spark-dist.sh --env)"

step "Spark 4.0 + Iceberg for Spark Connect servers (a test process starts one and shares it: deploy/local/spark-connect.sh)"
./deploy/local/spark-connect.sh prepare

step "Iceberg REST catalog server (tests start their own: deploy/local/rest-catalog.sh)"
./deploy/local/rest-catalog.sh prepare

step "ElasticMQ, a second SQS server (tests start their own: tests/integration/support/elasticmq.rs)"
eval "$(./deploy/local/elasticmq.sh --env)"

step "PyIceberg, a second reader (deploy/local/pyiceberg.sh)"
eval "$(./deploy/local/pyiceberg.sh --env)"

export ICEPACK_E2E=1
export ICEPACK_TEST_PYICEBERG_PYTHON="$ICEPACK_PYICEBERG_PYTHON"
export ICEPACK_TEST_ELASTICMQ_CLASSPATH
export ICEPACK_TEST_SPARK_IMAGE="$image"
export ICEPACK_TEST_SPARK_HOME="$SPARK_HOME"
export ICEPACK_TEST_SPARK_JARS="$ICEPACK_SPARK_JARS"
export SPARK_LOCAL_IP=127.0.0.1

step "running: $*"
"$@"
