#!/usr/bin/env python3
"""Runs `icepack simulate` on the BENCHMARKS.md traces with each pacing and engine and prints one
Markdown table: icepack's compute against the cheaper of reference and schedule, its mean pending
files against the better, and its p99 landing -> compacted latency against the schedule's.

    bench/pacing-table.py [ICEPACK_BINARY]      (default: target/release/icepack)
"""
import json
import subprocess
import sys

BINARY = sys.argv[1] if len(sys.argv) > 1 else "target/release/icepack"
TRACES = [
    ("bursty, seed 7", []),
    ("bursty, seed 7, 30% failures", ["--failure-rate", "0.3"]),
    ("bursty, seed 11", ["--seed", "11"]),
    ("bursty, seed 42, 10 tables, 7 days", ["--seed", "42", "--tables", "10", "--days", "7", "--files-per-day", "120"]),
    ("mixed, seed 7", ["--workload", "mixed"]),
    ("mixed, seed 7, 30% failures", ["--workload", "mixed", "--failure-rate", "0.3"]),
    ("mixed, seed 11, 5 days", ["--workload", "mixed", "--seed", "11", "--days", "5"]),
    ("mixed, seed 3", ["--workload", "mixed", "--seed", "3"]),
    ("mixed, seed 42, 4 days", ["--workload", "mixed", "--seed", "42", "--days", "4"]),
]
ENGINES = [("cold (90 s)", "90"), ("warm (1 s)", "1")]
PACINGS = ["settle", "cost"]


def simulate(args):
    out = subprocess.run([BINARY, "simulate", *args], check=True, capture_output=True, text=True).stdout
    return {report["policy"]: report for report in json.loads(out.strip().splitlines()[-1])}


def ratio(value, other):
    return value / other if other else float("nan")


print("| trace | engine | pacing | compute vs cheaper | mean pending vs better | p99 latency (min): icepack / schedule / reference | left small (icepack / best other) | empty runs |")
print("|---|---|---|---|---|---|---|---|")
late = []
for trace, trace_args in TRACES:
    for engine, seconds in ENGINES:
        for pacing in PACINGS:
            reports = simulate([*trace_args, "--run-base-seconds", seconds, "--pacing", pacing])
            icepack, reference, schedule = reports["icepack"], reports["reference"], reports["schedule"]
            cheaper = min(reference["compute_seconds"], schedule["compute_seconds"])
            better = min(reference["mean_pending_files"], schedule["mean_pending_files"])
            p99 = icepack["latency_p99_minutes"] or 0.0
            if pacing == "settle" and p99 > (schedule["latency_p99_minutes"] or 0.0):
                late.append(f"{trace}, {engine}")
            print(
                f"| {trace} | {engine} | {pacing} "
                f"| {ratio(icepack['compute_seconds'], cheaper):.2f} "
                f"| {ratio(icepack['mean_pending_files'], better):.2f} "
                f"| {p99:.0f} / {schedule['latency_p99_minutes']:.0f} / {reference['latency_p99_minutes']:.0f} "
                f"| {icepack['left_small']} / {min(reference['left_small'], schedule['left_small'])} "
                f"| {icepack['empty_runs']} |"
            )
print()
print("default later at p99 than the schedule: " + (", ".join(late) if late else "on no trace"))
