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

from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)")
FILLED = {
    "POSTGRES_PASSWORD": "0123456789abcdef",
    "DPSYN_BOOTSTRAP_API_KEY": "k" * 40,
    "DPSYN_UI_SECRET": "u" * 40,
    "DPSYN_FINGERPRINT_KEY": "f" * 40,
}


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
        "postgres", "redis", "migrate", "api", "worker", "vllm", "worker-gpu", "vllm-cpu",
        "worker-cpu-engine",
    }  # fmt: skip
    broken = json.loads(json.dumps(compose))
    broken["services"]["api"]["helthcheck"] = {"test": ["CMD", "true"]}
    with pytest.raises(ValueError, match="helthcheck"):  # the checker does reject mistakes
        PyCompose.from_json(json.dumps(broken))


def test_the_postgres_password_and_ui_secret_are_required_and_no_secret_is_in_the_file():
    with pytest.raises(MissingVariableError, match="POSTGRES_PASSWORD"):
        load(read_env_file(ENV_EXAMPLE))  # as shipped: empty, so compose refuses to start
    without_ui_secret = {**read_env_file(ENV_EXAMPLE), **FILLED, "DPSYN_UI_SECRET": ""}
    with pytest.raises(MissingVariableError, match="DPSYN_UI_SECRET"):
        load(without_ui_secret)  # sessions must survive recreates and cross replicas
    without_key = {**read_env_file(ENV_EXAMPLE), **FILLED, "DPSYN_FINGERPRINT_KEY": ""}
    with pytest.raises(MissingVariableError, match="DPSYN_FINGERPRINT_KEY"):
        load(without_key)  # re-uploaded records must find their budget on every replica
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
    for name in ("api", "worker", "worker-gpu", "worker-cpu-engine"):
        needs = services[name]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully", name
        assert needs["redis"]["condition"] == "service_healthy", name
    assert services["api"]["environment"]["DPSYN_MIGRATE_ON_START"] == "false"
    for name, service in services.items():
        for target in service.get("depends_on", {}):
            assert target in services, f"{name} depends on unknown {target}"


def test_every_dpsyn_service_runs_the_one_image_in_production_on_postgres(compose):
    services = compose["services"]
    dpsyn = ["migrate", "api", "worker", "worker-gpu", "worker-cpu-engine"]
    assert {services[name]["image"] for name in dpsyn} == {"dpsyn:local"}
    commands = {name: services[name]["command"] for name in dpsyn}
    assert commands == {
        "migrate": ["migrate"], "api": ["serve"], "worker": ["worker"], "worker-gpu": ["worker"],
        "worker-cpu-engine": ["worker"],
    }  # fmt: skip
    for name in dpsyn:
        env = services[name]["environment"]
        assert env["DPSYN_ENVIRONMENT"] == "production"
        assert env["DPSYN_DATABASE_URL"] == (
            f"postgresql+psycopg://dpsyn:{FILLED['POSTGRES_PASSWORD']}@postgres:5432/dpsyn"
        )
        assert env["DPSYN_BROKER_URL"] == "redis://redis:6379/0"


def test_each_service_gets_only_its_own_secrets(compose):
    services = compose["services"]
    assert all("env_file" not in service for service in services.values())
    holders = {
        "POSTGRES_PASSWORD": {"postgres"},
        "DPSYN_BOOTSTRAP_API_KEY": {"migrate"},
        "DPSYN_UI_SECRET": {"api"},
        "DPSYN_FINGERPRINT_KEY": {"api"},
        "HF_TOKEN": {"vllm", "vllm-cpu"},
    }
    for secret, allowed in holders.items():
        has = {name for name, s in services.items() if secret in (s.get("environment") or {})}
        assert has == allowed, secret
    assert services["api"]["environment"]["DPSYN_UI_SECRET"] == FILLED["DPSYN_UI_SECRET"]
    password = FILLED["POSTGRES_PASSWORD"]  # inside the database URL: only dpsyn's own roles
    for name, service in services.items():
        text = json.dumps(service.get("environment") or {})
        if name in ("vllm", "vllm-cpu", "redis"):
            assert password not in text, name


def test_cpu_limits_cap_torch_threads(compose):
    services = compose["services"]
    for name in ("api", "worker", "worker-gpu", "worker-cpu-engine"):
        limit = float(services[name]["cpus"])
        threads = int(services[name]["environment"]["OMP_NUM_THREADS"])
        assert 1 <= threads <= max(1, limit), name
    assert float(services["worker"]["cpus"]) == 1.0  # DPSYN_WORKER_CPUS in .env.example


def _cpu_numbers(cpuset: str) -> set[int]:
    """The CPUs of a cpuset such as ``0-3`` or ``0,2,4-5``."""
    numbers: set[int] = set()
    for part in cpuset.split(","):
        first, _, last = part.partition("-")
        numbers.update(range(int(first), int(last or first) + 1))
    return numbers


@pytest.mark.parametrize("env", ["defaults", ".env.example"])
def test_every_service_starts_on_a_two_core_host(env):
    """Docker refuses a ``cpus`` above the host's core count and a cpuset naming a CPU the
    host lacks; this project's machine has 2 cores (the CPU engine asked for 4)."""
    values = FILLED if env == "defaults" else {**read_env_file(ENV_EXAMPLE), **FILLED}
    services = load(values)["services"]
    for name, service in services.items():
        if "cpus" in service:
            assert float(service["cpus"]) <= 2, name
        if "cpuset" in service:
            assert _cpu_numbers(str(service["cpuset"])) <= {0, 1}, name
    assert _cpu_numbers(services["vllm-cpu"]["cpuset"]) == {0, 1}  # room for the front end


def test_the_cpu_engine_s_threads_follow_its_cpuset():
    """vLLM's CPU build binds one OpenMP thread to each physical core of its affinity mask but
    one it keeps for its other processes. A ``cpus`` quota leaves that mask at the whole host
    (31 threads under a 4-CPU quota on 32 cores); a cpuset makes the mask the limit, so one
    setting, VLLM_CPUSET, sets both the cores and the threads."""
    engine = load({**FILLED, "VLLM_CPUSET": "4-7"})["services"]["vllm-cpu"]
    assert engine["cpuset"] == "4-7"
    assert "cpus" not in engine  # no quota beside the cpuset: the mask is the limit
    env = engine["environment"]
    assert env["VLLM_CPU_OMP_THREADS_BIND"] in ("auto", engine["cpuset"])
    if "OMP_NUM_THREADS" in env:  # a count must not contradict the set
        assert int(env["OMP_NUM_THREADS"]) <= len(_cpu_numbers(engine["cpuset"]))


def _stage_instructions(target: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of one Dockerfile stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", _dockerfile_stage(target))
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _folders_owned_by(user: str, runs: list[str]) -> set[str]:
    """Folders that ``install -d -o USER`` or ``chown [-R] USER[:GROUP]`` in ``runs`` give
    to ``user``."""
    owned: set[str] = set()
    for run in runs:
        for step in re.split(r"&&|;", run):
            words = step.split()
            if words[:2] == ["install", "-d"] and "-o" in words:
                if words[words.index("-o") + 1] == user:
                    owned.update(w for w in words[2:] if w.startswith("/"))
            elif words[:1] == ["chown"]:
                targets = [w for w in words[1:] if not w.startswith("-")]
                if targets and targets[0].split(":")[0] == user:
                    owned.update(targets[1:])
    return owned


def test_the_cpu_engine_s_caches_are_writable_by_its_user():
    """The engine runs as uid 10001; vLLM writes torch.compile's cache under VLLM_CACHE_ROOT
    (default ~/.cache/vllm) at every start, and the vllm-models volume is mounted under
    ~/.cache. A folder the image lacks is created by Docker as root's, and unwritable."""
    steps = _stage_instructions("engine-cpu")
    users = [args for word, args in steps if word == "USER"]
    assert users == ["10001:10001"]
    before_user = steps[: steps.index(("USER", users[0]))]
    runs = [args for word, args in before_user if word == "RUN"]
    assert any("--uid 10001" in run and "useradd" in run and " dpsyn" in run for run in runs)
    owned = _folders_owned_by("dpsyn", runs) | _folders_owned_by("10001", runs)
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for w, a in steps if w == "ENV")))
    home = env["HOME"]
    cache_root = env.get("VLLM_CACHE_ROOT", f"{home}/.cache/vllm")
    assert cache_root in owned, (cache_root, owned)
    assert f"{home}/.cache" in owned  # the parent of both
    compose = load(FILLED)["services"]["vllm-cpu"]
    for volume in compose["volumes"]:
        mount = volume.split(":")[1]
        assert mount in owned and mount.startswith(f"{home}/.cache/"), (mount, owned)
        if "HF_HOME" in env:
            assert env["HF_HOME"] == mount  # the hub's cache is the volume


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
    for name in ("worker", "worker-gpu", "worker-cpu-engine"):
        assert "ports" not in services[name] and "container_name" not in services[name]
        # Not Celery's ping, which a solo-pool worker cannot answer during a job
        # dpsyn-worker-health: `dpsyn worker-health` without loading the CLI (2 s of CPU)
        assert services[name]["healthcheck"]["test"] == [
            "CMD", "dpsyn-worker-health", "--max-age", "90"
        ]  # fmt: skip
        assert services[name]["environment"]["DPSYN_WORKER_ALIVE_FILE"]
    assert services["api"]["ports"] == ["127.0.0.1:8000:8000"]


def test_the_gpu_profile_runs_vllm_on_a_reserved_gpu_for_its_workers(compose):
    services = compose["services"]
    vllm, worker = services["vllm"], services["worker-gpu"]
    assert vllm["profiles"] == ["gpu"] and worker["profiles"] == ["gpu"]
    assert vllm["build"]["target"] == "engine-gpu"
    base = vllm["build"]["args"]["VLLM_IMAGE"]
    assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", base), base  # pinned, not latest
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert any(v.startswith("vllm-models:") for v in vllm["volumes"])
    _engine_and_its_workers(services, "vllm", "worker-gpu")
    for name, service in services.items():  # nothing else needs a GPU
        if name != "vllm":
            assert "deploy" not in service, name


def test_the_cpu_engine_profile_is_the_same_topology_on_vllm_cpu(compose):
    services = compose["services"]
    engine, worker = services["vllm-cpu"], services["worker-cpu-engine"]
    assert engine["profiles"] == ["cpu-engine"] and worker["profiles"] == ["cpu-engine"]
    assert engine["build"]["target"] == "engine-cpu"
    _engine_and_its_workers(services, "vllm-cpu", "worker-cpu-engine")
    profiled = {name for name, service in services.items() if "profiles" in service}
    assert profiled == {"vllm", "worker-gpu", "vllm-cpu", "worker-cpu-engine"}


def _engine_and_its_workers(services: dict[str, Any], engine: str, worker: str) -> None:
    """The engine runs scripts/vllm_serve.sh on a model needing no token; its workers ask
    for the name it serves, at its address, and wait until it is healthy."""
    image = _dockerfile_stage(services[engine]["build"]["target"])
    assert 'ENTRYPOINT ["bash", "/opt/dpsyn/vllm_serve.sh"]' in image
    assert "COPY scripts/vllm_serve.sh /opt/dpsyn/vllm_serve.sh" in image
    env = services[engine]["environment"]
    assert env["VLLM_MODEL"].startswith("/models/")  # packaged: no HF_TOKEN needed
    assert "COPY --from=build /opt/dpsyn-cache/models /models" in image
    served = env["VLLM_SERVED_NAME"]
    workers = services[worker]["environment"]
    assert workers["DPSYN_BACKEND"] == "vllm"
    assert workers["DPSYN_VLLM_URL"] == f"http://{engine}:8000"
    assert services[engine]["command"] == ["8000"]
    assert workers["DPSYN_MODEL"] == served
    assert services[worker]["depends_on"][engine]["condition"] == "service_healthy"
    assert services[engine]["healthcheck"]["start_period"] == "300s"


def _dockerfile_stage(target: str) -> str:
    """The text of one stage of the Dockerfile (FROM ... AS target up to the next FROM)."""
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(rf"^FROM \S+ AS {target}\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    assert match, target
    return match.group(1)


def test_docker_compose_config_when_available(tmp_path):
    binary = os.environ.get("DPSYN_DOCKER_COMPOSE") or shutil.which("docker-compose")
    if not binary:
        skip_or_fail(
            "no docker-compose executable: scripts/setup.sh installs Debian's docker-compose "
            "(or set DPSYN_DOCKER_COMPOSE to one)"
        )
    shutil.copy2(COMPOSE, tmp_path / "docker-compose.yml")
    env = read_env_file(ENV_EXAMPLE) | FILLED
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    for profile in ([], ["--profile", "gpu"], ["--profile", "cpu-engine"]):
        done = subprocess.run(
            [binary, *profile, "config", "-q"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
