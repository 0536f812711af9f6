#!/usr/bin/env bash
# Every landing's deployment check (.ci/run runs it after the tests, as `make deploy-check`):
#   1. docker/container_check.sh: build the serving image with podman, run it, four answers, HEALTHCHECK, SIGTERM;
#   2. docker/kube_check.py: `podman kube play` of docker/k8s's Deployment with that image: ready within the startup
#      probe's budget, the README's answers, a rolling replacement under a steady client, SIGTERM with requests in
#      flight;
#   3. docker/kube_batch_check.py: `podman kube play` of docker/k8s/batch's Indexed Job on two shards of one batch file,
#      then its join Job: every custom_id once in the joined output.
# Whether they pass or fail, nothing is left behind: the pods, the models volume, and every image this run made
# (the serving image, its build stage, the debootstrap base and podman's pause image, unless they were there before).
#
#   docker/deploy_check.sh [MODELS_DIR]      (default: models; make deploy-check builds it with `make demo`)
set -uo pipefail

cd "$(dirname "$0")/.."
MODELS_DIR=${1:-models}
PYTHON=${PYTHON:-.venv/bin/python}
export IMAGE=${IMAGE:-localhost/bertserve:check}
export BASE_IMAGE=${BASE_IMAGE:-localhost/debian-base:bookworm}
PAUSE_IMAGES=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep -c podman-pause || true)
BASE_EXISTED=0
podman image exists "$BASE_IMAGE" && BASE_EXISTED=1

cleanup() {
    podman pod ps -q --filter name=bertserve | xargs -r podman pod rm -f >/dev/null 2>&1 || true
    podman volume rm -f bertserve-models bertserve-batch-data >/dev/null 2>&1 || true
    podman rmi -f "$IMAGE" bertserve:latest >/dev/null 2>&1 || true
    if [ "$BASE_EXISTED" = 0 ]; then podman rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true; fi
    if [ "$PAUSE_IMAGES" = 0 ]; then
        podman images --format '{{.Repository}}:{{.Tag}}' | grep podman-pause | xargs -r podman rmi -f >/dev/null 2>&1 || true
    fi
    podman image prune -f >/dev/null 2>&1 || true
    left=$(podman ps -a --format '{{.Names}}' | grep -c bertserve || true)
    echo "[deploy_check] cleaned up: $left bertserve containers left, images now: $(podman images --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"
}
trap cleanup EXIT

KEEP_IMAGE=1 docker/container_check.sh "$MODELS_DIR"
image_status=$?
kube_status=1
batch_status=1
if [ "$image_status" = 0 ]; then
    "$PYTHON" docker/kube_check.py "$MODELS_DIR" --image "$IMAGE"
    kube_status=$?
    "$PYTHON" docker/kube_batch_check.py "$MODELS_DIR" --image "$IMAGE"
    batch_status=$?
else
    echo "[deploy_check] the image check failed: the kube checks need its image and did not run"
fi
echo "[deploy_check] image check: $([ "$image_status" = 0 ] && echo PASS || echo FAIL)," \
    "kube check: $([ "$kube_status" = 0 ] && echo PASS || echo FAIL)," \
    "kube batch check: $([ "$batch_status" = 0 ] && echo PASS || echo FAIL)"
[ "$image_status" = 0 ] && [ "$kube_status" = 0 ] && [ "$batch_status" = 0 ]
