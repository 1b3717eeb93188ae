"""docker-compose.yml against the Compose specification, and the deployment rules it encodes.

No container runtime is reachable here, so ``docker compose config`` cannot run. This test
does what it does before validating: YAML with merge keys, then ``${VAR}`` interpolation from
an env file (``${VAR:-default}``, ``${VAR:?error}``, ``$$``), then the Compose spec, checked by
the ``compose-spec`` package (a strict parser of the whole specification: an unknown key or a
wrong type is an error). If ``DPSYN_DOCKER_COMPOSE`` names a docker-compose executable (the
PyPI ``docker-compose``, in a venv of its own: it needs PyYAML < 6), its ``config`` runs too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)")
FILLED = {"POSTGRES_PASSWORD": "0123456789abcdef", "DPSYN_BOOTSTRAP_API_KEY": "k" * 40}


class MissingVariableError(Exception):
    pass


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation of every string in ``value``."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3) or ""
        current = env.get(name)
        unset_or_empty = current is None or ((operator or "").startswith(":") and current == "")
        if operator in (":-", "-"):
            return argument if unset_or_empty else current
        if operator in (":?", "?"):
            if unset_or_empty:
                raise MissingVariableError(f"{name}: {argument}")
            return current
        return current or ""

    return VARIABLE.sub(replace, value)


def variables(text: str) -> set[str]:
    return {m.group(1) or m.group(4) for m in VARIABLE.finditer(text) if m.group(0) != "$$"}


def load(env: dict[str, str]) -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()), env)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load({**read_env_file(ENV_EXAMPLE), **FILLED})


def test_the_file_is_valid_under_the_compose_specification(compose):
    from compose_spec import PyCompose

    parsed = PyCompose.from_json(json.dumps(compose))
    assert set(parsed.service_names()) == {
        "postgres", "redis", "migrate", "api", "worker", "vllm", "worker-gpu",
    }  # fmt: skip
    broken = json.loads(json.dumps(compose))
    broken["services"]["api"]["helthcheck"] = {"test": ["CMD", "true"]}
    with pytest.raises(ValueError, match="helthcheck"):  # the checker does reject mistakes
        PyCompose.from_json(json.dumps(broken))


def test_the_postgres_password_is_required_and_no_secret_is_in_the_file():
    with pytest.raises(MissingVariableError, match="POSTGRES_PASSWORD"):
        load(read_env_file(ENV_EXAMPLE))  # as shipped: empty, so compose refuses to start
    raw = yaml.safe_load(COMPOSE.read_text())
    for service in raw["services"].values():
        environment = service.get("environment") or {}
        for name, value in environment.items():
            if re.search(r"PASSWORD|SECRET|TOKEN|_KEY$", name):
                assert str(value).startswith("${"), f"{name} is set in docker-compose.yml"
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_every_variable_is_documented_in_env_example():
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))
    assert variables(COMPOSE.read_text()) <= documented


def test_migrations_run_once_before_the_api_and_workers(compose):
    services = compose["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "DPSYN_MIGRATE_ON_START" not in services["migrate"]["environment"]
    for name in ("api", "worker", "worker-gpu"):
        needs = services[name]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully", name
        assert needs["redis"]["condition"] == "service_healthy", name
    assert services["api"]["environment"]["DPSYN_MIGRATE_ON_START"] == "false"
    for name, service in services.items():
        for target in service.get("depends_on", {}):
            assert target in services, f"{name} depends on unknown {target}"


def test_every_dpsyn_service_runs_the_one_image_in_production_on_postgres(compose):
    services = compose["services"]
    dpsyn = ["migrate", "api", "worker", "worker-gpu"]
    assert {services[name]["image"] for name in dpsyn} == {"dpsyn:local"}
    commands = {name: services[name]["command"] for name in dpsyn}
    assert commands == {
        "migrate": ["migrate"], "api": ["serve"], "worker": ["worker"], "worker-gpu": ["worker"],
    }  # fmt: skip
    for name in dpsyn:
        env = services[name]["environment"]
        assert env["DPSYN_ENVIRONMENT"] == "production"
        assert env["DPSYN_DATABASE_URL"] == (
            f"postgresql+psycopg://dpsyn:{FILLED['POSTGRES_PASSWORD']}@postgres:5432/dpsyn"
        )
        assert env["DPSYN_BROKER_URL"] == "redis://redis:6379/0"
        assert services[name]["env_file"] == ".env"


def test_stateful_services_keep_their_data_and_report_health(compose):
    services, volumes = compose["services"], compose["volumes"]
    for name, mount in (("postgres", "/var/lib/postgresql/data"), ("redis", "/data")):
        assert any(v.endswith(":" + mount) for v in services[name]["volumes"]), name
        assert "test" in services[name]["healthcheck"], name
    for service in services.values():
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in volumes


def test_workers_scale_and_the_api_is_published_on_loopback(compose):
    services = compose["services"]
    for name in ("worker", "worker-gpu"):
        assert "ports" not in services[name] and "container_name" not in services[name]
        assert "celery" in " ".join(services[name]["healthcheck"]["test"])
    assert services["api"]["ports"] == ["127.0.0.1:8000:8000"]


def test_the_gpu_profile_runs_vllm_on_a_reserved_gpu_for_its_workers(compose):
    services = compose["services"]
    vllm, worker = services["vllm"], services["worker-gpu"]
    assert vllm["profiles"] == ["gpu"] and worker["profiles"] == ["gpu"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert any(v.startswith("vllm-models:") for v in vllm["volumes"])
    served = vllm["command"][vllm["command"].index("--served-model-name") + 1]
    assert worker["environment"]["DPSYN_BACKEND"] == "vllm"
    assert worker["environment"]["DPSYN_VLLM_URL"] == "http://vllm:8000"
    assert worker["environment"]["DPSYN_MODEL"] == served
    assert worker["depends_on"]["vllm"]["condition"] == "service_healthy"
    for name, service in services.items():  # nothing else needs a GPU or the profile
        if name not in ("vllm", "worker-gpu"):
            assert "profiles" not in service and "deploy" not in service, name


def test_docker_compose_config_when_available(tmp_path):
    binary = os.environ.get("DPSYN_DOCKER_COMPOSE") or shutil.which("docker-compose")
    if not binary:
        pytest.skip("no docker-compose executable (set DPSYN_DOCKER_COMPOSE to one)")
    shutil.copy2(COMPOSE, tmp_path / "docker-compose.yml")
    env = read_env_file(ENV_EXAMPLE) | FILLED
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    for profile in ([], ["--profile", "gpu"]):
        done = subprocess.run(
            [binary, *profile, "config", "-q"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
