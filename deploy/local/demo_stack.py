#!/usr/bin/env python3
"""Local-stack helper for the demo: S3 bucket + SQS queue (with a dead-letter queue) wired with
real S3 event notifications, and a writer that lands small files the way a micro-batch job does.

Talks to any S3/SQS endpoint (moto, ministack, LocalStack) through boto3."""

import argparse
import json
import sys
import time

import boto3

REGION = "us-east-1"


def clients(endpoint):
    kwargs = dict(endpoint_url=endpoint, region_name=REGION,
                  aws_access_key_id="testing", aws_secret_access_key="testing")
    return boto3.client("s3", **kwargs), boto3.client("sqs", **kwargs)


def setup(args):
    s3, sqs = clients(args.endpoint)
    dlq_url = sqs.create_queue(QueueName=f"{args.queue}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=args.queue,
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.create_bucket(Bucket=args.bucket)
    s3.put_bucket_notification_configuration(
        Bucket=args.bucket,
        NotificationConfiguration={"QueueConfigurations": [{
            "Id": "icepack-landing",
            "QueueArn": queue_arn,
            "Events": ["s3:ObjectCreated:*"],
            "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": args.prefix}]}},
        }]},
    )
    print(queue_url)


def write(args):
    s3, _ = clients(args.endpoint)
    for index in range(args.count):
        partition = f"order_date=2024-05-0{1 + index % 2}"
        key = f"{args.prefix}data/{partition}/{args.batch:05d}-{index:03d}-micro-batch.parquet"
        s3.put_object(Bucket=args.bucket, Key=key, Body=b"PAR1" + b"\0" * (args.size - 8) + b"PAR1")
    print(f"wrote {args.count} small files of {args.size} bytes", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--bucket", required=True)
    s.add_argument("--queue", required=True)
    s.add_argument("--prefix", required=True)
    w = sub.add_parser("write")
    w.add_argument("--bucket", required=True)
    w.add_argument("--prefix", required=True)
    w.add_argument("--batch", type=int, required=True)
    w.add_argument("--count", type=int, default=4)
    w.add_argument("--size", type=int, default=48 * 1024)
    args = parser.parse_args()
    {"setup": setup, "write": write}[args.command](args)


if __name__ == "__main__":
    main()
