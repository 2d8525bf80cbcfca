#!/usr/bin/env bash
# The service's container image, built from the Dockerfile with no registry, then run and asked
# to translate. CI runs it after the tests (.ci/run), so the image the README promises is built
# and answered from on every change.
#
#   deploy/container.sh                  build the base (if missing) and the image, run it, check it
#   deploy/container.sh --rebuild-base   make the Debian base again (its security updates too)
#
# 1. base: a Debian bookworm root (minbase + python3, python3-venv, ca-certificates; Python 3.11)
#    made by mmdebstrap from Debian's archive and loaded with `podman import`, in place of the
#    Dockerfile's default python:3.11-slim, which would need Docker Hub. Docs, man pages and
#    translations are left out, and no recommended packages.
# 2. image: `podman build --format docker` (the docker format keeps the HEALTHCHECK) with
#    PYTHON_IMAGE set to that base.
# 3. checks: run the image, wait for /health, translate de->en and en->de through /translate
#    (a LibreTranslate answer with a word alignment), `podman healthcheck run`, a non-root user,
#    no torch; print the image's size and the build times; the container is removed on exit,
#    failed or not.
#
# Needs root (rootful podman, mmdebstrap's root mode) and apt: podman, runc and mmdebstrap are
# installed when missing. Every failure is one line naming the step, with the log to read.
# Environment: IMAGE (crossalign), BASE_IMAGE (localhost/crossalign-base:bookworm),
# HEALTH_TIMEOUT_S (120): how long the server may take to answer /health.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-crossalign}"
BASE_IMAGE="${BASE_IMAGE:-localhost/crossalign-base:bookworm}"
HEALTH_TIMEOUT_S="${HEALTH_TIMEOUT_S:-120}"
CONTAINER=crossalign-container-check # removed by name on exit, and first if a killed run left it
rebuild_base=0
case "${1:-}" in
    "") ;;
    --rebuild-base) rebuild_base=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "container.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

logs="$(mktemp -d "${TMPDIR:-/tmp}/crossalign-container.XXXXXX")"
started=$SECONDS
say() { printf '[%4ss] %s\n' "$((SECONDS - started))" "$*"; }
fail() { # one line: what failed, the last line its command wrote, where the whole log is
    local step="$1" log="${2:-}" last=""
    [ -n "$log" ] && [ -s "$log" ] && last=": $(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    echo "container.sh: FAILED: ${step}${last}${log:+ (log: $log)}" >&2
    exit 1
}
cleanup() {
    local rc=$?
    podman rm --force --time 0 "$CONTAINER" >/dev/null 2>&1 || true
    [ "$rc" = 0 ] && rm -rf "$logs"
    exit "$rc"
}

install_tools() {
    [ "$(id -u)" = 0 ] || fail "root is needed (rootful podman, mmdebstrap's root mode): run sudo $0"
    local missing=() tool
    for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    [ ${#missing[@]} = 0 ] && return
    command -v apt-get >/dev/null || fail "installing ${missing[*]}: no apt-get here; install them yourself"
    say "apt: installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"; } >"$logs/apt.log" 2>&1 || fail "apt-get install ${missing[*]}" "$logs/apt.log"
}

build_base() {
    if [ "$rebuild_base" = 0 ] && podman image exists "$BASE_IMAGE"; then
        say "base: $BASE_IMAGE exists, reused (--rebuild-base makes it again)"
        return
    fi
    say "base: mmdebstrap bookworm (minbase, python3, python3-venv, ca-certificates) -> $BASE_IMAGE"
    # A tmpfs for the root being built when it has room: unpacking is then not held up by the disk.
    local scratch="${TMPDIR:-/tmp}"
    [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -n 1)" -gt 1048576 ] 2>/dev/null && scratch=/dev/shm
    # usr-is-merged (the merged-usr hook) in place of usrmerge, which pulls perl in (~50 MB);
    # force-unsafe-io: a root that becomes a tarball needs no fsync.
    TMPDIR="$scratch" mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --aptopt='APT::Install-Recommends "false"' \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt=force-unsafe-io \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        bookworm - 2>"$logs/mmdebstrap.log" |
        podman import --message "crossalign base: Debian bookworm minbase + python3" - "$BASE_IMAGE" \
            >"$logs/import.log" 2>&1 || true
    local status=("${PIPESTATUS[@]}")
    [ "${status[0]}" = 0 ] || fail "mmdebstrap (the base image's root)" "$logs/mmdebstrap.log"
    [ "${status[1]}" = 0 ] || fail "podman import (the base image)" "$logs/import.log"
}

build_image() {
    say "image: podman build --format docker --build-arg PYTHON_IMAGE=$BASE_IMAGE -t $IMAGE ."
    # pip inside the build reaches PyPI through whatever TLS this host trusts: its CA bundle is
    # mounted read-only for the RUN steps, and is not in the image.
    local ca=() bundle=/etc/ssl/certs/ca-certificates.crt
    [ -f "$bundle" ] && ca=(--volume "$bundle:$bundle:ro")
    # runc: crun fails on this machine's cgroup setup. The build's STEP lines are the progress.
    podman --runtime runc build --format docker --layers --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "${ca[@]}" \
        -t "$IMAGE" . 2>&1 | tee "$logs/build.log" | { grep --line-buffered -E 'STEP [0-9]+/' || true; }
    [ "${PIPESTATUS[0]}" = 0 ] || fail "podman build" "$logs/build.log"
}

# The container's open-files and process limits, explicit: podman's defaults (1048576 open
# files, the host's process limit) are refused here ("error setting rlimit"). Open files: this
# shell's own limits; processes: far more than uvicorn and onnxruntime's threads need.
host_limit() { local v; v="$(ulimit "$1")"; [ "$v" = unlimited ] && v=1048576; echo "$v"; }

run_container() {
    podman rm --force --time 0 "$CONTAINER" >/dev/null 2>&1 || true
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    say "run: $CONTAINER on 127.0.0.1:$port"
    # Its stderr goes to the log: podman's own healthcheck timer needs systemd, which this machine
    # lacks, and says so; the check is run by hand below (`podman healthcheck run`).
    podman --runtime runc run --detach --name "$CONTAINER" -p "127.0.0.1:$port:5000" \
        --ulimit "nofile=$(host_limit -Sn):$(host_limit -Hn)" --ulimit nproc=4096:4096 \
        "$IMAGE" >"$logs/run.log" 2>&1 || fail "podman run" "$logs/run.log"
    say "health: waiting for http://127.0.0.1:$port/health (at most ${HEALTH_TIMEOUT_S}s)"
    local deadline=$((SECONDS + HEALTH_TIMEOUT_S))
    until curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null; do
        if [ "$(podman inspect --format '{{.State.Running}}' "$CONTAINER" 2>/dev/null)" != true ]; then
            podman logs "$CONTAINER" >"$logs/server.log" 2>&1 || true
            fail "the server exited before answering /health" "$logs/server.log"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            podman logs "$CONTAINER" >"$logs/server.log" 2>&1 || true
            fail "no answer from /health in ${HEALTH_TIMEOUT_S}s (raise HEALTH_TIMEOUT_S)" "$logs/server.log"
        fi
        sleep 1
    done
}

# POST /translate with an alignment; the answer must be LibreTranslate's shape, a non-empty
# translation that is not the source, and a matrix of one row per target token and one column
# per source token. Prints "source -> translation".
translate() {
    python3 - "http://127.0.0.1:$port/translate" "$@" <<'PY'
import json, sys, urllib.request

url, source, target, text = sys.argv[1:]
body = json.dumps({"q": text, "source": source, "target": target, "alignment": True}).encode()
request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=60) as response:
    answer = json.load(response)
translated = answer.get("translatedText")
if not isinstance(translated, str) or not translated.strip() or translated == text:
    sys.exit(f"translatedText is {translated!r} for {text!r}")
if not isinstance(answer.get("alternatives"), list):
    sys.exit(f"alternatives is {answer.get('alternatives')!r}, not a list")
alignment = answer.get("alignment") or {}
rows, source_tokens, target_tokens = (alignment.get(k) or [] for k in ("matrix", "source_tokens", "target_tokens"))
if not target_tokens or len(rows) != len(target_tokens) or any(len(r) != len(source_tokens) for r in rows):
    sys.exit(f"alignment matrix is not {len(target_tokens)} x {len(source_tokens)}")
print(f"{text!r} -> {translated!r} ({len(target_tokens)} x {len(source_tokens)} alignment)")
PY
}

check_translate() { # SOURCE TARGET TEXT
    local line
    line="$(translate "$@" 2>"$logs/translate.log")" || fail "translate $1->$2" "$logs/translate.log"
    say "translate $1->$2: $line"
}

check_container() {
    check_translate de en "Das Haus ist klein."
    check_translate en de "The house is small."
    podman healthcheck run "$CONTAINER" >"$logs/healthcheck.log" 2>&1 || fail "podman healthcheck run" "$logs/healthcheck.log"
    say "healthcheck: $(podman inspect --format '{{.State.Health.Status}}' "$CONTAINER")"
    local uid
    uid="$(podman exec "$CONTAINER" id -u 2>"$logs/exec.log")" || fail "podman exec id -u" "$logs/exec.log"
    [ "$uid" != 0 ] || fail "the container runs as root (uid 0); the Dockerfile's USER is lost"
    podman exec "$CONTAINER" python -c \
        "import importlib.util, sys; sys.exit('torch is installed' if importlib.util.find_spec('torch') else 0)" \
        >"$logs/torch.log" 2>&1 || fail "no torch in the image" "$logs/torch.log"
    say "user: uid $uid (not root); torch: absent"
}

trap cleanup EXIT
install_tools
t0=$SECONDS
build_base
t1=$SECONDS
build_image
t2=$SECONDS
run_container
check_container
size="$(podman image inspect --format '{{.Size}}' "$IMAGE")"
say "image $IMAGE: $((size / 1000000)) MB; built in $((t2 - t0))s (base $((t1 - t0))s, image $((t2 - t1))s); all checks passed"
