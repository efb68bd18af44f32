# The meshplane image: `meshplane server …` and `meshplane agent …` (deploy/server, deploy/agent).
#   docker build -t meshplane:0.1.0 .
# Only PyPI is reached at build time. Only the package sources are copied (no .dockerignore needed).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY meshplane ./meshplane
RUN python -m venv /opt/meshplane \
 && /opt/meshplane/bin/pip install .

FROM python:3.11-slim
ENV PATH=/opt/meshplane/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 meshplane \
 && useradd --system --uid 10001 --gid meshplane --home-dir /var/lib/meshplane --no-create-home meshplane \
 && mkdir -p /var/lib/meshplane /var/lib/meshplane-agent \
 && chown meshplane:meshplane /var/lib/meshplane /var/lib/meshplane-agent
COPY --from=build /opt/meshplane /opt/meshplane
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /var/lib/meshplane
EXPOSE 8080 18000 18001 18003
ENTRYPOINT ["meshplane"]
CMD ["--help"]
