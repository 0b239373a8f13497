#!/usr/bin/env python3
"""Static validation of the Grafana dashboard deploy/grafana/icepack.json.

    python3 deploy/check/validate-dashboard.py deploy/grafana/icepack.json [docs/operations.md] [--binary ICEPACK]

Fails (exit 1) when: the JSON does not parse; it is not a dashboard (title, uid, panels,
schemaVersion >= 36); it has no Prometheus data-source variable; a panel has no query, a
duplicate id or no gridPos; a panel or query uses a data source other than ${datasource}; any
PromQL expression (panels and template variables) references a metric that icepack does not
export (the list below, from docs/operations.md's metric section), or a label that metric does not have.
With docs/operations.md given, metric names it documents but this list lacks (or the reverse) are
reported as warnings, so that a renamed metric is noticed. With --binary, `icepack run` is
started on loopback only (queue endpoint 127.0.0.1:9, which refuses; process runner; dummy AWS
keys and IMDS off, so nothing leaves the machine), /metrics is scraped, and every metric of the
list must be exported (a listed metric that is not exported fails; an exported one that is not
listed is a warning).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# metric -> labels (besides the histogram's `le`)
METRICS: dict[str, set[str]] = {
    "icepack_up": set(),
    "icepack_sqs_messages_received_total": {"queue"},
    "icepack_sqs_messages_deleted_total": {"queue"},
    "icepack_sqs_messages_invalid_total": {"queue"},
    "icepack_sqs_delete_failures_total": {"queue"},
    "icepack_sqs_errors_total": {"operation", "queue"},
    "icepack_sqs_last_receive_timestamp_seconds": {"queue"},
    "icepack_records_counted_total": {"table", "tenant"},
    "icepack_records_ignored_total": {"reason"},
    "icepack_state_commit_failures_total": set(),
    "icepack_table_pending_files": {"table", "tenant"},
    "icepack_table_pending_bytes": {"table", "tenant"},
    "icepack_table_due": {"table", "tenant"},
    "icepack_tables_due": set(),
    "icepack_table_run_in_flight": {"table", "tenant"},
    "icepack_table_consecutive_failures": {"table", "tenant"},
    "icepack_tenant_tables": {"tenant"},
    "icepack_tenant_pending_files": {"tenant"},
    "icepack_tenant_pending_bytes": {"tenant"},
    "icepack_tenant_tables_due": {"tenant"},
    "icepack_tenant_runs_in_flight": {"tenant"},
    "icepack_tenant_tables_failing": {"tenant"},
    "icepack_runs_started_total": {"table", "tenant", "kind"},
    "icepack_runs_succeeded_total": {"table", "tenant", "kind"},
    "icepack_runs_failed_total": {"table", "tenant", "kind", "class"},
    "icepack_maintenance_failures_total": {"table", "tenant", "class"},
    "icepack_run_duration_seconds": {"outcome"},  # histogram
    "icepack_notifications_sent_total": {"sink"},
    "icepack_notification_failures_total": {"sink"},
    "icepack_notifications_dropped_total": {"sink"},
    "icepack_engine_up": {"engine"},
    "icepack_engine_probe_seconds": {"engine"},
    "icepack_state_commits_total": set(),
    "icepack_intake_step_duration_seconds": {"step"},  # histogram
    "icepack_state_writable": set(),
    "icepack_state_recoveries_total": set(),
    "icepack_accumulator_restarts_total": set(),
    "icepack_accumulators_down": set(),
    "icepack_accumulators_live": set(),
    # The standard process metrics (Linux).
    "process_cpu_seconds_total": set(),
    "process_resident_memory_bytes": set(),
    "process_virtual_memory_bytes": set(),
    "process_threads": set(),
    "process_open_fds": set(),
    "process_max_fds": set(),
    "process_start_time_seconds": set(),
}
HISTOGRAMS = {"icepack_run_duration_seconds", "icepack_intake_step_duration_seconds"}
# Exported only once the engine's first probe has ended, which a scrape right after start-up may
# precede: not required of the binary.
AFTER_FIRST_PROBE = {"icepack_engine_up", "icepack_engine_probe_seconds"}
# Labels Prometheus adds at scrape time.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2", "le"}


def series_names() -> dict[str, set[str]]:
    out = {}
    for name, labels in METRICS.items():
        if name in HISTOGRAMS:
            out[name + "_bucket"] = labels | {"le"}
            out[name + "_sum"] = labels
            out[name + "_count"] = labels
        else:
            out[name] = labels
    return out


SERIES = series_names()
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def references(expr: str) -> tuple[list[str], list[tuple[str, set[str]]], list[str]]:
    """Metric names used in a PromQL expression, (metric, labels matched) pairs, and labels used
    in by/without/on/ignoring clauses."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)           # string literals
    e = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "1", e)    # Grafana variables
    e = re.sub(r"\[[^\]]*\]", "", e)                         # range selectors
    grouping: list[str] = []
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        grouping += [g.strip() for g in m.group(2).split(",") if g.strip()]
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    matchers: list[tuple[str, set[str]]] = []
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}", e):
        labels = {lm.group(1) for lm in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)", m.group(2))}
        matchers.append((m.group(1) or "", labels))
    e = re.sub(r"\{[^}]*\}", " ", e)
    names = []
    for m in IDENT.finditer(e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function
        if word.lower() in KEYWORDS or re.fullmatch(r"\d", word[0]):
            continue
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # part of a number like 1e3
        names.append(word)
    return names, matchers, grouping


def check_expr(where: str, expr: str, errors: list[str], used: set[str]) -> None:
    names, matchers, grouping = references(expr)
    if not names:
        errors.append(f"{where}: `{expr}` references no metric")
    for name in names:
        if name not in SERIES:
            errors.append(f"{where}: `{name}` is not an icepack metric")
        else:
            used.add(name)
    known_labels = set().union(*(SERIES[n] for n in names if n in SERIES)) | TARGET_LABELS
    for metric, labels in matchers:
        if metric and metric not in SERIES:
            continue  # already reported
        allowed = (SERIES[metric] | TARGET_LABELS) if metric else known_labels
        for label in labels - {"__name__"}:
            if label not in allowed:
                errors.append(f"{where}: label `{label}` is not a label of {metric or names}")
    for label in grouping:
        if label not in known_labels:
            errors.append(f"{where}: grouping label `{label}` is not a label of {names}")


def exported_metrics(binary: str) -> tuple[dict[str, str], str]:
    """Starts `icepack run` on loopback, returns {metric: type} from /metrics and the log tail."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "icepack.toml"
        cfg.write_text(f"""
[service]
state_dir = "{d}/state"
http_listen = "127.0.0.1:{port}"
[sqs]
queue_url = "http://127.0.0.1:9/000000000000/none"
endpoint_url = "http://127.0.0.1:9"
wait_time_seconds = 1
[spark]
runner = "process"
[[tables]]
table = "demo.events"
bucket = "lakehouse-data"
prefix = "warehouse/demo/events/"
""")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ICEPACK_"))}
        env.update(AWS_ACCESS_KEY_ID="icepack-check", AWS_SECRET_ACCESS_KEY="icepack-check",
                   AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", RUST_LOG="warn")
        log = Path(d) / "log"
        with open(log, "w") as logf:
            proc = subprocess.Popen([binary, "run", "--config", str(cfg)], stdout=logf, stderr=logf, env=env)
            text = ""
            try:
                deadline = time.time() + 20
                while time.time() < deadline and proc.poll() is None:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                            text = r.read().decode()
                        break
                    except OSError:
                        time.sleep(0.3)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        types = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                # OpenMetrics names a counter's family without the `_total` its samples carry.
                if kind == "counter" and not name.endswith("_total"):
                    name += "_total"
                types[name] = kind
        return types, log.read_text()[-2000:]


def main(argv: list[str]) -> int:
    binary = None
    if "--binary" in argv:
        i = argv.index("--binary")
        if i + 1 >= len(argv):
            print("--binary needs a path", file=sys.stderr)
            return 2
        binary = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) not in (2, 3):
        print(__doc__.strip())
        return 2
    path = Path(argv[1])
    errors: list[str] = []
    warnings: list[str] = []
    try:
        dash = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"[validate-dashboard] FAIL {path}: {e}", file=sys.stderr)
        return 1
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in dash:
            errors.append(f"dashboard: missing `{key}`")
    if int(dash.get("schemaVersion", 0)) < 36:
        errors.append(f"dashboard: schemaVersion {dash.get('schemaVersion')} < 36")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds_var = [n for n, v in variables.items() if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if not ds_var:
        errors.append("templating: no Prometheus data-source variable")
    ds_ref = "${%s}" % ds_var[0] if ds_var else None
    used: set[str] = set()
    n_exprs = 0
    for name, var in variables.items():
        if var.get("type") == "query":
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_]\w*)\s*\)\s*", q or "")
            if not m:
                errors.append(f"templating.{name}: query `{q}` is not label_values(metric, label)")
                continue
            check_expr(f"templating.{name}", m.group(1), errors, used)
            names, _, _ = references(m.group(1))
            if names and names[0] in SERIES and m.group(2) not in SERIES[names[0]]:
                errors.append(f"templating.{name}: {names[0]} has no label `{m.group(2)}`")
            n_exprs += 1
            if (var.get("datasource") or {}).get("uid") != ds_ref:
                errors.append(f"templating.{name}: data source is not {ds_ref}")

    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))

    ids: set = set()
    n_panels = 0
    titles = []
    for p in walk(dash.get("panels", [])):
        pid, title = p.get("id"), p.get("title", "?")
        if pid in ids:
            errors.append(f"panel {title!r}: duplicate id {pid}")
        ids.add(pid)
        if "gridPos" not in p:
            errors.append(f"panel {title!r}: no gridPos")
        if p.get("type") == "row":
            continue
        n_panels += 1
        titles.append(title)
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"panel {title!r}: no queries")
        if (p.get("datasource") or {}).get("uid") != ds_ref:
            errors.append(f"panel {title!r}: data source is not {ds_ref}")
        for t in targets:
            expr = t.get("expr")
            if not expr:
                errors.append(f"panel {title!r} query {t.get('refId')}: no expr")
                continue
            if (t.get("datasource") or {}).get("uid", ds_ref) != ds_ref:
                errors.append(f"panel {title!r} query {t.get('refId')}: data source is not {ds_ref}")
            n_exprs += 1
            check_expr(f"panel {title!r} query {t.get('refId')}", expr, errors, used)

    if len(argv) == 3:
        # The README's metric paragraph: from a line starting with "Metrics:" to the next blank line.
        m = re.search(r"^Metrics:.*?(?=\n\s*\n)", Path(argv[2]).read_text(), re.MULTILINE | re.DOTALL)
        readme = m.group(0) if m else ""
        if not m:
            warnings.append(f"{argv[2]} has no paragraph starting with `Metrics:`: names not cross-checked")
        documented = set(re.findall(r"\b(?:icepack|process)_[a-z_]+[a-z]\b", readme))
        listed = set(METRICS)
        for d in sorted(documented - listed):
            if not any(d.startswith(n) and d[len(n):] in ("_bucket", "_sum", "_count") for n in HISTOGRAMS):
                warnings.append(f"{argv[2]} documents `{d}`, which this checker's list lacks")
        for m in sorted(listed - documented):
            if "..._" + "_".join(m.split("_")[-2:]) in readme:
                continue  # abbreviated there, e.g. `..._deleted_total`
            warnings.append(f"`{m}` is in this checker's list but not in {argv[2]}")

    if binary:
        types, log_tail = exported_metrics(binary)
        if not types:
            errors.append(f"{binary} run: /metrics did not answer; log:\n{log_tail}")
        else:
            missing = sorted(set(METRICS) - set(types) - AFTER_FIRST_PROBE)
            extra = sorted(set(types) - set(METRICS))
            for m in missing:
                errors.append(f"{binary} does not export `{m}` (the dashboard queries it)")
            for m in extra:
                warnings.append(f"{binary} exports `{m}`, which this checker's list lacks")
            for h in HISTOGRAMS:
                if h in types and types[h] != "histogram":
                    errors.append(f"{binary}: `{h}` is a {types[h]}, not a histogram")
            if not missing:
                print(f"[validate-dashboard] ok   {binary} run exports all {len(METRICS)} metrics of the list "
                      f"({len(types)} exported)")

    unused = sorted(n for n in SERIES if n not in used and not any(
        n == h + s for h in HISTOGRAMS for s in ("_sum", "_count")))
    for w in warnings:
        print(f"[validate-dashboard] warn {w}")
    if unused:
        print(f"[validate-dashboard] note metrics no panel shows: {', '.join(unused)}")
    for e in errors:
        print(f"[validate-dashboard] FAIL {e}", file=sys.stderr)
    if errors:
        print(f"[validate-dashboard] {path}: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    print(f"[validate-dashboard] ok   {path}: JSON parses, schemaVersion {dash['schemaVersion']}, "
          f"{n_panels} panels, {n_exprs} PromQL expressions use only icepack metrics "
          f"({len(used)} of {len(SERIES)} series) and their labels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
