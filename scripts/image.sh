#!/usr/bin/env bash
# Build and check the container image without a Docker daemon: buildah (chroot isolation, vfs
# storage) builds the Dockerfile; `test` runs the built image as the Deployment does (uid 65532,
# read-only root filesystem, a writable /tmp) and checks `tenantgate --version` and an HTTPS
# answer from `tenantgate serve`. Needs root (buildah mounts images). With a Docker daemon,
# `docker build .` builds the same Dockerfile.
#
#   scripts/image.sh build     build $IMAGE
#   scripts/image.sh test      build, then run the image's smoke test
#   scripts/image.sh base      only create the local Debian base (debootstrap)
#
# Environment:
#   IMAGE       tag to build (default: the Deployment's image, ghcr.io/tenantgate/tenantgate:VERSION)
#   BASE_IMAGE  the Dockerfile's base (default: its pinned python slim image when a registry
#               serves it); "local" (also the fallback) makes a Debian bookworm base with
#               debootstrap, for machines that no registry serves
#   WORKDIR     scratch space outside the repository (default: /var/tmp/tenantgate-image)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT="$(pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)"
IMAGE="${IMAGE:-ghcr.io/tenantgate/tenantgate:${VERSION}}"
BASE_IMAGE="${BASE_IMAGE:-}"
WORKDIR="${WORKDIR:-/var/tmp/tenantgate-image}"
LOCAL_BASE="localhost/tenantgate-base:bookworm"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"
BUILDAH=(buildah --storage-driver vfs)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'image: %s\n' "$*" >&2; exit 1; }

need_tools() {
    local missing=()
    local tool
    for tool in "$@"; do
        command -v "${tool}" >/dev/null || missing+=("${tool}")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        log "installing ${missing[*]}"
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        die "needs ${missing[*]} (Debian/Ubuntu: apt-get install ${missing[*]})"
    fi
}

resolve_base() {
    # The Dockerfile's pinned base when a registry serves it, else a local Debian base.
    [[ -n "${BASE_IMAGE}" ]] && return
    local pinned
    pinned="$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)"
    if "${BUILDAH[@]}" inspect --type image "${pinned}" >/dev/null 2>&1 \
        || timeout 300 "${BUILDAH[@]}" pull --quiet "${pinned}" >/dev/null 2>&1; then
        BASE_IMAGE="${pinned}"
    else
        log "cannot pull ${pinned}: building on a local Debian base made with debootstrap"
        BASE_IMAGE=local
    fi
}

local_base() {
    if "${BUILDAH[@]}" inspect --type image "${LOCAL_BASE}" >/dev/null 2>&1; then
        log "local base ${LOCAL_BASE} exists"
        return
    fi
    local rootfs="${WORKDIR}/rootfs"
    rm -rf "${rootfs}"
    mkdir -p "${WORKDIR}"
    log "debootstrap bookworm (python3, python3-venv) into ${rootfs}"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "${rootfs}" "${DEBIAN_MIRROR}" >"${WORKDIR}/debootstrap.log" 2>&1 \
        || { tail -n 20 "${WORKDIR}/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/apt/*.bin \
        "${rootfs}"/var/cache/apt/archives/*.deb
    local container mountpoint
    container="$("${BUILDAH[@]}" from scratch)"
    mountpoint="$("${BUILDAH[@]}" mount "${container}")"
    cp -a "${rootfs}/." "${mountpoint}/"
    "${BUILDAH[@]}" umount "${container}" >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/sh "${container}"
    "${BUILDAH[@]}" commit --quiet "${container}" "${LOCAL_BASE}" >/dev/null
    "${BUILDAH[@]}" rm "${container}" >/dev/null
    rm -rf "${rootfs}"
    log "local base ${LOCAL_BASE} created"
}

wheelhouse() {
    # The wheels are built here, with this machine's pip and its package indexes, so the image
    # build itself needs no network. The image's Python must be the same minor version.
    local wheels="${ROOT}/build/wheelhouse"
    rm -rf "${wheels}"
    mkdir -p "${wheels}"
    log "building wheels into build/wheelhouse"
    "${PYTHON}" -m pip wheel --quiet --wheel-dir "${wheels}" "${ROOT}" >&2
    # What building the project from /src needs (pyproject.toml's build-system.requires).
    "${PYTHON}" -m pip download --quiet --only-binary=:all: --dest "${wheels}" \
        "$("${PYTHON}" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"])')" >&2
}

build() {
    need_tools buildah
    resolve_base
    [[ "${BASE_IMAGE}" == local ]] && need_tools debootstrap
    local args=(--build-arg "VERSION=${VERSION}")
    if [[ "${BASE_IMAGE}" == local ]]; then
        local_base
        args+=(--build-arg "BASE_IMAGE=${LOCAL_BASE}")
    else
        args+=(--build-arg "BASE_IMAGE=${BASE_IMAGE}")
    fi
    if [[ "${OFFLINE_WHEELS:-1}" == 1 ]]; then
        wheelhouse
        args+=(--build-arg "PIP_OPTIONS=--no-index --find-links=/src/build/wheelhouse")
    fi
    log "building ${IMAGE}"
    "${BUILDAH[@]}" build --isolation chroot --layers=false --pull=never \
        "${args[@]}" --tag "${IMAGE}" --file Dockerfile . >&2
    log "built ${IMAGE}"
}

smoke_test() {
    # Globals: the EXIT trap cleans up after the function has returned.
    container="$("${BUILDAH[@]}" from --pull-never "${IMAGE}")"
    mountpoint="$("${BUILDAH[@]}" mount "${container}")"
    root="$(mktemp -d "${WORKDIR}/run.XXXXXX")"
    cleanup() {
        umount -R "${root}" 2>/dev/null || true
        rmdir "${root}" 2>/dev/null || true
        "${BUILDAH[@]}" umount "${container}" >/dev/null 2>&1 || true
        "${BUILDAH[@]}" rm "${container}" >/dev/null 2>&1 || true
    }
    trap cleanup EXIT
    # As the Deployment runs it: the image's root read-only, /tmp a fresh writable tmpfs.
    mount --bind "${mountpoint}" "${root}"
    mount -o remount,bind,ro "${root}"
    mount -t tmpfs -o size=64m,mode=1777 tmpfs "${root}/tmp"
    mount -t proc proc "${root}/proc"
    mount --bind /dev "${root}/dev"
    local user entry
    user="$("${BUILDAH[@]}" inspect --format '{{.OCIv1.Config.User}}' "${IMAGE}")"
    entry="$("${BUILDAH[@]}" inspect --format '{{index .OCIv1.Config.Entrypoint 0}}' "${IMAGE}")"
    [[ "${user}" == 65532:65532 ]] || die "image user is '${user}', want 65532:65532"
    CHROOT="$(command -v chroot)"
    run() { env -i PATH=/opt/tenantgate/bin:/usr/bin:/bin "${CHROOT}" --userspec=65532:65532 "${root}" "$@"; }

    log "image ${IMAGE}: user ${user}, entrypoint ${entry}"
    local shown
    shown="$(run "${entry}" --version)"
    [[ "${shown}" == "tenantgate ${VERSION}" ]] || die "--version printed '${shown}'"
    log "--version: ${shown}"
    if run sh -c 'touch /opt/probe' 2>/dev/null; then die "the root filesystem is writable"; fi

    # The smoke test: serve offline on the image's embedded defaults, with certificates
    # created in /tmp, and ask over HTTPS as the API server would.
    local log_file="${root}/tmp/serve.log"
    env -i PATH=/opt/tenantgate/bin:/usr/bin:/bin "${CHROOT}" --userspec=65532:65532 "${root}" \
        "${entry}" serve --offline --cert-dir /tmp/certs --host 127.0.0.1 --port 0 \
        --metrics-host 127.0.0.1 --metrics-port 0 --log-format json >"${log_file}" 2>&1 &
    local server=$!
    local status=0
    "${PYTHON}" "${ROOT}/scripts/image_smoke.py" --log "${log_file}" --pid "${server}" \
        --ca "${root}/tmp/certs/ca.crt" \
        --review "${ROOT}/tests/fixtures/reviews/v1-create-pod.json" || status=$?
    kill -TERM "${server}" 2>/dev/null || true
    wait "${server}" || true
    ((status == 0)) || { cat "${log_file}" >&2; die "smoke test failed"; }
    log "smoke test passed"
}

case "${1:-build}" in
    build) build ;;
    test) build && smoke_test ;;
    base) need_tools buildah debootstrap && local_base ;;
    *) die "usage: scripts/image.sh build|test|base" ;;
esac
