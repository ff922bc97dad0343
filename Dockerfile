# The Sluice image: one image, one CLI (`sluice`).
#
#   docker build -t sluice:dev .
#   docker build --build-arg BASE_IMAGE=python:3.12-slim -t sluice:dev .
#
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module. The local
# test cluster (hack/build-images.sh) builds this same file with buildah over a
# Debian base made with debootstrap and passes WHEELHOUSE, a directory of
# wheels inside the build context, so that pip installs without an index.
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
COPY --from=build /opt/sluice /opt/sluice
ENV PATH=/opt/sluice/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["sluice"]
