# syntax=docker/dockerfile:1
#
# mpijob-webhook container image.
#
# Base: Red Hat Universal Base Image 9 (ubi-minimal) with the distribution's Python 3.11, rather
# than python:3.11-slim. The webhook's main home is OpenShift: UBI is freely redistributable,
# patched on the RHEL errata cadence and accepted by OpenShift's image certification, and its
# OpenSSL is the FIPS 140-validated module when the node runs in FIPS mode. The TLS endpoint the
# API server talks to goes through Python's ssl module, which links that system OpenSSL.
#
# Pinned to a minor release; a release pipeline should pin the digest as well
# (registry.access.redhat.com/ubi9/ubi-minimal:9.6@sha256:...) and let a bot bump it.
ARG BASE_IMAGE=registry.access.redhat.com/ubi9/ubi-minimal:9.6

# --- build: a virtual environment with the webhook and its dependencies, from wheels only ---
FROM ${BASE_IMAGE} AS build
RUN microdnf install -y --nodocs --setopt=install_weak_deps=0 python3.11 python3.11-pip \
    && microdnf clean all
WORKDIR /src
COPY pyproject.toml README.md ./
COPY certs ./certs
COPY policies ./policies
COPY webhook ./webhook
# Dependencies are installed from binary wheels only: there is no compiler in this image either,
# and a dependency that would need one fails the build instead of half-building.
RUN python3.11 -m venv /opt/mpijob-webhook \
    && /opt/mpijob-webhook/bin/pip install --no-cache-dir --upgrade pip \
    && /opt/mpijob-webhook/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/wheels . \
    && /opt/mpijob-webhook/bin/pip install --no-cache-dir --only-binary=:all: /tmp/wheels/*.whl \
    && /opt/mpijob-webhook/bin/pip uninstall --yes pip \
    && /opt/mpijob-webhook/bin/python -m compileall -q /opt/mpijob-webhook/lib

# --- runtime: the Python interpreter and the virtual environment, nothing else --------------
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="mpijob-webhook" \
      org.opencontainers.image.description="Admission, mutation and conversion webhook for Kubeflow MPIJobs"
RUN microdnf install -y --nodocs --setopt=install_weak_deps=0 python3.11 \
    && microdnf clean all \
    && rm -rf /var/cache/yum /var/lib/dnf
COPY --from=build /opt/mpijob-webhook /opt/mpijob-webhook
# The root filesystem is read-only in the cluster: byte code is compiled at build time, and
# /tmp (gunicorn's heartbeat files) and the metrics directory are emptyDir volumes.
ENV PATH=/opt/mpijob-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so runAsNonRoot can verify it; any other UID works too (OpenShift assigns one).
USER 10001
# TLS (admission, conversion) and the plain health port (/healthz, /readyz, /metrics).
EXPOSE 8443 8081
ENTRYPOINT ["/opt/mpijob-webhook/bin/mpijob-webhook"]
# The Deployment in manifests/base passes these same arguments.
CMD ["serve", "--cert-file=/etc/mpijob-webhook/tls/tls.crt", "--key-file=/etc/mpijob-webhook/tls/tls.key", "--policy-file=/etc/mpijob-webhook/policy/policy.yaml", "--health-port=8081"]
