#!/usr/bin/env bash
# What the reference blueprint's way costs: `spark-sql --packages ...` resolves Iceberg and the AWS
# bundle from Maven Central on every run (a fresh container has an empty Ivy cache), against jars
# baked into the image (`--jars`). Same host Spark, same trivial statement, runs alternating;
# prints the median wall time of each and the difference.
#
#   bench/packages-vs-jars.sh [REPEATS]      (default 3; 1 for the CI smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
# shellcheck disable=SC1091
source deploy/spark/versions.env
eval "$(./deploy/local/spark-dist.sh --env)"
export SPARK_LOCAL_IP=127.0.0.1
# spark-sql leaves a Derby metastore and derby.log in its working directory: use a scratch one.
scratch=$(mktemp -d /tmp/icepack-packages.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
packages="org.apache.iceberg:iceberg-spark-runtime-3.5_${SCALA_BINARY_VERSION}:${ICEBERG_VERSION},org.apache.iceberg:iceberg-aws-bundle:${ICEBERG_VERSION}"
conf=(--conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions
      --conf spark.ui.enabled=false --master 'local[1]')

# Wall time of a command in seconds, to the millisecond.
seconds() {
  local started ended
  started=$(date +%s%N)
  "$@" >/dev/null 2>&1 || return 1
  ended=$(date +%s%N)
  awk -v ns=$((ended - started)) 'BEGIN {printf "%.2f", ns / 1e9}'
}

packaged=() baked=()
for ((run = 1; run <= repeats; run++)); do
  ivy=$(mktemp -d /tmp/icepack-ivy.XXXXXX)        # an empty cache, as in a fresh container
  if ! t=$(seconds "$SPARK_HOME/bin/spark-sql" --packages "$packages" \
      --conf "spark.jars.ivy=$ivy" "${conf[@]}" -e 'SELECT 1'); then
    rm -rf "$ivy"
    echo "packages-vs-jars: --packages could not be resolved here (no route to Maven Central?); not measured"
    exit 0
  fi
  packaged+=("$t"); rm -rf "$ivy"
  baked+=("$(seconds "$SPARK_HOME/bin/spark-sql" --jars "$ICEPACK_SPARK_JARS" "${conf[@]}" -e 'SELECT 1')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(median "${packaged[@]}") b=$(median "${baked[@]}")
extra=$(awk -v p="$p" -v b="$b" 'BEGIN {printf "%.2f s (%.2f×)", p - b, p / b}')
echo "spark-sql start + SELECT 1, median of $repeats: --packages with a fresh Ivy cache $p s, baked --jars $b s; resolving costs $extra per run"
