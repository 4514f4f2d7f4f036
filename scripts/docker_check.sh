#!/usr/bin/env bash
# Build the server image (Dockerfile) and check it end to end: /health, GET /tasks, one session
# created and stepped over HTTP, the image's HEALTHCHECK, a non-root user. Always removes its
# container; traffic goes to 127.0.0.1 only.
#
#   scripts/docker_check.sh                        # base built here with debootstrap (no Docker Hub)
#   BASE=python:3.11-slim scripts/docker_check.sh  # any base image already pullable or present
#
# Without BASE, the base image $LOCAL_BASE (default inferencegym-base:bookworm) is built once, when
# missing, with `debootstrap --variant=minbase` from deb.debian.org (needs root and the debootstrap
# package). The host's locally added CA certificates (/usr/local/share/ca-certificates/*.crt, as a
# TLS-intercepting proxy requires) are copied into that base so pip can reach PyPI from the build;
# that base is for local checks, not for publishing.
#
# Environment: BASE, LOCAL_BASE, IMAGE (default inferencegym-server:check), PORT (host port,
# default 18000), HEALTH_TIMEOUT (seconds, default 300), DEBIAN_MIRROR, EXTRA_CA_DIR.
set -euo pipefail

cd "$(dirname "$0")/.."
LOCAL_BASE=${LOCAL_BASE:-inferencegym-base:bookworm}
BASE=${BASE:-}
IMAGE=${IMAGE:-inferencegym-server:check}
PORT=${PORT:-18000}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-300}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
EXTRA_CA_DIR=${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}
URL="http://127.0.0.1:${PORT}"
CONTAINER="inferencegym-check-$$"

say() { printf '[docker_check] %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }
now() { date +%s; }

docker info >/dev/null 2>&1 || fail "no Docker daemon answers (start dockerd)"
command -v curl >/dev/null || fail "curl is needed on the host"

build_local_base() {
    command -v debootstrap >/dev/null || fail "debootstrap is needed to build $LOCAL_BASE (apt-get install debootstrap), or set BASE"
    [ "$(id -u)" = 0 ] || fail "debootstrap needs root to build $LOCAL_BASE, or set BASE"
    local rootfs
    rootfs=$(mktemp -d /tmp/inferencegym-rootfs.XXXXXX)
    say "building $LOCAL_BASE with debootstrap in $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 \
        || { tail -20 "$rootfs.log"; rm -rf "$rootfs"; fail "debootstrap failed (log above)"; }
    if compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
        say "adding the host's CA certificates from $EXTRA_CA_DIR"
        cp "$EXTRA_CA_DIR"/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import \
        -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$LOCAL_BASE" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
}

t0=$(now)
if [ -z "$BASE" ]; then
    BASE=$LOCAL_BASE
    if docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        say "base $LOCAL_BASE is present"
    else
        build_local_base
    fi
fi
t1=$(now)

say "building $IMAGE on $BASE"
docker build --build-arg "BASE=$BASE" -t "$IMAGE" . || fail "docker build failed"
t2=$(now)

cleanup() { docker rm -f "$CONTAINER" >/dev/null 2>&1 || true; }
trap cleanup EXIT
docker run -d --name "$CONTAINER" -p "127.0.0.1:${PORT}:8000" "$IMAGE" >/dev/null
t3=$(now)

say "waiting for $URL/health (at most ${HEALTH_TIMEOUT}s)"
until curl -fsS --max-time 5 "$URL/health" 2>/dev/null | grep -q '"healthy"'; do
    if [ "$(docker inspect -f '{{.State.Running}}' "$CONTAINER")" != true ]; then
        docker logs --tail 40 "$CONTAINER" 2>&1; fail "the container exited (log above)"
    fi
    if [ $(( $(now) - t3 )) -ge "$HEALTH_TIMEOUT" ]; then
        docker logs --tail 40 "$CONTAINER" 2>&1; fail "no healthy /health after ${HEALTH_TIMEOUT}s (log above)"
    fi
    sleep 2
done
t4=$(now)
say "healthy after $((t4 - t3))s"

tasks=$(curl -fsS "$URL/tasks") || fail "GET /tasks"
grep -q 'InferenceGym-Task1-v1' <<<"$tasks" || fail "GET /tasks does not list InferenceGym-Task1-v1: $tasks"
say "GET /tasks lists InferenceGym-Task1-v1"

created=$(curl -fsS -X POST "$URL/sessions" -H 'Content-Type: application/json' \
    -d '{"task_id": 1, "seed": 0}') || fail "POST /sessions"
sid=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["session_id"])' <<<"$created") \
    || fail "POST /sessions answered no session_id: $created"
stepped=$(curl -fsS -X POST "$URL/sessions/$sid/step" -H 'Content-Type: application/json' \
    -d '{"policy": "heuristic"}') || fail "POST /sessions/$sid/step"
python3 -c 'import json, sys; b = json.load(sys.stdin); assert b["session_id"] == sys.argv[1], b; print("reward", b.get("reward"))' \
    "$sid" <<<"$stepped" >/dev/null || fail "unexpected step answer: $stepped"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X DELETE "$URL/sessions/$sid")
[ "$code" = 204 ] || fail "DELETE /sessions/$sid answered $code"
say "session $sid created, stepped (policy heuristic) and closed"

uid=$(docker exec "$CONTAINER" id -u)
[ "$uid" != 0 ] || fail "the server runs as root"
say "the server runs as uid $uid"

# The image's own HEALTHCHECK (every 15 s) must agree.
status=""
for _ in $(seq 1 30); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$CONTAINER")
    [ "$status" = healthy ] && break
    sleep 2
done
[ "$status" = healthy ] || fail "docker reports health '$status'"
t5=$(now)
say "docker HEALTHCHECK: healthy"

size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
base_size=$(docker image inspect -f '{{.Size}}' "$BASE")
say "PASS"
say "base $BASE: $((base_size / 1000000)) MB, ready in $((t1 - t0))s"
say "image $IMAGE: $((size / 1000000)) MB, built in $((t2 - t1))s"
say "time to healthy: $((t4 - t3))s after docker run (HEALTHCHECK healthy $((t5 - t3))s after)"
