"""The deployment files agree with the code: env names, ports, probes, entrypoint, image.

Pure file checks (no Docker, no Kubernetes, no helm): the compose file and the chart may
only set environment variables that `Settings.from_env` reads, on the ports it defaults
to; the Dockerfile's entrypoint is the installed `stream` command and its final stage is
slim and non-root; its base is pinned by digest and its Python packages come from the locks,
hash-checked. `make chart` renders and validates the chart itself.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
CHART = ROOT / "helm" / "context-stream"
TEMPLATES = CHART / "templates"

SETTING_NAME = re.compile(r"\b(?:STREAM|KAFKA|REDIS)_[A-Z0-9_]*[A-Z0-9]\b")
# Declarations of the worker's Prometheus metrics in stream/ (prometheus_client).
METRIC_DECLARATION = re.compile(r'\b(Counter|Gauge|Histogram|Summary)\(\s*"(\w+)"')
OUTCOMES = {"folded", "duplicate", "faulted", "dead_lettered"}


class _Recorder(Mapping[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _read_names() -> set[str]:
    recorder = _Recorder()
    Settings.from_env(recorder)
    return recorder.names


READ = _read_names()
DEFAULTS = Settings.from_env({})


# -- Dockerfile ----------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str


def _instructions(text: str) -> list[Instruction]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


def _stages() -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for instruction in _instructions(DOCKERFILE.read_text()):
        if instruction.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _final(keyword: str) -> list[str]:
    return [i.args for i in _stages()[-1] if i.keyword == keyword]


def _env(stage: list[Instruction]) -> dict[str, str]:
    env = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            for key, value in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)", instruction.args):
                env[key] = value
    return env


def test_dockerfile_is_multi_stage_on_slim_python_311() -> None:
    stages = _stages()
    assert len(stages) >= 2
    args = dict(
        re.findall(r"^ARG\s+(\w+)=(\S+)", DOCKERFILE.read_text(), flags=re.M),
    )
    for stage in stages:
        image = stage[0].args.split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image
    assert any("--from=builder" in i.args for i in stages[-1] if i.keyword == "COPY"), (
        "the final stage copies the built environment from the builder"
    )


def test_base_image_is_pinned_by_digest() -> None:
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", args["PYTHON_IMAGE"])
    for stage in _stages():
        assert stage[0].args.split()[0] == "${PYTHON_IMAGE}", "every stage starts from the pin"
    assert "docker buildx imagetools inspect python:3.11-slim-bookworm" in text, (
        "the Dockerfile says how to refresh the digest"
    )


def _commands() -> list[str]:
    """Every shell command of every RUN, split at ``&&``, ``||`` and ``;``."""
    runs = [i.args for stage in _stages() for i in stage if i.keyword == "RUN"]
    return [c.strip() for run in runs for c in re.split(r"&&|\|\||;", run) if c.strip()]


def test_python_packages_come_from_the_locks_hash_checked() -> None:
    pip = [c for c in _commands() if re.search(r"\bpip\s+(install|wheel|download)\b", c)]
    assert pip
    locks = set()
    for command in pip:
        words = command.split()
        if "-r" in words:
            assert "--require-hashes" in words, command
            locks.add(words[words.index("-r") + 1])
        elif "wheel" in words:  # the project's own wheel, from the build venv's setuptools
            assert {"--no-deps", "--no-build-isolation"} <= set(words), command
        else:  # the project's own wheel, built above
            assert {"--no-deps", "--no-index"} <= set(words), command
            assert all(w.startswith(("-", "/wheels/")) for w in words[words.index("install") + 1 :])
    assert locks == {"requirements.lock", "requirements-build.lock"}
    copied = {w for i in _stages()[0] if i.keyword == "COPY" for w in i.args.split()}
    for lock in locks:
        assert (ROOT / lock).is_file(), lock
        assert lock in copied, f"the builder stage copies {lock}"


def test_image_venv_is_the_runtime_lock_and_the_core_is_built_from_the_build_lock() -> None:
    runs = [i.args for i in _stages()[0] if i.keyword == "RUN"]
    (native,) = [r for r in runs if "stream.native build" in r]
    assert "--require-hashes -r requirements-build.lock" in native, (
        "mypyc runs with the locked mypy and orjson"
    )
    (image,) = [r for r in runs if "/opt/context-stream/bin/pip install" in r]
    assert "/opt/context-stream/bin/pip install --require-hashes -r requirements.lock" in image


def test_final_stage_has_no_build_tools() -> None:
    final = " ".join(i.args for i in _stages()[-1] if i.keyword == "RUN")
    for tool in ("gcc", "g++", "build-essential", "make", "apt-get install", "pip install"):
        assert tool not in final, f"the final stage installs {tool!r}"


def test_final_stage_runs_as_fixed_non_root_uid() -> None:
    (user,) = _final("USER")
    uid = user.split(":")[0]
    assert uid.isdigit(), "a numeric UID lets Kubernetes check runAsNonRoot"
    assert int(uid) > 0
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_the_installed_stream_command() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (entrypoint,) = _final("ENTRYPOINT")
    command = json.loads(entrypoint)
    assert len(command) == 1
    assert Path(command[0]).name in scripts
    assert scripts[Path(command[0]).name] == "stream.cli:main"
    assert json.loads(_final("CMD")[0]) == ["worker"]


def test_read_only_root_filesystem_is_enough() -> None:
    env = _env(_stages()[-1])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    (volume,) = _final("VOLUME")
    assert json.loads(volume) == [env["STREAM_STATE_DIR"]]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["stateDir"] == env["STREAM_STATE_DIR"]


def test_image_exposes_and_probes_the_metrics_port() -> None:
    port = DEFAULTS.metrics_port
    assert str(port) in _final("EXPOSE")[0].split()
    env = _env(_stages()[-1])
    assert env["STREAM_METRICS_PORT"] == str(port)
    (healthcheck,) = _final("HEALTHCHECK")
    assert "CMD" in healthcheck and '"python"' in healthcheck
    assert "http://127.0.0.1:{port}/livez" in healthcheck
    assert f"'STREAM_METRICS_PORT', '{port}'" in healthcheck


def test_dockerignore_keeps_the_context_small() -> None:
    lines = [
        line for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] not in "#"
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!stream/"} <= set(lines)


# -- docker-compose ------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _ours() -> dict[str, dict[str, Any]]:
    """Services running this project's image."""
    services = _compose()["services"]
    return {
        name: service
        for name, service in services.items()
        if service.get("build", {}).get("dockerfile") == "deploy/Dockerfile"
    }


def test_compose_has_kafka_redis_worker_gateway() -> None:
    services = _compose()["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "broker,controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    assert services["redis"]["image"].startswith("redis:")
    ours = _ours()
    assert {"worker", "gateway"} <= ours.keys()
    assert ours["worker"]["command"] == ["worker"]
    assert ours["gateway"]["command"] == ["serve"]
    for service in ours.values():
        assert (COMPOSE.parent / service["build"]["context"]).resolve() == ROOT


def test_compose_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in _compose()["services"].items():
        if "demo" in service.get("profiles", []):
            continue
        assert "healthcheck" in service, name
    for name in ("worker", "gateway"):
        depends = _compose()["services"][name]["depends_on"]
        assert depends["kafka"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"


def test_compose_env_names_are_settings() -> None:
    for name, service in _ours().items():
        unknown = set(service.get("environment", {})) - READ
        assert not unknown, f"{name} sets variables no setting reads: {sorted(unknown)}"


def test_compose_points_at_the_other_containers() -> None:
    kafka = _compose()["services"]["kafka"]["environment"]
    advertised = kafka["KAFKA_ADVERTISED_LISTENERS"]
    for name in ("worker", "gateway"):
        env = _ours()[name]["environment"]
        assert f"//{env['KAFKA_BOOTSTRAP_SERVERS']}" in advertised
        assert env["REDIS_URL"].startswith("redis://redis:6379/")


def test_compose_worker_ports_state_and_read_only_root() -> None:
    worker = _ours()["worker"]
    env = worker["environment"]
    port = DEFAULTS.metrics_port
    assert int(env.get("STREAM_METRICS_PORT", port)) == port
    assert f"{port}:{port}" in worker["ports"]
    assert f"127.0.0.1:{port}/livez" in " ".join(worker["healthcheck"]["test"])
    assert worker["read_only"] is True
    assert "/tmp" in worker["tmpfs"]
    mounts = {volume.split(":")[1] for volume in worker["volumes"]}
    assert env["STREAM_STATE_DIR"] in mounts


def test_compose_gateway_port_and_health() -> None:
    gateway = _ours()["gateway"]
    env = gateway["environment"]
    port = DEFAULTS.gateway_port
    assert int(env.get("STREAM_GATEWAY_PORT", port)) == port
    assert env["STREAM_GATEWAY_BIND"] == "0.0.0.0"
    assert f"{port}:{port}" in gateway["ports"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(gateway["healthcheck"]["test"])
    assert gateway["read_only"] is True


# -- Helm chart ----------------------------------------------------------------------------


def _chart_names() -> set[str]:
    """Every STREAM_*/KAFKA_*/REDIS_* variable the chart sets or its values mention."""
    names: set[str] = set()
    configmap = (TEMPLATES / "configmap.yaml").read_text()
    names |= set(re.findall(r"^\s+([A-Z][A-Z0-9_]+):", configmap, flags=re.M))
    for template in TEMPLATES.iterdir():
        names |= set(re.findall(r"-\s+name:\s+([A-Z][A-Z0-9_]+)\b", template.read_text()))
    names |= set(SETTING_NAME.findall((CHART / "values.yaml").read_text()))
    return {name for name in names if SETTING_NAME.fullmatch(name)}


CHART_NAMES = sorted(_chart_names())


def test_chart_sets_the_core_settings() -> None:
    assert {"KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", "STREAM_STATE_DIR", "STREAM_WORKER_ID"} <= set(
        CHART_NAMES
    )


@pytest.mark.parametrize("name", CHART_NAMES)
def test_chart_env_name_is_a_setting(name: str) -> None:
    assert name in READ, f"the chart sets {name}, which no setting reads"


def _values() -> dict[str, Any]:
    data = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_chart_ports_match_settings() -> None:
    values = _values()
    assert values["metrics"]["port"] == DEFAULTS.metrics_port
    assert values["metrics"]["bind"] == "0.0.0.0"
    assert values["gateway"]["port"] == DEFAULTS.gateway_port


def test_chart_probes_use_the_metrics_port() -> None:
    statefulset = (TEMPLATES / "statefulset.yaml").read_text()
    assert "containerPort: {{ .Values.metrics.port }}" in statefulset
    probes = re.findall(
        r"(startupProbe|livenessProbe|readinessProbe):\s+httpGet:\s+path: (\S+)\s+port: (\S+)",
        statefulset,
    )
    assert sorted(probes) == [
        ("livenessProbe", "/livez", "metrics"),
        ("readinessProbe", "/readyz", "metrics"),
        ("startupProbe", "/livez", "metrics"),
    ]
    gateway = (TEMPLATES / "gateway.yaml").read_text()
    assert re.findall(r"readinessProbe:\s+httpGet:\s+path: (\S+)\s+port: (\S+)", gateway) == [
        ("/healthz", "http")
    ]
    assert "containerPort: {{ $gw.port }}" in gateway


def test_chart_worker_id_comes_from_the_pod_name() -> None:
    statefulset = (TEMPLATES / "statefulset.yaml").read_text()
    assert re.search(
        r"name: STREAM_WORKER_ID\s+valueFrom:\s+fieldRef:\s+fieldPath: metadata.name", statefulset
    )
    assert "volumeClaimTemplates:" in statefulset
    assert "mountPath: {{ .Values.stateDir }}" in statefulset


def test_chart_restricted_security_context() -> None:
    values = _values()
    pod, container = values["podSecurityContext"], values["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}


def _exported_metrics() -> set[str]:
    """Series names the worker exposes, from the metric declarations in stream/."""
    suffixes = {
        "Counter": ("_total",),
        "Gauge": ("",),
        "Histogram": ("_bucket", "_count", "_sum"),
        "Summary": ("_count", "_sum", ""),
    }
    names = set()
    for path in (ROOT / "stream").rglob("*.py"):
        for kind, name in METRIC_DECLARATION.findall(path.read_text()):
            base = name.removesuffix("_total") if kind == "Counter" else name
            names |= {base + suffix for suffix in suffixes[kind]}
    return names


def _alert_exprs() -> str:
    rules = (TEMPLATES / "prometheusrule.yaml").read_text()
    return " ".join(re.findall(r"expr: ((?:\|-\n(?:\s{12}.*\n)+)|.*)", rules))


def test_alerts_use_exported_metrics() -> None:
    exported = _exported_metrics()
    assert "stream_events_total" in exported, "no metric declarations found in stream/"
    used = set(re.findall(r"\b(stream_[a-z_]+)", _alert_exprs()))
    assert used, "no alert expression found"
    assert used <= exported, f"alerts use series the worker does not export: {used - exported}"
    for outcome in re.findall(r'outcome="([^"]+)"', _alert_exprs()):
        assert outcome in OUTCOMES


def test_alerts_cover_what_operators_need() -> None:
    exprs = _alert_exprs()
    for series in (
        "stream_consumer_lag",
        "stream_sessions_faulted",
        'outcome="dead_lettered"',
        "stream_redis_retrying",
        "stream_ready",
    ):
        assert series in exprs, series


def _schema_gaps(values: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    if not isinstance(values, dict) or "properties" not in schema:
        return
    properties = schema["properties"]
    for key, value in values.items():
        if key not in properties:
            if schema.get("additionalProperties") is False:
                yield f"{path}{key}"
            continue
        yield from _schema_gaps(value, properties[key], f"{path}{key}.")


def test_values_schema_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert list(_schema_gaps(_values(), schema, "")) == []
    for path in sorted((CHART / "ci").glob("*-values.yaml")):
        assert list(_schema_gaps(yaml.safe_load(path.read_text()), schema, "")) == [], path.name


# Kubernetes objects passed through verbatim: their parent's comment documents them.
PASSTHROUGH = {
    "resources",
    "podSecurityContext",
    "securityContext",
    "updateStrategy",
    "topologySpread",
    "startup",
    "liveness",
    "readiness",
    "accessModes",
}


def test_every_value_is_documented() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    undocumented = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)(-\s+)?([A-Za-z][\w.-]*):", line)
        if not match or match.group(2):
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        passthrough = any(key in PASSTHROUGH for _, key in stack)
        stack.append((indent, match.group(3)))
        if passthrough:
            continue
        previous = lines[number - 1].strip() if number else ""
        if not previous.startswith("#"):
            undocumented.append(".".join(key for _, key in stack))
    assert undocumented == []


def test_ci_value_sets_exist() -> None:
    names = {path.name for path in (CHART / "ci").glob("*-values.yaml")}
    assert {
        "minimal-values.yaml",
        "production-values.yaml",
        "standbys-values.yaml",
        "gateway-values.yaml",
    } <= names
