#!/usr/bin/env bash
# `make image`: builds the image of deploy/Dockerfile with Debian's buildah
# — without downloading a base image — proves that it runs, and saves it as
# a docker-archive (`docker load -i` / `podman load -i`).
#
#  1. builds static sluiced and sluice here and lays them out as the
#     Dockerfile's `build` stage leaves them (/out/..., the user's
#     passwd/group entries, the data directory owned by 65532, CA
#     certificates), so that `--build-context build=DIR` stands in for that
#     stage and its golang base image (which needs a registry);
#  2. builds deploy/Dockerfile (its FROM scratch final stage) into a private
#     image store in a temporary directory;
#  3. checks the image: non-root user 65532:65532, the entry point, the
#     data volume, and every port its EXPOSE lists;
#  4. runs sluiced from the image as that user (buildah run, chroot
#     isolation: the host's network, so loopback ports) with its data in the
#     image's /var/lib/sluice, waits until /readyz answers 200, then creates
#     a topic, produces and consumes with the host's CLI, and stops it;
#  5. writes the image to $OUT.
#
# Needs root (or runs itself under `buildah unshare`), Debian's buildah and
# ca-certificates; .ci/run installs them. Environment: GO (go), BIN (bin),
# BUILDAH (buildah), IMAGE (localhost/sluice:dev), OUT
# ($BIN/sluice-image.tar), KEEP=1 keeps the temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=${BIN:-bin}
BUILDAH=${BUILDAH:-buildah}
IMAGE=${IMAGE:-localhost/sluice:dev}
OUT=${OUT:-$BIN/sluice-image.tar}

die() {
  echo "image: $*" >&2
  exit 1
}

# shellcheck source=scripts/lib/node.sh
. scripts/lib/node.sh

command -v "$BUILDAH" >/dev/null 2>&1 ||
  die "$BUILDAH not found: install Debian's buildah (apt-get install buildah)"
[ -r /etc/ssl/certs/ca-certificates.crt ] ||
  die "no /etc/ssl/certs/ca-certificates.crt: install Debian's ca-certificates (apt-get install ca-certificates)"
if [ "$(id -u)" != 0 ]; then
  # A user namespace where this user is root: buildah's rootless mode.
  exec "$BUILDAH" unshare "$0" "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-image.XXXXXX")
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
nodelog="$work/sluiced.log"
pid=""
cleanup() {
  local rc=$?
  [ -z "$pid" ] || stop_process "$pid" sluiced
  finish_work $rc image "$work" "$nodelog"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. What the Dockerfile's build stage leaves, made on this machine.
stage="$work/build"
mkdir -p "$stage/out/data" "$stage/etc/ssl/certs"
CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o "$stage/out/sluiced" ./cmd/sluiced
CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o "$stage/out/sluice" ./cmd/sluice
echo 'sluice:x:65532:65532:sluice:/var/lib/sluice:/sbin/nologin' >"$stage/out/passwd"
echo 'sluice:x:65532:' >"$stage/out/group"
chown 65532:65532 "$stage/out/data"
cp /etc/ssl/certs/ca-certificates.crt "$stage/etc/ssl/certs/"

# 2. The image. The context is empty: the final stage copies only from
# the build stage.
mkdir -p "$work/context"
"$BUILDAH" "${store[@]}" bud --quiet --isolation chroot --build-context build="$stage" \
  -f deploy/Dockerfile -t "$IMAGE" "$work/context" >/dev/null
echo "image: built $IMAGE from deploy/Dockerfile"

# 3. Its configuration.
inspect() { "$BUILDAH" "${store[@]}" inspect --type image --format "$1" "$IMAGE"; }
user=$(inspect '{{.OCIv1.Config.User}}')
[ "$user" = 65532:65532 ] || die "image user is '$user', want 65532:65532 (non-root)"
entrypoint=$(inspect '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}')
[ "$entrypoint" = '/usr/local/bin/sluiced ' ] || die "entry point is '$entrypoint', want /usr/local/bin/sluiced"
volumes=$(inspect '{{range $v, $_ := .OCIv1.Config.Volumes}}{{$v}} {{end}}')
[[ " $volumes " == *" /var/lib/sluice "* ]] || die "volumes '$volumes', want /var/lib/sluice"
ports=$(inspect '{{range $p, $_ := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}')
for p in $(sed -n 's/^EXPOSE //p' deploy/Dockerfile); do
  [[ " $ports " == *" $p "* ]] || die "port $p of EXPOSE missing from the image's exposed ports ($ports)"
done
echo "image: user $user, entry point $entrypoint, volume /var/lib/sluice, ports $ports"

# 4. Run it: the image's own binary, user and data directory; every
# listener on a free loopback port (the flags win over the image's
# SLUICE_* defaults; an empty --advertise means the bound address).
ctr=$("$BUILDAH" "${store[@]}" from --quiet "$IMAGE")
for v in $(compgen -e | grep '^SLUICE_' || true); do unset "$v"; done
"$BUILDAH" "${store[@]}" run --isolation chroot "$ctr" -- /usr/local/bin/sluiced --node-id 1 \
  --listen 127.0.0.1:0 --advertise= --internal-listen 127.0.0.1:0 --internal-advertise= \
  --kafka-listen 127.0.0.1:0 --kafka-advertise= \
  --raft-listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  >"$nodelog" 2>&1 &
pid=$!

wait_ready "$pid" "$nodelog"
echo "image: sluiced from the image ready: gRPC $addr, HTTP $http"

cli=("$stage/out/sluice" --brokers "$addr" --request-timeout 10s)
"${cli[@]}" topic create image-check --partitions 1 --replication-factor 1 >/dev/null
printf 'one\ntwo\nthree\n' | "${cli[@]}" produce image-check
got=$("${cli[@]}" consume image-check --from-beginning --max-messages 3 --timeout 10s | tr '\n' ' ')
[ "$got" = "one two three " ] || die "consumed '$got' from the image's node, want 'one two three '"
echo "image: produced and consumed through the image's node"

# SIGTERM to sluiced itself, as a container runtime stops a container
# (buildah run does not forward it: it kills its child).
node=""
for c in $(descendants "$pid"); do
  [ "$(cat "/proc/$c/comm" 2>/dev/null)" = sluiced ] && node=$c
done
[ -n "$node" ] || die "no sluiced process under buildah run (pid $pid)"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$node/status")
[ "$uid" = 65532 ] || die "sluiced from the image ran as uid $uid, want 65532"
kill -TERM "$node"
wait "$pid" || die "sluiced from the image did not stop cleanly on SIGTERM (see $nodelog)"
grep -q 'msg="sluice node stopped"' "$nodelog" || die "sluiced from the image exited without its clean stop (see $nodelog)"
pid=""
echo "image: sluiced ran as uid $uid and stopped cleanly on SIGTERM"

# 5. The archive.
mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
"$BUILDAH" "${store[@]}" push --quiet "$IMAGE" "docker-archive:$OUT:$IMAGE" >/dev/null
echo "image: wrote $OUT ($(du -h "$OUT" | cut -f1)); load it with 'docker load -i $OUT' or 'podman load -i $OUT'"
