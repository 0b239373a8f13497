#!/usr/bin/env python3
"""Static validation of icepack's docker-compose demo, without Docker.

    python3 deploy/check/validate-compose.py deploy/docker-compose.yml [PATH_TO_ICEPACK_BINARY]

Checks (each failure is one line naming the service and key; exit 1 when any fails):
  * the file parses as YAML (anchors and merge keys included) and has known top-level keys;
  * every service has an image or a build; build contexts, Dockerfiles and every COPY/ADD source
    of those Dockerfiles exist (relative to the context); `COPY --from=` names a stage;
  * depends_on targets exist, conditions are valid, `service_healthy` targets define a
    healthcheck, no dependency cycle, no service depends on one that only runs under a profile
    it does not share;
  * named volumes and networks are declared; relative bind-mount sources exist in the repository;
  * published host ports are unique;
  * environment values that are http(s) URLs point at a service of the file (or localhost);
  * the icepack configuration mounted into the icepack services is consistent with the file
    (queue endpoint, catalog and S3 hosts are services; [spark] network is a declared network
    name; [spark] image is built by a service; bridge listen port matches what MinIO calls)
    and, when a binary is given, passes `icepack check-config`.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from pathlib import Path

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("validate-compose: PyYAML is needed (apt-get install python3-yaml, or pip install pyyaml)")
try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

TOP_LEVEL = {"name", "version", "services", "volumes", "networks", "configs", "secrets", "include"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
ALLOWED_ABSOLUTE_BINDS = {"/var/run/docker.sock"}
INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


class Checker:
    def __init__(self, compose_path: Path, binary: str | None):
        self.path = compose_path
        self.base = compose_path.parent
        self.binary = binary
        self.errors: list[str] = []
        self.checked: list[str] = []

    # ------------------------------------------------------------------ helpers
    def error(self, msg: str) -> None:
        self.errors.append(msg)

    def ok(self, msg: str) -> None:
        self.checked.append(msg)

    @staticmethod
    def interpolate(value):
        """Compose-style ${VAR:-default} with the defaults (the environment is not consulted:
        the check is about the file as shipped)."""
        if not isinstance(value, str):
            return value

        def repl(m: re.Match) -> str:
            if m.group(4):
                return ""
            op, default = m.group(2), m.group(3)
            if op in (":-", "-"):
                return default or ""
            return ""

        return INTERP.sub(repl, value.replace("$$", "\0")).replace("\0", "$")

    def rel(self, p: Path) -> str:
        try:
            return str(p.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(p)

    # ------------------------------------------------------------------ load
    def load(self) -> dict | None:
        try:
            text = self.path.read_text()
        except OSError as e:
            self.error(f"{self.path}: cannot read: {e}")
            return None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            self.error(f"{self.path}: not valid YAML: {e}")
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
            self.error(f"{self.path}: no `services` mapping")
            return None
        for key in doc:
            if key not in TOP_LEVEL and not str(key).startswith("x-"):
                self.error(f"top level: unknown key `{key}`")
        self.ok(f"YAML parses: {len(doc['services'])} services")
        return doc

    # ------------------------------------------------------------------ checks
    def check_services(self, doc: dict) -> None:
        services: dict = doc["services"]
        volumes = set((doc.get("volumes") or {}).keys())
        networks = set((doc.get("networks") or {}).keys())
        host_ports: dict[str, str] = {}
        n_binds = 0
        for name, svc in services.items():
            if not isinstance(svc, dict):
                self.error(f"services.{name}: not a mapping")
                continue
            if "image" not in svc and "build" not in svc:
                self.error(f"services.{name}: needs `image` or `build`")
            if "build" in svc:
                self.check_build(name, svc["build"])
            # networks
            svc_nets = svc.get("networks") or []
            for net in (svc_nets.keys() if isinstance(svc_nets, dict) else svc_nets):
                if net not in networks:
                    self.error(f"services.{name}.networks: `{net}` is not declared under top-level networks")
            # volumes
            for vol in svc.get("volumes") or []:
                n_binds += self.check_volume(name, vol, volumes)
            # ports
            for port in svc.get("ports") or []:
                published = self.published_port(port)
                if published is None:
                    continue
                if published in host_ports:
                    self.error(f"services.{name}.ports: host port {published} already published by {host_ports[published]}")
                else:
                    host_ports[published] = name
            # healthcheck format
            hc = svc.get("healthcheck")
            if hc is not None:
                test = hc.get("test") if isinstance(hc, dict) else None
                if isinstance(test, list):
                    if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
                        self.error(f"services.{name}.healthcheck.test: must start with CMD, CMD-SHELL or NONE")
                elif not isinstance(test, str) and not (isinstance(hc, dict) and hc.get("disable")):
                    self.error(f"services.{name}.healthcheck.test: missing")
            # environment URLs point at services
            for key, value in self.environment(svc).items():
                self.check_url(f"services.{name}.environment.{key}", value, services)
        self.ok(f"volumes and networks referenced by services are declared; {n_binds} bind mounts exist")
        self.ok(f"published host ports unique: {', '.join(sorted(host_ports, key=int))}")

    def environment(self, svc: dict) -> dict:
        env = svc.get("environment") or {}
        if isinstance(env, list):
            out = {}
            for item in env:
                k, _, v = str(item).partition("=")
                out[k] = v
            env = out
        return {k: self.interpolate(v) for k, v in env.items()}

    def check_url(self, where: str, value, services: dict) -> None:
        if not isinstance(value, str) or not re.match(r"^https?://", value):
            return
        host = urllib.parse.urlsplit(value).hostname or ""
        if host not in services and host not in ("localhost", "127.0.0.1") and "." not in host:
            self.error(f"{where}: {value} names host `{host}`, which is no service of the file")

    def published_port(self, port) -> str | None:
        if isinstance(port, dict):
            p = port.get("published")
            return str(self.interpolate(p)) if p is not None else None
        spec = str(self.interpolate(port)).split("/")[0]
        parts = spec.split(":")
        if len(parts) == 1:
            return None  # container port only: Docker picks a random host port
        return parts[-2]

    def check_volume(self, name: str, vol, volumes: set) -> int:
        if isinstance(vol, dict):
            vtype, source = vol.get("type"), vol.get("source")
        else:
            parts = str(self.interpolate(vol)).split(":")
            source = parts[0] if len(parts) > 1 else None
            vtype = "bind" if source and (source.startswith((".", "/", "~"))) else "volume"
        if not source:
            return 0  # anonymous volume
        if vtype == "volume":
            if source not in volumes:
                self.error(f"services.{name}.volumes: named volume `{source}` is not declared under top-level volumes")
            return 0
        if source.startswith("/"):
            if source not in ALLOWED_ABSOLUTE_BINDS:
                self.error(f"services.{name}.volumes: absolute host path {source} (only {sorted(ALLOWED_ABSOLUTE_BINDS)} are expected)")
            return 0
        path = (self.base / source).resolve()
        if not path.exists():
            self.error(f"services.{name}.volumes: bind source {source} does not exist ({self.rel(path)})")
        return 1

    def check_build(self, name: str, build) -> None:
        if isinstance(build, str):
            build = {"context": build}
        context = (self.base / self.interpolate(build.get("context", "."))).resolve()
        if not context.is_dir():
            self.error(f"services.{name}.build.context: {self.rel(context)} is not a directory")
            return
        dockerfile = context / self.interpolate(build.get("dockerfile", "Dockerfile"))
        if not dockerfile.is_file():
            self.error(f"services.{name}.build.dockerfile: {self.rel(dockerfile)} does not exist")
            return
        n = self.check_dockerfile(f"services.{name}.build", dockerfile, context)
        self.ok(f"services.{name}: build context {self.rel(context)}, {self.rel(dockerfile)} ({n} COPY/ADD sources exist)")

    def check_dockerfile(self, where: str, dockerfile: Path, context: Path) -> int:
        # Join continuation lines, drop comments.
        lines, buf = [], ""
        for raw in dockerfile.read_text().splitlines():
            s = raw.strip()
            if not buf and (not s or s.startswith("#")):
                continue
            if s.endswith("\\"):
                buf += s[:-1] + " "
                continue
            buf += s
            lines.append(buf)
            buf = ""
        stages, n_sources, saw_from = set(), 0, False
        for line in lines:
            instr, _, rest = line.partition(" ")
            instr = instr.upper()
            if instr == "FROM":
                saw_from = True
                m = re.search(r"\s+AS\s+(\S+)\s*$", rest, re.IGNORECASE)
                if m:
                    stages.add(m.group(1).lower())
            elif instr in ("COPY", "ADD"):
                try:
                    words = shlex.split(rest)
                except ValueError as e:
                    self.error(f"{where}: {dockerfile.name}: cannot parse `{line}`: {e}")
                    continue
                flags = [w for w in words if w.startswith("--")]
                args = [w for w in words if not w.startswith("--")]
                if args and args[0].startswith("["):  # JSON form
                    continue
                from_flag = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
                if from_flag is not None:
                    if from_flag.lower() not in stages and not re.match(r"^[\w./-]+:[\w.-]+$", from_flag):
                        self.error(f"{where}: {dockerfile.name}: COPY --from={from_flag} names no earlier stage")
                    continue
                for src in args[:-1]:
                    if re.match(r"^https?://", src) or "$" in src:
                        continue  # remote ADD, or a build-arg path
                    if not list(context.glob(src)) and not (context / src).exists():
                        self.error(f"{where}: {dockerfile.name}: {instr} source `{src}` does not exist in context {self.rel(context)}")
                    else:
                        n_sources += 1
        if not saw_from:
            self.error(f"{where}: {dockerfile.name}: no FROM")
        return n_sources

    def check_dependencies(self, doc: dict) -> None:
        services: dict = doc["services"]
        graph: dict[str, list[str]] = {}
        n = 0
        for name, svc in services.items():
            deps = svc.get("depends_on") or {}
            if isinstance(deps, list):
                deps = {d: {"condition": "service_started"} for d in deps}
            graph[name] = list(deps)
            my_profiles = set(svc.get("profiles") or [])
            for dep, spec in deps.items():
                n += 1
                if dep not in services:
                    self.error(f"services.{name}.depends_on: `{dep}` is no service of the file")
                    continue
                cond = (spec or {}).get("condition", "service_started")
                if cond not in CONDITIONS:
                    self.error(f"services.{name}.depends_on.{dep}: unknown condition `{cond}`")
                target = services[dep]
                if cond == "service_healthy" and not target.get("healthcheck"):
                    self.error(f"services.{name}.depends_on.{dep}: service_healthy, but {dep} defines no healthcheck")
                if cond == "service_completed_successfully" and target.get("restart") not in (None, "no"):
                    self.error(f"services.{name}.depends_on.{dep}: waits for completion, but {dep} restarts ({target.get('restart')})")
                dep_profiles = set(target.get("profiles") or [])
                if dep_profiles and not (my_profiles and my_profiles <= dep_profiles):
                    self.error(f"services.{name}.depends_on.{dep}: {dep} only runs with profiles {sorted(dep_profiles)}")
        # cycles
        state: dict[str, int] = {}

        def visit(node: str, stack: list[str]) -> None:
            state[node] = 1
            for nxt in graph.get(node, []):
                if nxt not in graph:
                    continue
                if state.get(nxt) == 1:
                    cycle = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                    self.error(f"depends_on cycle: {' -> '.join(cycle)}")
                elif state.get(nxt) is None:
                    visit(nxt, stack + [nxt])
            state[node] = 2

        for node in graph:
            if state.get(node) is None:
                visit(node, [node])
        self.ok(f"{n} depends_on references exist, conditions valid, no cycle")

    # ------------------------------------------------------------------ icepack configuration
    def icepack_configs(self, doc: dict) -> dict[Path, list[str]]:
        """Host paths of icepack configurations mounted into services that run the icepack image."""
        found: dict[Path, list[str]] = {}
        for name, svc in doc["services"].items():
            build = svc.get("build")
            dockerfile = (build or {}).get("dockerfile", "") if isinstance(build, dict) else ""
            image = str(svc.get("image", ""))
            if not (dockerfile.endswith("deploy/Dockerfile") or image.startswith("icepack:")):
                continue
            command = svc.get("command") or []
            command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
            target = None
            if "--config" in command and command.index("--config") + 1 < len(command):
                target = command[command.index("--config") + 1]
            target = target or self.environment(svc).get("ICEPACK_CONFIG") or "/etc/icepack/icepack.toml"
            for vol in svc.get("volumes") or []:
                if isinstance(vol, str):
                    parts = self.interpolate(vol).split(":")
                    if len(parts) >= 2 and parts[1] == target and parts[0].startswith("."):
                        found.setdefault((self.base / parts[0]).resolve(), []).append(name)
            if not any(name in v for v in found.values()):
                self.error(f"services.{name}: runs icepack with --config {target}, but no bind mount provides it")
        return found

    def check_icepack_config(self, doc: dict) -> None:
        services: dict = doc["services"]
        configs = self.icepack_configs(doc)
        for path, users in configs.items():
            label = f"{self.rel(path)} (used by {', '.join(users)})"
            if self.binary:
                proc = subprocess.run([self.binary, "check-config", "--config", str(path)],
                                      capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
                if proc.returncode != 0:
                    self.error(f"{label}: icepack check-config failed: {(proc.stderr or proc.stdout).strip()}")
                else:
                    self.ok(f"{label}: icepack check-config: {proc.stdout.strip() or 'valid'}")
            if tomllib is None:
                continue
            try:
                cfg = tomllib.loads(path.read_text())
            except Exception as e:  # noqa: BLE001
                self.error(f"{label}: not valid TOML: {e}")
                continue
            n = 0
            sqs = cfg.get("sqs", {})
            for key in ("endpoint_url", "queue_url"):
                if sqs.get(key):
                    n += 1
                    self.check_url(f"{label}: sqs.{key}", sqs[key], services)
            for cname, cat in (cfg.get("catalogs") or {}).items():
                for key in ("uri", "s3_endpoint"):
                    if cat.get(key):
                        n += 1
                        self.check_url(f"{label}: catalogs.{cname}.{key}", cat[key], services)
            service = cfg.get("service", {})
            listen = service.get("http_listen", "127.0.0.1:9464")
            if listen.startswith("127.") or listen.startswith("[::1]"):
                self.error(f"{label}: service.http_listen = {listen} is loopback: unreachable from other containers")
            state_dir = str(service.get("state_dir", ""))
            if "icepack" in users and not state_dir.startswith("/var/lib/icepack"):
                self.error(f"{label}: service.state_dir = {state_dir} is not on the /var/lib/icepack volume")
            spark = cfg.get("spark", {})
            if spark.get("runner", "docker") == "docker":
                net = spark.get("network", "")
                declared = {(v or {}).get("name", k) for k, v in (doc.get("networks") or {}).items()}
                if net and net not in declared and net not in ("host", "bridge"):
                    self.error(f"{label}: spark.network = {net} is not a network name of the file ({sorted(declared)})")
                image = spark.get("image", "")
                built = {str(s.get("image")) for s in services.values() if s.get("build")}
                if image and image not in built:
                    self.error(f"{label}: spark.image = {image} is not built by any service ({sorted(built)})")
                if spark.get("packages", ["default"]) != []:
                    self.error(f"{label}: spark.packages should be [] (the demo image bakes the jars)")
                mounts_socket = any("/var/run/docker.sock" in str(v) for u in users
                                    for v in services[u].get("volumes") or [] if u == "icepack")
                if "icepack" in users and not mounts_socket:
                    self.error(f"{label}: runner = docker, but the icepack service does not mount /var/run/docker.sock")
                n += 3
            self.ok(f"{label}: {n} cross-references with the compose file agree")
        # bridge port vs what MinIO calls
        for name, svc in services.items():
            command = [str(c) for c in (svc.get("command") or [])] if isinstance(svc.get("command"), list) else []
            if command[:1] == ["bridge"] and "--listen" in command:
                port = command[command.index("--listen") + 1].rsplit(":", 1)[-1]
                callers = [f"{s}.{k}" for s, other in services.items() for k, v in self.environment(other).items()
                           if isinstance(v, str) and v.startswith(f"http://{name}:")]
                for caller in callers:
                    s, k = caller.split(".", 1)
                    url = self.environment(services[s])[k]
                    if urllib.parse.urlsplit(url).port != int(port):
                        self.error(f"services.{s}.environment.{k}: {url} does not match {name} --listen port {port}")
                if not callers:
                    self.error(f"services.{name}: runs `bridge` but no service's environment points at it")
                else:
                    self.ok(f"services.{name}: bridge on port {port}, called by {', '.join(callers)}")

    def run(self) -> int:
        doc = self.load()
        if doc is not None:
            self.check_services(doc)
            self.check_dependencies(doc)
            self.check_icepack_config(doc)
            if not self.binary:
                self.ok("icepack check-config skipped (no binary given)")
        for line in self.checked:
            print(f"[validate-compose] ok   {line}")
        for line in self.errors:
            print(f"[validate-compose] FAIL {line}", file=sys.stderr)
        if self.errors:
            print(f"[validate-compose] {self.path}: {len(self.errors)} problem(s)", file=sys.stderr)
            return 1
        print(f"[validate-compose] {self.path}: valid")
        return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help") or len(argv) > 3:
        print(__doc__.strip())
        return 2 if len(argv) < 2 or len(argv) > 3 else 0
    binary = argv[2] if len(argv) == 3 else None
    if binary and not os.access(binary, os.X_OK):
        print(f"validate-compose: {binary} is not an executable", file=sys.stderr)
        return 2
    return Checker(Path(argv[1]), binary).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
