# crossalign HTTP service: onnxruntime + the service, no torch.
#
#   docker build -t crossalign .
#   docker run --rm -p 5000:5000 crossalign            # serves every bundle in models/ (de-en, en-de)
#   docker run --rm -p 5000:5000 -v "$PWD/models:/app/models:ro" crossalign   # or your own bundles
#
# Without Docker Hub: deploy/container.sh builds it with podman on a Debian base made by
# mmdebstrap (PYTHON_IMAGE), runs it and checks that it translates (CI runs it).
# No "# syntax=" line: nothing here needs more than the builder's own Dockerfile frontend, and
# that line makes BuildKit fetch one from Docker Hub.
#
# The image installs exactly as the README (and docs/getting-started.md) does:
# ./install.sh --serve (a .venv with the [serve] extra). Settings are CROSSALIGN_* env vars
# (see service/settings.py).

# Any image with python3 (3.11 or newer) and its venv module; deploy/container.sh passes a
# Debian bookworm base of its own.
ARG PYTHON_IMAGE=python:3.11-slim

# ---------------------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# Package metadata and sources only: the models come in the runtime stage, so a new model
# does not reinstall the dependencies.
COPY pyproject.toml README.md install.sh ./
COPY data ./data
COPY seq2seq ./seq2seq
COPY export ./export
COPY service ./service
RUN ./install.sh --serve \
    && .venv/bin/python -c "import sys, service.app; assert 'torch' not in sys.modules" \
    && find /app -name __pycache__ -prune -exec rm -rf {} +

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    CROSSALIGN_HOST=0.0.0.0 \
    CROSSALIGN_PORT=5000 \
    CROSSALIGN_MODELS=/app/models
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin crossalign
WORKDIR /app
# The editable install points at /app, so the tree keeps its path.
COPY --from=build /app /app
COPY --chown=root:root models ./models
USER crossalign
EXPOSE 5000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('CROSSALIGN_PORT', '5000'), timeout=4)"]
CMD ["crossalign", "serve"]
