#!/usr/bin/env python3
"""The demo's table as PyIceberg (an Iceberg implementation of its own, independent of icepack's
engine and of Spark) writes and reads it, through the REST catalog on the local S3:

    demo_table.py write BATCHES ROWS_PER_BATCH   create the table, then one commit per batch
    demo_table.py facts SCANS                    data files, average size, rows, a checksum of every
                                                 row, and the median time of SCANS scan queries (JSON)

Run with the Python of deploy/local/demo.sh's PyIceberg environment. The catalog and S3 come from
ICEPACK_DEMO_CATALOG_URI, ICEPACK_DEMO_S3_ENDPOINT and the AWS_* variables."""

import datetime
import hashlib
import json
import os
import statistics
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

TABLE = "analytics.customer_orders"
SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "customer", StringType(), required=False),
    NestedField(3, "order_date", DateType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
)


def catalog():
    return load_catalog("lakehouse", **{
        "type": "rest",
        "uri": os.environ["ICEPACK_DEMO_CATALOG_URI"],
        "s3.endpoint": os.environ["ICEPACK_DEMO_S3_ENDPOINT"],
        "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        # fsspec's S3 (s3fs) puts a small file in one request; pyarrow's S3 always completes a
        # multipart upload, whose answer from the local S3 server (moto) its AWS SDK refuses.
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
    })


def write(batches, rows_per_batch):
    lake = catalog()
    lake.create_namespace_if_not_exists("analytics")
    table = lake.create_table_if_not_exists(TABLE, schema=SCHEMA)
    arrow_schema = SCHEMA.as_arrow()
    for batch in range(batches):
        rows = range(rows_per_batch)
        table.append(pa.table({
            "order_id": [batch * rows_per_batch + i for i in rows],
            "customer": [f"customer-{(batch * 7 + i) % 23}" for i in rows],
            "order_date": [datetime.date(2024, 5, 1 + i % 3) for i in rows],
            "amount": [((batch + 1) * (i + 3)) % 997 / 10 for i in rows],
        }, schema=arrow_schema))


def facts(scans):
    table = catalog().load_table(TABLE)
    files = table.inspect.files()
    sizes = files.column("file_size_in_bytes").to_pylist()
    data = table.scan().to_arrow()
    # Every row, hashed whole and summed: equal only when the same rows come back.
    checksum = 0
    for row in data.to_pylist():
        digest = hashlib.sha256(json.dumps(row, default=str, sort_keys=True).encode()).digest()
        checksum = (checksum + int.from_bytes(digest[:8], "big")) % (1 << 64)
    times = []
    for _ in range(scans):
        started = time.perf_counter()
        scanned = table.scan(selected_fields=("order_date", "amount")).to_arrow()
        scanned.group_by("order_date").aggregate([("amount", "sum"), ("amount", "count")])
        times.append(time.perf_counter() - started)
    print(json.dumps({
        "files": len(sizes),
        "avg_size": sum(sizes) / len(sizes) if sizes else 0,
        "rows": data.num_rows,
        "checksum": str(checksum),
        "revenue": round(pc.sum(data.column("amount")).as_py() or 0, 2),
        "scan": statistics.median(times),
        "snapshots": [snapshot.summary.operation.value for snapshot in table.snapshots()],
    }))


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "write":
        write(int(sys.argv[2]), int(sys.argv[3]))
    elif command == "facts":
        facts(int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown command {command}")
