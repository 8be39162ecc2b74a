#!/usr/bin/env bash
# The container image, built and run without Docker: `bash scripts/image-check.sh` (run by .ci/run).
#
# No Docker engine runs where this project's CI runs and no container registry is reachable, so:
#  1. buildah and debootstrap come from Debian (apt-get) when missing; without root and apt-get this
#     says so and exits 0 (skipped);
#  2. a stand-in for the Dockerfile's base image (FROM node:<version>-bookworm-slim) is assembled once
#     and cached: Debian bookworm (debootstrap, minbase) with this machine's Node 20 and npm, the
#     `node` user (uid 1000) and docker-entrypoint.sh as the official image has them, tagged with the
#     exact name the FROM line uses, so the Dockerfile builds unchanged;
#  3. the Dockerfile is built as it is (buildah, chroot isolation, vfs storage, host network for npm);
#  4. from the image: a standalone gateway (the image's own CMD, as `docker run` starts it), Redis
#     (this machine's redis-server: the image has none, as compose takes it from redis:7.2-alpine),
#     and the compose file's three gateways, admin API and worker, each with the command and
#     environment docker-compose.yml gives it (secrets generated, addresses on 127.0.0.1);
#  5. probes from outside (scripts/image-probe.ts): the quick-start contract, one allowance across
#     the three gateways, the admin API's health and a stored policy applied fleet-wide, a reap job
#     run by the worker; and the image's HEALTHCHECK command inside the containers;
#  6. everything it started is stopped on exit, failure or not; then a PASS/FAIL summary with timings.
# What this cannot show: `docker compose up` itself (Docker's networking, port mappings, restart and
# healthcheck scheduling, the official base image's exact Node patch release, Prometheus, Grafana).
# Environment: IMAGE_CHECK_CACHE (/var/cache/fleet-ratelimit/image-check): the stand-in base and
# buildah's storage, kept between runs.
set -uo pipefail
cd "$(dirname "$0")/.."
exec 7>&1 8>&2

CACHE=${IMAGE_CHECK_CACHE:-/var/cache/fleet-ratelimit/image-check}
RUNROOT=/run/fleet-ratelimit-image-check
IMAGE=localhost/fleet-ratelimit:image-check
STAND_IN_RECIPE=1 # bump when the stand-in's recipe below changes: the cached base is rebuilt
now_ms() { echo $(($(date +%s%N) / 1000000)); }
T0=$(now_ms)
STEPS=()
RESULT=FAIL
WORK=''
BUILT=''
CHILD=''
STOP_PROBLEMS=()
REDIS_PID=''
CONTAINERS=()
declare -A PIDS=() PORTS=()

say() { printf 'image-check: %s\n' "$*"; }
# since START [END]: seconds from START to END (now), to a tenth.
since() {
  local ms=$((${2:-$(now_ms)} - $1))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}
step_done() { STEPS+=("$(printf '%-8s %6s s  %s' "$1" "$(since "$2")" "$3")"); }

# interruptible COMMAND…: runs COMMAND as a child this shell waits for, so that SIGINT or SIGTERM
# reach the exit trap at once (bash runs a trap only after a foreground command ends); the trap stops it.
interruptible() {
  "$@" 9>&- &
  CHILD=$!
  wait "$CHILD"
  local code=$?
  CHILD=''
  return "$code"
}

skip() {
  say "SKIP: $*"
  say 'the image was not built or run here; docker-compose.yml is still checked by npm test'
  exit 0
}

fail() {
  say "FAIL: $*"
  exit 1
}

# Waits up to `seconds` for `cmd…` to succeed, once every 0.25 s; fails naming `what` when it never does.
wait_for() {
  local seconds=$1 what=$2 pid=$3
  shift 3
  local end=$(($(now_ms) + seconds * 1000))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then fail "$what: the process exited before it was ready"; fi
    if [ "$(now_ms)" -gt "$end" ]; then fail "$what: not ready within $seconds s"; fi
    sleep 0.25
  done
}

B=(buildah --root "$CACHE/storage" --runroot "$RUNROOT" --storage-driver vfs)

# layer_of CONTAINER: the id of CONTAINER's filesystem in the storage.
layer_of() {
  local dir
  dir=$("${B[@]}" mount "$1" 2>/dev/null) && basename "$dir"
}

# pids_in LAYER: the processes whose root is that container filesystem (run in it with buildah run),
# whether this run started them or an earlier one that was killed outright did.
pids_in() {
  local p
  [ -n "$1" ] || return 0
  for p in $(find /proc -mindepth 2 -maxdepth 2 -name root ! -lname / 2>/dev/null | cut -d/ -f3); do
    awk -v id="$1" '$5 == "/" && index($4, id) { f = 1 } END { exit !f }' "/proc/$p/mountinfo" 2>/dev/null && echo "$p"
  done
}

# The buildah run processes this run started that are still running.
buildah_runs() {
  local p
  for p in "${PIDS[@]}"; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = buildah ] && echo "$p"; done
}

# stop_container CONTAINER: SIGTERM to each program in it, as `docker stop` sends (buildah run itself
# would SIGKILL its command), not to buildah's own helpers (comm memfd:buildah-…), which would SIGKILL
# it too and go when it exits; SIGKILL to whatever still runs 20 s later. Echoes how many were killed.
stop_container() {
  local layer p left
  layer=$(layer_of "$1")
  for p in $(pids_in "$layer"); do
    case "$(cat "/proc/$p/comm" 2>/dev/null)" in *buildah*) ;; *) kill -TERM "$p" 2>/dev/null ;; esac
  done
  for _ in $(seq 80); do
    left="$(pids_in "$layer") $(buildah_runs)"
    [ -z "${left//[[:space:]]/}" ] && break
    sleep 0.25
  done
  left="$(pids_in "$layer") $(buildah_runs)"
  for p in $left; do kill -KILL "$p" 2>/dev/null; done
  echo $left | wc -w
}

stop_all() {
  local t t1 t2 ctr name code killed=0
  t=$(now_ms)
  for ctr in "${CONTAINERS[@]}"; do killed=$((killed + $(stop_container "$ctr"))); done
  for name in "${!PIDS[@]}"; do
    wait "${PIDS[$name]}" 2>/dev/null
    code=$?
    [ "$code" = 0 ] || STOP_PROBLEMS+=("$name exited $code")
  done
  if [ -n "$REDIS_PID" ]; then
    kill -TERM "$REDIS_PID" 2>/dev/null
    wait "$REDIS_PID" 2>/dev/null
  fi
  t1=$(now_ms)
  for ctr in "${CONTAINERS[@]}"; do "${B[@]}" rm "$ctr" >/dev/null 2>&1; done
  t2=$(now_ms)
  "${B[@]}" rmi "$IMAGE" >/dev/null 2>&1
  "${B[@]}" rmi --prune >/dev/null 2>&1
  [ ${#CONTAINERS[@]} -gt 0 ] || [ -n "$BUILT" ] || return 0
  [ "$killed" = 0 ] || STOP_PROBLEMS+=("$killed process(es) still running 20 s after SIGTERM, killed")
  if [ ${#PIDS[@]} -eq 0 ]; then
    step_done stop "$t" "nothing was running; the build's layers removed in $(since "$t2") s"
  else
    step_done stop "$t" "processes stopped in $(since "$t" "$t1") s (${STOP_PROBLEMS[*]:-each exited 0 on SIGTERM}); container removed in $(since "$t1" "$t2") s, the built image's layers in $(since "$t2") s"
  fi
}

on_exit() {
  local code=$?
  trap - EXIT INT TERM
  # A signal may land while a command's output goes to a log: the summary goes where this script's does.
  exec 1>&7 2>&8
  if [ -n "$CHILD" ]; then
    kill -TERM "$CHILD" 2>/dev/null
    wait "$CHILD" 2>/dev/null
  fi
  if command -v buildah >/dev/null; then stop_all; fi
  [ "$code" = 0 ] && [ "$RESULT" = PASS ] || RESULT=FAIL
  # As `docker stop` would: each program exits on SIGTERM, promptly and cleanly.
  if [ "$RESULT" = PASS ] && [ ${#STOP_PROBLEMS[@]} -gt 0 ]; then
    say "FAIL: on SIGTERM: ${STOP_PROBLEMS[*]}"
    RESULT=FAIL
  fi
  if [ "$RESULT" = FAIL ] && [ -n "$WORK" ] && [ -d "$WORK" ]; then
    for f in "$WORK"/*.log; do
      [ -f "$f" ] || continue
      echo "---- $(basename "$f") (last 25 lines)"
      tail -n 25 "$f" | grep -Ev 'SECRET|TOKEN' || true
    done
  fi
  [ -n "$WORK" ] && rm -rf "$WORK"
  echo
  say "summary"
  for s in "${STEPS[@]}"; do echo "  $s"; done
  say "$RESULT in $(since "$T0") s"
  [ "$RESULT" = PASS ] && exit 0
  exit 1
}

# ---- 1. buildah and debootstrap ----------------------------------------------------------------
t=$(now_ms)
missing=()
for tool in buildah debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || skip "${missing[*]} missing and not root: cannot install them"
  command -v apt-get >/dev/null || skip "${missing[*]} missing and no apt-get to install them with"
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    timeout 300 apt-get update -q >/dev/null 2>&1
    timeout 300 apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      skip "apt-get could not install ${missing[*]}"
  fi
fi
[ "$(id -u)" = 0 ] || skip 'not root: buildah with chroot isolation and debootstrap need root here'
command -v redis-server >/dev/null || fail 'redis-server is not on PATH (Debian package redis-server; npm test needs it too)'
command -v curl >/dev/null || fail 'curl is not on PATH'
step_done tools "$t" "$(buildah --version | cut -d' ' -f1-3), $(debootstrap --version)"
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$CACHE" "$RUNROOT"
# One run at a time on this cache: the storage and the stand-in are shared. Children do not inherit the
# lock (9>&- where they start): one left running must not hold it.
exec 9>"$CACHE/lock"
flock -w 1800 9 || fail "another image check held $CACHE/lock for 30 minutes"
# What an earlier run that was killed outright left behind.
for ctr in $("${B[@]}" containers -q 2>/dev/null); do
  for p in $(pids_in "$(layer_of "$ctr")"); do kill -KILL "$p" 2>/dev/null; done
done
"${B[@]}" rm --all >/dev/null 2>&1

# Removes the partial root of an interrupted assembly: first what debootstrap may have left mounted in
# it (proc, sys), and never crossing into another filesystem.
remove_rootfs() {
  local m
  for m in $(awk -v r="$CACHE/rootfs.partial/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do umount -l "$m"; done
  rm -rf --one-file-system "$CACHE/rootfs.partial"
}

# ---- 2. the stand-in base image -----------------------------------------------------------------
t=$(now_ms)
mapfile -t froms < <(awk 'toupper($1) == "FROM" { print $2 }' Dockerfile)
stages=$(awk 'toupper($1) == "FROM" && toupper($3) == "AS" { print $4 }' Dockerfile)
BASE=''
for f in "${froms[@]}"; do
  grep -qxF "$f" <<<"$stages" && continue
  [ -z "$BASE" ] || [ "$BASE" = "$f" ] || fail "the Dockerfile uses two base images ($BASE, $f); the stand-in covers one"
  BASE=$f
done
[[ "$BASE" =~ ^node:([0-9]+)(\.[0-9]+)*-bookworm-slim$ ]] || fail "FROM $BASE: the stand-in is only for node:<version>-bookworm-slim"
want_major=${BASH_REMATCH[1]}
node_version=$(node --version)
npm_version=$(npm --version)
[ "${node_version#v}" != "${node_version#v"$want_major".}" ] ||
  skip "FROM $BASE wants Node $want_major; this machine's node is $node_version, so no stand-in can be made from it"
BASE_REF=docker.io/library/$BASE
arch=$(dpkg --print-architecture)
# Where this machine reaches the npm registry through a TLS-inspecting proxy, Node trusts its CA through
# NODE_EXTRA_CA_CERTS; the stand-in carries the same, or `npm ci` in the build cannot verify the registry.
extra_ca=''
[ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -r "$NODE_EXTRA_CA_CERTS" ] && extra_ca=$NODE_EXTRA_CA_CERTS
ca_sum=$( ([ -n "$extra_ca" ] && sha256sum <"$extra_ca") || echo none)
key=$(printf '%s\n' "$STAND_IN_RECIPE" "$BASE" "$node_version" "$npm_version" bookworm "$arch" "$ca_sum" | sha256sum | cut -c1-16)
cached=$("${B[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "org.fleet-ratelimit.stand-in"}}' "$BASE_REF" 2>/dev/null)
if [ "$cached" = "$key" ]; then
  step_done base "$t" "stand-in for $BASE cached (node $node_version, npm $npm_version, key $key)"
else
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "assembling a stand-in for $BASE: Debian bookworm ($mirror) + node $node_version + npm $npm_version"
  rootfs=$CACHE/rootfs.partial
  remove_rootfs
  interruptible timeout 1200 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 ||
    fail "debootstrap failed (last lines of $CACHE/debootstrap.log: $(tail -n 3 "$CACHE/debootstrap.log" | tr '\n' ' '))"
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  install -m 755 "$(readlink -f "$(command -v node)")" "$rootfs/usr/local/bin/node"
  mkdir -p "$rootfs/usr/local/lib/node_modules"
  cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  # As the official image: a `node` user and group (1000), and an entry point that runs node for a
  # first argument that is a flag or not a command.
  chroot "$rootfs" groupadd --gid 1000 node
  chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
  cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
if [ "${1#-}" != "${1}" ] || [ -z "$(command -v "${1}")" ] || { [ -f "${1}" ] && ! [ -x "${1}" ]; }; then
  set -- node "$@"
fi
exec "$@"
EOF
  chmod 755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
  ca_env=()
  if [ -n "$extra_ca" ]; then
    install -D -m 644 "$extra_ca" "$rootfs/usr/local/share/ca-certificates/build-host-extra.crt"
    ca_env=(--env NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/build-host-extra.crt)
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  chroot "$rootfs" node --version >/dev/null || fail "node $node_version does not run inside the Debian bookworm root"
  ctr=$("${B[@]}" from scratch) || fail 'buildah from scratch failed'
  mnt=$("${B[@]}" mount "$ctr") || fail 'buildah mount failed'
  cp -a "$rootfs/." "$mnt/"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --os linux --arch "$arch" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env NODE_VERSION="${node_version#v}" "${ca_env[@]}" \
    --entrypoint '["docker-entrypoint.sh"]' --cmd node \
    --label org.fleet-ratelimit.stand-in="$key" --label org.fleet-ratelimit.stand-in-for="$BASE" "$ctr"
  "${B[@]}" commit --rm -q "$ctr" "$BASE_REF" >/dev/null || fail "buildah commit of the stand-in failed"
  "${B[@]}" rmi --prune >/dev/null 2>&1
  remove_rootfs
  step_done base "$t" "stand-in for $BASE assembled and cached (node $node_version, npm $npm_version${extra_ca:+, with the extra CA Node trusts here}, key $key)"
fi

# ---- 3. the Dockerfile, unchanged ---------------------------------------------------------------
t=$(now_ms)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/image-check.XXXXXX")
chmod 700 "$WORK"
say "building the Dockerfile (buildah, chroot isolation, vfs): a few minutes"
BUILT=1
interruptible timeout 1800 "${B[@]}" bud --isolation chroot --network host --pull=never --format docker -t "$IMAGE" -f Dockerfile . >"$WORK/build.log" 2>&1 ||
  fail "the Dockerfile did not build (build.log below)"
grep -E 'STEP [0-9]+/[0-9]+: (FROM|RUN)' "$WORK/build.log" | cut -c1-110 | sed 's/^/  /'
"${B[@]}" inspect --type image "$IMAGE" >"$WORK/image.json" || fail 'buildah inspect of the built image failed'
# config FIELD[.FIELD…]: the built image's Docker configuration at that path, a string as it is, else JSON.
config() {
  node -e 'const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).Docker.config;
    const v = process.argv[2].split(".").reduce((o, k) => o?.[k], c);
    console.log(typeof v === "string" ? v : JSON.stringify(v ?? null));' "$WORK/image.json" "$1"
}
user=$(config User)
cmd=$(config Cmd)
entry=$(config Entrypoint)
health=$(config Healthcheck.Test)
size=$("${B[@]}" images --format '{{.Size}}' "$IMAGE" | head -n 1)
step_done build "$t" "Dockerfile built: $size, user $user, entrypoint $entry, cmd $cmd"
[ "$user" = node ] || fail "the image runs as \"$user\", not the non-root node user"
[ "$health" != null ] || fail 'the image has no HEALTHCHECK'

# ---- 4. the processes, from the image -----------------------------------------------------------
t=$(now_ms)
npm_ci_built=$(node scripts/build.mjs 2>&1) || fail "building the probes failed: $npm_ci_built"
read -r P_REDIS P_SOLO P_G1 P_G2 P_G3 P_F1 P_F2 P_F3 P_ADMIN < <(node --input-type=module -e \
  "import { freePorts } from './dist/scripts/free-port.js'; console.log((await freePorts(9)).join(' '))")
PORTS=([standalone]=$P_SOLO [gateway-1]=$P_G1 [gateway-2]=$P_G2 [gateway-3]=$P_G3 [admin]=$P_ADMIN)
secret() { node -e "console.log(require('crypto').randomBytes(32).toString('base64url'))"; }
KEY_HASH_SECRET=$(secret) BUS_SECRET=$(secret) POLICY_SECRET=$(secret) ADMIN_TOKEN=$(secret) BREAK_GLASS_TOKEN=$(secret)
export KEY_HASH_SECRET BUS_SECRET POLICY_SECRET ADMIN_TOKEN BREAK_GLASS_TOKEN
REDIS_URL=redis://127.0.0.1:$P_REDIS

mkdir -p "$WORK/redis"
redis-server --port "$P_REDIS" --bind 127.0.0.1 --appendonly yes --save '' --dir "$WORK/redis" >"$WORK/redis.log" 2>&1 9>&- &
REDIS_PID=$!
wait_for 20 "redis-server on port $P_REDIS" "$REDIS_PID" redis-cli -p "$P_REDIS" ping

words() { node -e 'for (const w of JSON.parse(process.argv[1]) ?? []) console.log(w)' "$1"; }
mapfile -t ENTRY < <(words "$entry")
mapfile -t CMD < <(words "$cmd")

# One container of the image holds every process: under vfs each container is a full copy of the image,
# which costs tens of seconds to make and to remove on a loaded machine. Each process still gets only
# its own environment, read from its file mounted into the container (not from a command line, where
# secrets would show in `ps`), then starts as Docker starts it: ENTRYPOINT + its command or the CMD.
CTR=frl-image-check
"${B[@]}" from --pull=never --name "$CTR" "$IMAGE" >/dev/null || fail "buildah from $IMAGE failed"
CONTAINERS+=("$CTR")
uid=$("${B[@]}" run --isolation chroot --network host "$CTR" -- id -u 2>&1)
[ "$uid" = 1000 ] || fail "processes in the image run as \"$uid\", not the node user's uid 1000"
WITH_ENV='while IFS= read -r l; do [ -z "$l" ] || export "$l"; done </run/image-check.env; exec "$@"'

# in_container NAME ENV_FILE: the command line that runs a command in the container with ENV_FILE's
# variables, in RUN (the command's words follow it).
in_container() {
  chown "$uid" "$2"
  RUN=("${B[@]}" run --isolation chroot --network host --volume "$2:/run/image-check.env:ro" "$CTR" -- sh -c "$WITH_ENV" "$1")
}

# start NAME ENV_FILE [COMMAND…]: NAME's process in the background (buildah run is this shell's own
# child, so its pid is known), its output in NAME.log.
start() {
  local name=$1 envfile=$2
  shift 2
  local cmd=("$@")
  [ ${#cmd[@]} -gt 0 ] || cmd=("${CMD[@]}")
  in_container "$name" "$envfile"
  "${RUN[@]}" "${ENTRY[@]}" "${cmd[@]}" >"$WORK/$name.log" 2>&1 9>&- &
  PIDS[$name]=$!
}

# compose_service NAME --set VAR=VALUE…: starts docker-compose.yml's service NAME with its command and
# environment, the given variables (its addresses) replaced.
compose_service() {
  local name=$1 words
  shift
  node dist/scripts/compose-service.js --service "$name" --write-env "$WORK/$name.env" "$@" >"$WORK/$name.cmd" ||
    fail "reading $name from docker-compose.yml failed"
  mapfile -t words <"$WORK/$name.cmd"
  start "$name" "$WORK/$name.env" "${words[@]}"
}

# `docker run fleet-ratelimit`: its own CMD, no Redis. KEY_HASH_SECRET only so the probe can find
# demo-free's window boundary.
printf 'PORT=%s\nKEY_HASH_SECRET=%s\n' "$P_SOLO" "$KEY_HASH_SECRET" >"$WORK/standalone.env"
start standalone "$WORK/standalone.env"
i=0
for g in gateway-1 gateway-2 gateway-3; do
  i=$((i + 1))
  fast=P_F$i
  compose_service "$g" --set REDIS_URL="$REDIS_URL" --set PORT="${PORTS[$g]}" --set FAST_PATH_HOST=127.0.0.1 \
    --set FAST_PATH_PORT="${!fast}" --set FAST_PATH_ADVERTISE=127.0.0.1
done
compose_service admin --set REDIS_URL="$REDIS_URL" --set ADMIN_PORT="$P_ADMIN"
compose_service worker --set REDIS_URL="$REDIS_URL"

for name in standalone gateway-1 gateway-2 gateway-3 admin; do
  wait_for 120 "$name (/healthz on port ${PORTS[$name]})" "${PIDS[$name]}" curl -sf "http://127.0.0.1:${PORTS[$name]}/healthz"
done
wait_for 60 'worker ("maintenance worker running" in its log)' "${PIDS[worker]}" grep -q 'maintenance worker running' "$WORK/worker.log"
step_done start "$t" "redis-server (this machine's: the image has none) on :$P_REDIS; from the image: standalone :$P_SOLO, gateways :$P_G1 :$P_G2 :$P_G3, admin :$P_ADMIN, worker"

# ---- 5. probes --------------------------------------------------------------------------------
t=$(now_ms)
mapfile -t HC < <(words "$health")
[ "${HC[0]}" = CMD ] || fail "HEALTHCHECK is not in exec form: $health"
for name in gateway-1 admin; do
  in_container "$name-healthcheck" "$WORK/$name.env"
  out=$(timeout 60 "${RUN[@]}" "${HC[@]:1}" 2>&1) || fail "the image's HEALTHCHECK fails for $name: $out"
done
echo "ok         the image's HEALTHCHECK passes for gateway-1 and admin; its processes run as uid $uid (node)"
interruptible timeout 600 node dist/scripts/image-probe.js --standalone "http://127.0.0.1:$P_SOLO" \
  --gateway "http://127.0.0.1:$P_G1" --gateway "http://127.0.0.1:$P_G2" --gateway "http://127.0.0.1:$P_G3" \
  --admin "http://127.0.0.1:$P_ADMIN" --policy-file demo/policy.json
probe=$?
[ "$probe" = 0 ] || { step_done probes "$t" 'FAILED (above)'; fail "probes failed (exit $probe)"; }
step_done probes "$t" 'every probe passed'
RESULT=PASS
