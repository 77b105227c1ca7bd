# syntax=docker/dockerfile:1
# The production image of ticket-dispatcher. Build from the repository root:
#   docker build -t ticket-dispatcher:0.1.0 .
# Kubernetes manifests that run it: ops/kubernetes/.

# --- build: install the package and its postgres extra into a virtualenv ------------------------
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# setup.cfg reads README.md (long_description) and the version from the package.
COPY pyproject.toml setup.cfg README.md ./
COPY ticket_dispatcher ./ticket_dispatcher
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install '.[postgres]'

# --- runtime: the virtualenv only, no sources, no build tools -----------------------------------
FROM python:3.11-slim

# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 dispatcher \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin dispatcher

COPY --from=build /opt/venv /opt/venv

# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only in the pod (pip compiled the .pyc).
# TICKET_DISPATCHER_HTTP_HOST: http.host defaults to 127.0.0.1, unreachable from outside a
# container; the environment wins over the config file, so set it here.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TICKET_DISPATCHER_HTTP_HOST=0.0.0.0

WORKDIR /tmp
USER 10001:10001
EXPOSE 8080

# Exec form: the service is PID 1 and receives SIGTERM itself; it exits within shutdown_timeout
# + 2 s (README "Shutdown and restarts"). `docker run IMAGE config show` runs another command.
ENTRYPOINT ["ticket-dispatcher"]
CMD ["serve"]
