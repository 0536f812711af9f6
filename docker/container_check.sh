#!/usr/bin/env bash
# Build the serving image with podman on a Debian base made by debootstrap, run it with a folder of demo
# bundles mounted, wait for readiness, check one answer per task over HTTP, remove the container.
#
#   docker/container_check.sh [MODELS_DIR]          (default: models; build it with `make demo`)
#   make image-check     (installs podman, buildah, runc and debootstrap when missing, builds the demo models,
#                         writes docker/container_check.log: committed after each run that touches docker/ or service/)
#
# Environment: IMAGE (localhost/bertserve:check), BASE_IMAGE (localhost/debian-base:bookworm; made with
# debootstrap when missing), HOST_PORT (18000), READY_TIMEOUT_S (180), KEEP_IMAGE=1 to keep the image (and the
# base image when this run made it; otherwise both are removed at the end, with the container).
# Needs podman, runc and debootstrap (apt-get install podman buildah runc debootstrap); run as root.
# No Docker engine or registry is needed: crun fails on this host's cgroups, so runc is named explicitly,
# and runc needs explicit ulimits.
set -euo pipefail

cd "$(dirname "$0")/.."
MODELS_DIR=$(realpath "${1:-models}")
# What the output names: paths relative to the repository, never this machine's absolute ones.
MODELS_SHOWN=$(realpath --relative-to=. "$MODELS_DIR")
IMAGE=${IMAGE:-localhost/bertserve:check}
BASE_IMAGE=${BASE_IMAGE:-localhost/debian-base:bookworm}
HOST_PORT=${HOST_PORT:-18000}
READY_TIMEOUT_S=${READY_TIMEOUT_S:-180}
CONTAINER=bertserve-check-$$
PODMAN=(podman --runtime runc)
RESULTS=()
FAILED=0

log() { printf '[container_check] %s\n' "$*"; }
record() {  # record PASS|FAIL what
    RESULTS+=("$1 $2")
    if [ "$1" != PASS ]; then FAILED=1; fi
}
summary() {
    echo
    echo "==================== container check summary ===================="
    for line in "${RESULTS[@]}"; do echo "  $line"; done
    if [ "$FAILED" = 0 ] && [ "${#RESULTS[@]}" -gt 0 ]; then echo "  RESULT: PASS"; else echo "  RESULT: FAIL"; fi
    echo "================================================================="
}
MADE_BASE=0
cleanup() {
    "${PODMAN[@]}" rm -f "$CONTAINER" >/dev/null 2>&1 || true
    if [ "${KEEP_IMAGE:-0}" != 1 ]; then
        podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
        if [ "$MADE_BASE" = 1 ]; then podman rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true; fi
        podman image prune -f >/dev/null 2>&1 || true  # the build stage's untagged image
    fi
}
trap 'cleanup; summary' EXIT

for tool in podman runc python3; do
    command -v "$tool" >/dev/null || { log "missing $tool"; record FAIL "tools: $tool not installed"; exit 1; }
done
[ -d "$MODELS_DIR" ] || { record FAIL "models: $MODELS_SHOWN does not exist (run make demo)"; exit 1; }

if ! podman image exists "$BASE_IMAGE"; then
    command -v debootstrap >/dev/null || { record FAIL "base: debootstrap not installed"; exit 1; }
    # The mirror the host's apt uses: the registry-free way to a Debian rootfs.
    MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    ROOTFS=$(mktemp -d /tmp/bertserve-rootfs.XXXXXX)
    log "base: debootstrap --variant=minbase bookworm from the host apt mirror (debootstrap default when none)"
    start=$SECONDS
    debootstrap --variant=minbase bookworm "$ROOTFS" ${MIRROR:+"$MIRROR"} >/tmp/bertserve-debootstrap.log 2>&1 \
        || { record FAIL "base: debootstrap failed (see /tmp/bertserve-debootstrap.log)"; exit 1; }
    # The downloaded .debs and package lists are 80 MB the image does not need.
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" -c . | podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$ROOTFS"
    MADE_BASE=1
    log "base: $BASE_IMAGE made in $((SECONDS - start)) s"
fi
record PASS "base image $BASE_IMAGE ($(podman image inspect --format '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"

SECRET_ARGS=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    SECRET_ARGS=(--secret id=pipca,src=/etc/ssl/certs/ca-certificates.crt)
fi
log "build: $IMAGE from docker/Dockerfile on $BASE_IMAGE"
start=$SECONDS
if ! podman build --runtime runc --network host --format docker --build-arg "BASE=$BASE_IMAGE" \
        "${SECRET_ARGS[@]}" -f docker/Dockerfile -t "$IMAGE" . >/tmp/bertserve-build.log 2>&1; then
    tail -n 30 /tmp/bertserve-build.log
    record FAIL "build failed (full log: /tmp/bertserve-build.log)"
    exit 1
fi
IMAGE_MB=$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f", $1/1e6}')
record PASS "build in $((SECONDS - start)) s, image size ${IMAGE_MB} MB"

if podman run --runtime runc --rm --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$IMAGE" \
        python -c "import torch" >/dev/null 2>&1; then
    record FAIL "image: torch is importable"
else
    record PASS "image: torch is not installed"
fi
USER_ID=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
if [ -n "$USER_ID" ] && [ "${USER_ID%%:*}" != 0 ] && [ "${USER_ID%%:*}" != root ]; then
    record PASS "image: runs as user $USER_ID"
else
    record FAIL "image: runs as root"
fi

log "run: $CONTAINER with $MODELS_SHOWN on /models ($(find "$MODELS_DIR" -mindepth 2 -maxdepth 2 -name bundle.json | wc -l) bundles), port $HOST_PORT"
# podman schedules the HEALTHCHECK with systemd timers, absent here: its complaints about that are dropped.
"${PODMAN[@]}" run -d --name "$CONTAINER" -p "$HOST_PORT:8000" \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    -v "$MODELS_DIR:/models:ro" "$IMAGE" 2> >(grep -v 'systemd connection' >&2) >/dev/null

start=$SECONDS
ready=0
while [ $((SECONDS - start)) -lt "$READY_TIMEOUT_S" ]; do
    if [ "$(podman inspect --format '{{.State.Running}}' "$CONTAINER" 2>/dev/null)" != true ]; then break; fi
    if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$HOST_PORT/health/ready', timeout=2)" \
            2>/dev/null; then
        ready=1
        break
    fi
    sleep 1
done
if [ "$ready" = 1 ]; then
    record PASS "ready (/health/ready 200) after $((SECONDS - start)) s"
else
    podman logs "$CONTAINER" 2>&1 | tail -n 30
    record FAIL "not ready within ${READY_TIMEOUT_S} s"
    exit 1
fi

# No systemd here, so podman does not schedule the HEALTHCHECK itself: run it once by hand.
if "${PODMAN[@]}" healthcheck run "$CONTAINER" >/dev/null 2>&1; then
    record PASS "HEALTHCHECK (podman healthcheck run) healthy"
else
    record FAIL "HEALTHCHECK (podman healthcheck run) unhealthy"
fi

while IFS= read -r line; do
    log "$line"
    case "$line" in
        PASS*) record PASS "answer: ${line#PASS }" ;;
        FAIL*) record FAIL "answer: ${line#FAIL }" ;;
    esac
done < <(python3 -m demo.examples --url "http://127.0.0.1:$HOST_PORT" | cut -c1-200)

start=$SECONDS
"${PODMAN[@]}" stop --time 40 "$CONTAINER" >/dev/null 2>&1 || true
EXIT_CODE=$(podman inspect --format '{{.State.ExitCode}}' "$CONTAINER")
if [ "$EXIT_CODE" = 0 ]; then
    record PASS "SIGTERM: exited 0 after $((SECONDS - start)) s"
else
    podman logs "$CONTAINER" 2>&1 | tail -n 20
    record FAIL "SIGTERM: exit code $EXIT_CODE"
fi
exit "$FAILED"
