# Serving image: the `serve` extra only (onnxruntime, numpy, FastAPI; no torch, no
# scikit-learn), run as a non-root user, bundles mounted read-only at /models_store.
#
#   docker build -t iabma .
#   docker run --rm -p 8000:8000 -v "$PWD/models_store:/models_store:ro" \
#     -e IABMA_MODEL_NAME=demo iabma
#
# tests/deploy/ parses this file: it lints it with hadolint, then installs `.[serve]`
# into a fresh venv and runs this CMD, this HEALTHCHECK and the serving `iabma` commands
# against a real bundle.

# An explicit patch tag so that two builds a month apart start from the same Python.
FROM python:3.11.11-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# The venv is the only thing the runtime stage takes from here, so pip, the build
# backend and the source tree stay behind.
RUN python -m venv /opt/venv

WORKDIR /src
# README.md would only feed the package's long description, and copying it would re-run
# the install below on every docs edit; setuptools builds without it.
# setup.py generates the gRPC stubs of app/oip_grpc/*.proto while the package is built.
COPY pyproject.toml setup.py ./
# app/ alone: the serving commands (iabma serve, promote, rollback, audit-sums, feedback)
# are in it, and training/ (torch, scikit-learn) has no place in this image.
COPY app ./app
# Non-editable, like a wheel: the code lands in the venv's site-packages.
RUN /opt/venv/bin/pip install --no-cache-dir '.[serve]'


FROM python:3.11.11-slim-bookworm AS runtime

# FORWARDED_ALLOW_IPS is read by uvicorn: only these peers may set X-Forwarded-For/Proto.
# Loopback suits a lone container; docker-compose.yml names the nginx address instead.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    IABMA_STORE=/models_store \
    FORWARDED_ALLOW_IPS=127.0.0.1,::1

# A fixed uid so that the bind-mounted store and audit volume can be granted to it.
# /app/var holds the default SQLite audit trail (sqlite:///./var/audit.db, relative to
# WORKDIR) and is the only directory this user may write.
RUN groupadd --system --gid 10001 iabma \
    && useradd --system --uid 10001 --gid iabma --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin iabma \
    && mkdir -p /app/var /models_store \
    && chown iabma:iabma /app/var

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
USER 10001:10001
VOLUME ["/app/var"]
# 8081: the Open Inference Protocol over gRPC, when IABMA_GRPC_PORT=8081 is set.
EXPOSE 8000 8081

# slim has no curl; urlopen raises on any non-2xx, so a 503 from /readyz exits 1.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]

# --timeout-keep-alive: nginx closes idle upstream connections after 30 s (app/deploy/);
# the app must keep them longer, or nginx could send a request into a closing socket.
# --timeout-graceful-shutdown: after SIGTERM (and IABMA_DRAIN_SECONDS), requests in flight
# get 5 s, which leaves the audit flush time to finish within `docker stop`'s default 10 s.
CMD ["python", "-m", "app.server", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers", "--timeout-keep-alive", "75", "--timeout-graceful-shutdown", "5"]
