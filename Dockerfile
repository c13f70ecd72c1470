# syntax=docker/dockerfile:1
# kuberay-syncer: the in-cluster daemon. Build: docker build -t kuberay-syncer .
# Stage 1 builds the project wheel and the wheels of its runtime dependencies (no test extra).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY renderer ./renderer
COPY syncer ./syncer
COPY schemas ./schemas
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# Stage 2 installs those wheels only: no compiler, no sources, no pip cache.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels kuberay-gitops
# A numeric non-root user, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["kuberay-syncer"]
