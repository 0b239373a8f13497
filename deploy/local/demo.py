#!/usr/bin/env python3
"""The icepack demo:

1. a local S3 + SQS server (moto) with real S3 event notifications into a queue with a DLQ;
2. Iceberg's REST catalog server (the reference's catalog, `org.apache.iceberg.rest.RESTCatalog`;
   deploy/local/rest-catalog.sh) keeping an Iceberg table whose warehouse is on that S3, written by
   a micro-batch job that commits many tiny files;
3. icepack counting them from the notifications and compacting the table when the threshold is
   crossed: with its own JVM-free engine, in its process (`ICEPACK_DEMO_ENGINE=native`, the
   default: `make demo`), or in a Spark container started through the Docker Engine API
   (`ICEPACK_DEMO_ENGINE=spark`: `make demo-spark`, inside deploy/local/with-stack.sh, which
   provides DOCKER_HOST, the Spark + Iceberg image and a host Spark);
4. a before/after table: data files, average file size, rows, a checksum of every row and a scan
   query's time — read by PyIceberg for the native engine (an Iceberg reader independent of both
   icepack and Spark), by Spark for the Spark demo.

Exits 0 only when the compaction really happened and the data is intact."""

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import json
import urllib.request

import boto3

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ICEBERG_VERSION = os.environ.get("ICEBERG_VERSION") or re.search(
    r'ICEBERG_VERSION:=([^}]+)}', open(os.path.join(ROOT, "deploy", "spark", "versions.env")).read()).group(1)
BUCKET = "lakehouse-data"
PREFIX = "warehouse/analytics/customer_orders/"
TABLE = "analytics.customer_orders"
BATCHES = int(os.environ.get("ICEPACK_DEMO_BATCHES", "24"))
ENGINE = os.environ.get("ICEPACK_DEMO_ENGINE", "native")
ROWS_PER_BATCH = 40
AWS = {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo-secret", "AWS_REGION": "us-east-1",
       "AWS_EC2_METADATA_DISABLED": "true"}


def step(message):
    print(f"\n\033[1;36m==> {message}\033[0m", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    def __init__(self, work):
        self.work = work
        self.processes = []
        self.icepack_bin = os.environ["ICEPACK_BIN"]
        if ENGINE == "spark":
            self.spark_home = os.environ["ICEPACK_TEST_SPARK_HOME"]
            self.jars = os.environ["ICEPACK_TEST_SPARK_JARS"]
            self.image = os.environ["ICEPACK_TEST_SPARK_IMAGE"]
        else:
            self.python = os.environ["ICEPACK_DEMO_PYTHON"]
        self.env = dict(os.environ, **AWS, SPARK_LOCAL_IP="127.0.0.1")

    def start(self, args, log):
        process = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=self.env,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def stop_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    # -- stack -------------------------------------------------------------------------------
    def start_s3_and_sqs(self):
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.start(["moto_server", "-H", "127.0.0.1", "-p", str(port)], os.path.join(self.work, "moto.log"))
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        kwargs = dict(endpoint_url=self.endpoint, region_name="us-east-1",
                      aws_access_key_id="demo", aws_secret_access_key="demo-secret")
        s3, sqs = boto3.client("s3", **kwargs), boto3.client("sqs", **kwargs)
        dlq = sqs.create_queue(QueueName="s3-parquet-landing-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.queue_url = sqs.create_queue(QueueName="s3-parquet-landing-queue", Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})})["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={"QueueConfigurations": [{
            "Id": "icepack", "QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*"],
            "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "warehouse/"}]}}}]})
        print(f"S3 + SQS on {self.endpoint}: s3://{BUCKET}/warehouse/ notifies {self.queue_url}")

    def start_rest_catalog(self):
        """Iceberg's REST catalog server: its own JDBC catalog on SQLite, S3FileIO on moto."""
        port = free_port()
        self.catalog_uri = f"http://127.0.0.1:{port}"
        self.start([os.path.join(ROOT, "deploy", "local", "rest-catalog.sh"), "run", os.path.join(self.work, "catalog"),
                    self.endpoint, f"s3://{BUCKET}/warehouse", str(port)], os.path.join(self.work, "rest-catalog.log"))
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.catalog_uri}/v1/config", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                print(open(os.path.join(self.work, "rest-catalog.log")).read()[-3000:], file=sys.stderr)
                raise SystemExit("the REST catalog server did not answer within 60 s")
            time.sleep(0.2)
        print(f"Iceberg REST catalog on {self.catalog_uri} (RESTCatalogServer, Iceberg {ICEBERG_VERSION}), "
              f"warehouse s3://{BUCKET}/warehouse")

    def catalog_table(self):
        """The table as the REST catalog serves it (LoadTable): metadata file and current snapshot."""
        namespace, name = TABLE.split(".")
        with urllib.request.urlopen(f"{self.catalog_uri}/v1/namespaces/{namespace}/tables/{name}", timeout=10) as r:
            loaded = json.load(r)
        metadata = loaded["metadata"]
        current = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
        return (f"{len(metadata['snapshots'])} snapshots, current {current['snapshot-id']} "
                f"({current['summary']['operation']}), metadata {loaded['metadata-location'].rsplit('/', 1)[-1]}")

    def catalog_confs(self):
        prefix = "spark.sql.catalog.lakehouse"
        return {
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.catalog-impl": "org.apache.iceberg.rest.RESTCatalog",
            f"{prefix}.uri": self.catalog_uri,
            f"{prefix}.warehouse": f"s3://{BUCKET}/warehouse",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.s3.endpoint": self.endpoint,
            f"{prefix}.s3.path-style-access": "true",
            f"{prefix}.client.region": "us-east-1",
            "spark.sql.catalogImplementation": "in-memory",
            "spark.ui.enabled": "false",
            "spark.sql.cli.print.header": "true",
        }

    def spark_sql(self, statements):
        """Runs statements in one host spark-sql session; returns (stdout, stderr)."""
        args = [os.path.join(self.spark_home, "bin", "spark-sql"), "--master", "local[1]", "--jars", self.jars]
        for key, value in self.confs.items():
            args += ["--conf", f"{key}={value}"]
        args += ["-e", ";\n".join(statements) + ";"]
        result = subprocess.run(args, capture_output=True, text=True, env=self.env, cwd=self.work)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            raise SystemExit("spark-sql failed")
        return result.stdout, result.stderr

    def pyiceberg(self, *args):
        """demo_table.py in the PyIceberg environment; returns its stdout."""
        env = dict(self.env, ICEPACK_DEMO_CATALOG_URI=self.catalog_uri, ICEPACK_DEMO_S3_ENDPOINT=self.endpoint)
        result = subprocess.run([self.python, os.path.join(ROOT, "deploy", "local", "demo_table.py"), *args],
                                capture_output=True, text=True, env=env, cwd=self.work)
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            raise SystemExit("PyIceberg failed")
        return result.stdout

    # -- icepack -----------------------------------------------------------------------------
    def start_icepack(self):
        self.http = f"127.0.0.1:{free_port()}"
        config = os.path.join(self.work, "icepack.toml")
        with open(config, "w") as f:
            f.write(f'''[service]
state_dir = "{self.work}/state"
http_listen = "{self.http}"

[sqs]
queue_url = "{self.queue_url}"
endpoint_url = "{self.endpoint}"
wait_time_seconds = 1

[defaults]
min_files = {BATCHES}
max_wait_minutes = 30
# The pacing (docs/design.md): the run waits for the writer's burst to end (settle).
settle_seconds = 15

{'engine = "native"                      # compacted in icepack, no JVM' if ENGINE == "native" else ""}

[catalogs.lakehouse]
impl = "org.apache.iceberg.rest.RESTCatalog"
uri = "{self.catalog_uri}"
warehouse = "s3://{BUCKET}/warehouse"
s3_endpoint = "{self.endpoint}"
properties = {{ "client.region" = "us-east-1" }}
{"" if ENGINE == "native" else SPARK_SECTION.format(image=self.image)}
[[tables]]
table = "{TABLE}"
bucket = "{BUCKET}"
prefix = "{PREFIX}"
''')
        self.config = config
        self.icepack_log = os.path.join(self.work, "icepack.log")
        self.icepack = self.start([self.icepack_bin, "run", "--config", config], self.icepack_log)

    def status(self):
        out = subprocess.run([self.icepack_bin, "status", "--config", self.config, "--json"],
                             capture_output=True, text=True, env=self.env)
        return json.loads(out.stdout)["tables"][0] if out.returncode == 0 else None


SPARK_SECTION = """
[spark]
runner = "docker"
image = "{image}"
packages = []
network = "host"
env = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"]
conf = {{ "spark.master" = "local[2]" }}
timeout_minutes = 10
"""


def stats(stdout, stderr, scans):
    lines = stdout.splitlines()

    def row(column):
        at = next(i for i, line in enumerate(lines) if column in line.split("\t"))
        return dict(zip(lines[at].split("\t"), lines[at + 1].split("\t")))

    files = row("data_files")
    data = row("row_count")
    times = [float(t) for t in re.findall(r"Time taken: ([0-9.]+) seconds", stderr)][-scans:]
    return {"files": int(files["data_files"]), "avg_size": float(files["avg_file_bytes"]),
            "rows": int(data["row_count"]), "checksum": data["checksum"], "scan": statistics.median(times)}


FACTS = [
    f"SELECT count(*) AS data_files, avg(file_size_in_bytes) AS avg_file_bytes FROM lakehouse.{TABLE}.files",
    f"SELECT count(*) AS row_count, sum(hash(order_id, customer, order_date, amount)) AS checksum FROM lakehouse.{TABLE}",
]
SCAN = (f"SELECT order_date, count(*) AS orders, round(sum(amount), 2) AS revenue "
        f"FROM lakehouse.{TABLE} GROUP BY order_date ORDER BY order_date")
SCANS = 5


def human(size):
    return f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"


def screenshots(demo):
    """The operator page after the run, as headless Chromium renders it (the README's pictures)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("no Chromium here: no screenshots of the operator page (make deps installs it)")
        return
    shots = os.environ.get("ICEPACK_DEMO_SCREENSHOTS") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.getcwd(), "target"), "demo-page")
    os.makedirs(shots, exist_ok=True)
    step(f"the operator page at http://{demo.http}/ (screenshots in {shots})")
    for name, fragment, height in [("overview", "#/", 520), ("table", f"#/table/{TABLE}", 900)]:
        with tempfile.TemporaryDirectory() as profile:
            path = os.path.join(shots, f"{name}.png")
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            "--disable-dev-shm-usage", "--no-first-run", "--virtual-time-budget=6000",
                            f"--user-data-dir={profile}", f"--window-size=1400,{height}",
                            f"--screenshot={path}", f"http://{demo.http}/{fragment}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            print(f"  {path}" if os.path.exists(path) else f"  no screenshot of the {name} page")


def main():
    work = tempfile.mkdtemp(prefix="icepack-demo-")
    demo = Demo(work)
    try:
        step("starting a local S3 + SQS server (moto) with S3 event notifications")
        demo.start_s3_and_sqs()
        step("starting Iceberg's REST catalog server (the reference's catalog)")
        demo.start_rest_catalog()
        demo.confs = demo.catalog_confs()
        step("starting icepack (" + ("its native engine: compaction in its own process, no JVM" if ENGINE == "native"
                                     else "Docker runner through podman's Docker API") + ")")
        demo.start_icepack()
        print(f"config {demo.config}; the operator page on http://{demo.http}/, its API on http://{demo.http}/v1/tables")

        writer = "PyIceberg" if ENGINE == "native" else "Spark"
        step(f"a micro-batch writer ({writer}) commits {BATCHES} small batches to {TABLE}")
        writer_started = time.time()
        if ENGINE == "native":
            demo.pyiceberg("write", str(BATCHES), str(ROWS_PER_BATCH))
            before = json.loads(demo.pyiceberg("facts", str(SCANS)))
        else:
            statements = [
                "CREATE NAMESPACE IF NOT EXISTS lakehouse.analytics",
                f"CREATE TABLE lakehouse.{TABLE} (order_id BIGINT, customer STRING, order_date DATE, amount DOUBLE) USING iceberg",
            ]
            for batch in range(BATCHES):
                rows = ", ".join(
                    f"({batch * ROWS_PER_BATCH + i}, 'customer-{(batch * 7 + i) % 23}', DATE'2024-05-0{1 + i % 3}', {((batch + 1) * (i + 3)) % 997 / 10})"
                    for i in range(ROWS_PER_BATCH))
                statements.append(f"INSERT INTO lakehouse.{TABLE} VALUES {rows}")
            statements += FACTS + [SCAN] * SCANS
            stdout, stderr = demo.spark_sql(statements)
            before = stats(stdout, stderr, SCANS)
        print(f"{BATCHES} commits in {time.time() - writer_started:.0f} s: {before['files']} data files")
        print(f"REST catalog: {demo.catalog_table()}")

        step("icepack counts the notifications and compacts when the threshold is crossed")
        last = None
        deadline = time.time() + 300
        while time.time() < deadline:
            table = demo.status()
            if table:
                run = table.get("last_run") or {}
                line = (f"  pending small files: {table['pending_files']:>3}   due: {str(table['due']).lower():<5}  "
                        f"run in flight: {'yes' if table.get('in_flight_run') else 'no':<3}  last run: {run.get('outcome', '-')}")
                if line != last:
                    print(line, flush=True)
                    last = line
                if run.get("outcome"):
                    break
            time.sleep(1)
        table = demo.status()
        run = (table or {}).get("last_run") or {}
        if run.get("outcome") != "success":
            print(open(demo.icepack_log).read()[-4000:])
            raise SystemExit(f"no successful compaction: {run}")
        print(f"  run {run['run_id']}: {run['rewritten_data_files']} files rewritten into {run['added_data_files']} "
              f"in {run['duration_ms'] / 1000:.1f} s (trigger: {run['trigger']}; engine: {run.get('engine')}, "
              f"{run.get('engine_detail')})")

        print(f"REST catalog: {demo.catalog_table()}")

        step(f"reading the table again ({writer})")
        if ENGINE == "native":
            after = json.loads(demo.pyiceberg("facts", str(SCANS)))
        else:
            stdout, stderr = demo.spark_sql(FACTS + [SCAN] * SCANS)
            after = stats(stdout, stderr, SCANS)

        intact = before["rows"] == after["rows"] and before["checksum"] == after["checksum"]
        compacted = after["files"] < before["files"]
        if ENGINE == "native" and after["snapshots"].count("replace") != 1:
            raise SystemExit(f"FAILED: expected one replace snapshot, the table has {after['snapshots']}")
        step("before and after")
        print(f"  {'':<28}{'before':>12}{'after':>12}")
        print(f"  {'data files':<28}{before['files']:>12}{after['files']:>12}")
        print(f"  {'average data file size':<28}{human(before['avg_size']):>12}{human(after['avg_size']):>12}")
        print(f"  {'rows':<28}{before['rows']:>12}{after['rows']:>12}")
        print(f"  {'scan query (median of 5)':<28}{before['scan']:>11.3f}s{after['scan']:>11.3f}s")
        print(f"  {'data checksum':<28}{'matches' if intact else 'DIFFERS':>24}")
        if not (compacted and intact):
            raise SystemExit("FAILED: " + ("the data changed" if not intact else "no fewer files"))
        screenshots(demo)
        print("\n\033[1;32mOK\033[0m: icepack compacted the table it was told about by S3 events; the data is intact.")
    finally:
        demo.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
