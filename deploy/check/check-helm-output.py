#!/usr/bin/env python3
"""Checks the output of `helm template` for the icepack chart.

    helm template t deploy/helm/icepack [-f VALUES] | \
        python3 deploy/check/check-helm-output.py --expect-kinds K1,K2,... [--binary ICEPACK] [--label NAME]

Fails (exit 1) when: a document does not parse as YAML or lacks apiVersion/kind/metadata.name;
the kinds differ from --expect-kinds; the Deployment is not 1 replica with strategy Recreate, has
no liveness probe on /healthz or readiness probe on /readyz, no prometheus.io scrape annotations,
does not run as a non-root user, does not mount the state volume and the ConfigMap, or
references a Secret without secretKeyRef; the Service does not expose port 9464; the
ConfigMap's icepack.toml does not parse as TOML, has the state outside the volume or a loopback
listener, or (with --binary) fails `icepack check-config`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect-kinds", required=True)
    ap.add_argument("--binary")
    ap.add_argument("--label", default="helm template")
    ap.add_argument("--http-port", type=int, default=9464)
    args = ap.parse_args()
    label = args.label
    errors: list[str] = []
    notes: list[str] = []

    try:
        docs = [d for d in yaml.safe_load_all(sys.stdin.read()) if d]
    except yaml.YAMLError as e:
        print(f"[helm-output] FAIL {label}: output is not YAML: {e}", file=sys.stderr)
        return 1
    kinds: dict[str, list[dict]] = {}
    for d in docs:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") \
                or not (d.get("metadata") or {}).get("name"):
            errors.append(f"a document lacks apiVersion/kind/metadata.name: {str(d)[:120]}")
            continue
        kinds.setdefault(d["kind"], []).append(d)
    expected = sorted(k for k in args.expect_kinds.split(",") if k)
    if sorted(kinds) != expected:
        errors.append(f"kinds {sorted(kinds)} != expected {expected}")

    # ------------------------------------------------------------- Deployment
    deps = kinds.get("Deployment", [])
    if len(deps) != 1:
        errors.append(f"{len(deps)} Deployments, expected 1")
    for dep in deps:
        spec = dep["spec"]
        if spec.get("replicas") != 1:
            errors.append(f"Deployment replicas = {spec.get('replicas')}, expected 1 (RocksDB is single-writer)")
        if (spec.get("strategy") or {}).get("type") != "Recreate":
            errors.append("Deployment strategy is not Recreate")
        pod = spec["template"]
        ann = pod["metadata"].get("annotations") or {}
        for k, v in (("prometheus.io/scrape", "true"), ("prometheus.io/port", str(args.http_port)),
                     ("prometheus.io/path", "/metrics")):
            if str(ann.get(k)) != v:
                errors.append(f"pod annotation {k} = {ann.get(k)!r}, expected {v!r}")
        if not ann.get("checksum/config"):
            errors.append("pod annotation checksum/config missing (config changes would not restart the pod)")
        psc = pod["spec"].get("securityContext") or {}
        if not psc.get("runAsNonRoot") or not psc.get("runAsUser"):
            errors.append("pod securityContext: runAsNonRoot/runAsUser not set")
        containers = pod["spec"]["containers"]
        c = containers[0]
        csc = c.get("securityContext") or {}
        if csc.get("allowPrivilegeEscalation") is not False:
            errors.append("container securityContext.allowPrivilegeEscalation is not false")
        probe = lambda name: ((c.get(name) or {}).get("httpGet") or {}).get("path")  # noqa: E731
        if probe("livenessProbe") != "/healthz":
            errors.append(f"livenessProbe path = {probe('livenessProbe')}, expected /healthz")
        if probe("readinessProbe") != "/readyz":
            errors.append(f"readinessProbe path = {probe('readinessProbe')}, expected /readyz")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        if ports.get("http") != args.http_port:
            errors.append(f"container port http = {ports.get('http')}, expected {args.http_port}")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        vols = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        if "/var/lib/icepack" not in mounts or "/etc/icepack" not in mounts:
            errors.append(f"volume mounts {sorted(mounts)} lack /var/lib/icepack or /etc/icepack")
        for path, name in mounts.items():
            if name not in vols:
                errors.append(f"volumeMount {path} names volume {name}, which is not declared")
        secret_envs = []
        for e in c.get("env") or []:
            if "value" in e and any(s in e["name"] for s in ("SECRET", "TOKEN", "WEBHOOK_URL", "PASSWORD")):
                errors.append(f"env {e['name']} has a literal value: secrets must come from secretKeyRef")
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                if not ref.get("name") or not ref.get("key"):
                    errors.append(f"env {e['name']}: secretKeyRef needs name and key")
                secret_envs.append(e["name"])
        cm_names = {d["metadata"]["name"] for d in kinds.get("ConfigMap", [])}
        cfg_vol = vols.get(mounts.get("/etc/icepack", ""), {})
        if (cfg_vol.get("configMap") or {}).get("name") not in cm_names:
            errors.append("the /etc/icepack volume does not reference the chart's ConfigMap")
        state_vol = vols.get(mounts.get("/var/lib/icepack", ""), {})
        claim = (state_vol.get("persistentVolumeClaim") or {}).get("claimName")
        pvcs = {d["metadata"]["name"] for d in kinds.get("PersistentVolumeClaim", [])}
        if claim and pvcs and claim not in pvcs:
            errors.append(f"state volume claims {claim}, which the chart does not create ({sorted(pvcs)})")
        sa = pod["spec"].get("serviceAccountName")
        sas = {d["metadata"]["name"]: d for d in kinds.get("ServiceAccount", [])}
        if sas and sa not in sas:
            errors.append(f"serviceAccountName {sa} is not the chart's ServiceAccount {sorted(sas)}")
        notes.append(f"Deployment: 1 replica, Recreate, probes /healthz + /readyz, scrape annotations, "
                     f"non-root {psc.get('runAsUser')}, secrets from secretKeyRef: {', '.join(secret_envs) or 'none'}; "
                     f"image {c.get('image')}")
        irsa = [n for n, d in sas.items() if "eks.amazonaws.com/role-arn" in ((d["metadata"].get("annotations")) or {})]
        if irsa:
            notes.append(f"ServiceAccount {irsa[0]}: IRSA role annotation")

    # ------------------------------------------------------------- Service
    svc_ports = [p.get("port") for s in kinds.get("Service", []) for p in s["spec"].get("ports", [])]
    if args.http_port not in svc_ports:
        errors.append(f"no Service exposes port {args.http_port} (ports {svc_ports})")

    # ------------------------------------------------------------- ConfigMap → icepack.toml
    for cm in kinds.get("ConfigMap", []):
        toml_text = (cm.get("data") or {}).get("icepack.toml")
        if toml_text is None:
            errors.append(f"ConfigMap {cm['metadata']['name']} has no icepack.toml")
            continue
        if tomllib is not None:
            try:
                cfg = tomllib.loads(toml_text)
            except Exception as e:  # noqa: BLE001
                errors.append(f"icepack.toml does not parse as TOML: {e}")
                continue
            svc = cfg.get("service", {})
            if not str(svc.get("state_dir", "")).startswith("/var/lib/icepack/"):
                errors.append(f"icepack.toml state_dir {svc.get('state_dir')} is not on the volume")
            if svc.get("http_listen") != f"0.0.0.0:{args.http_port}":
                errors.append(f"icepack.toml http_listen {svc.get('http_listen')} is not 0.0.0.0:{args.http_port}")
            notes.append(f"icepack.toml parses: {len(cfg.get('tables', []))} table(s), "
                         f"catalogs {sorted(cfg.get('catalogs', {}))}, runner {cfg.get('spark', {}).get('runner')}")
        if args.binary:
            with tempfile.TemporaryDirectory() as d:
                p = Path(d) / "icepack.toml"
                p.write_text(toml_text)
                proc = subprocess.run([args.binary, "check-config", "--config", str(p)], capture_output=True, text=True)
                if proc.returncode != 0:
                    errors.append(f"icepack check-config on the rendered icepack.toml failed: {(proc.stderr or proc.stdout).strip()}")
                else:
                    notes.append(f"icepack check-config on the rendered icepack.toml: {proc.stdout.strip().split(': ', 1)[-1]}")

    for n in notes:
        print(f"[helm-output] ok   {label}: {n}")
    for e in errors:
        print(f"[helm-output] FAIL {label}: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"[helm-output] ok   {label}: {len(docs)} documents, kinds {', '.join(expected)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
