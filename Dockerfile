# tenantgate: the admission webhook server.
#
#   docker build -t ghcr.io/tenantgate/tenantgate:0.1.0 .          (with a Docker daemon)
#   make image / make image-test                                   (buildah, no daemon)
#
# BASE_IMAGE is any Debian-based image whose python3 is CPython 3.11 or newer with the venv
# module; pin it (a version tag, or better a digest) so that a rebuild gets the same base.
ARG BASE_IMAGE=docker.io/library/python:3.11.11-slim-bookworm

# --- build: the wheel and its dependencies, installed into a virtualenv ---------------------
FROM ${BASE_IMAGE} AS build
# Extra pip options, e.g. "--no-index --find-links=/src/build/wheelhouse" to install from
# wheels built beforehand (scripts/image.sh does this, so the build needs no network).
ARG PIP_OPTIONS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY . /src
RUN python3 -m venv /opt/tenantgate \
 && /opt/tenantgate/bin/pip install ${PIP_OPTIONS} /src \
 && /opt/tenantgate/bin/pip uninstall --yes pip \
 && /opt/tenantgate/bin/python -m compileall -q /opt/tenantgate/lib

# --- runtime: the virtualenv on the same base, nothing else ---------------------------------
FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="tenantgate" \
      org.opencontainers.image.description="Kubernetes admission webhook: workload profiles, scheduling intent and per-tenant guaranteed/burst quotas" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/tenantgate/tenantgate"
COPY --from=build /opt/tenantgate /opt/tenantgate
# The bytecode was compiled at build time: the root filesystem may be read-only at run time.
ENV PATH=/opt/tenantgate/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A numeric uid (the "nonroot" convention), so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443 8080
ENTRYPOINT ["/opt/tenantgate/bin/tenantgate"]
CMD ["serve"]
