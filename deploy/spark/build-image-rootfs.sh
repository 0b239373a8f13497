#!/usr/bin/env bash
# Build the Spark + Iceberg container image WITHOUT any image registry:
# debootstrap a Debian rootfs, install a JRE in it, copy in Spark (from the pyspark
# wheel, see deploy/local/spark-dist.sh) at /opt/spark and the Iceberg / SQLite jars
# into /opt/spark/jars, then `podman import` it.
#
#   deploy/spark/build-image-rootfs.sh [TAG]     (default TAG: localhost/icepack-spark:3.5)
#
# Idempotent and cached (under ICEPACK_CACHE_DIR, default ~/.cache/icepack/spark):
#   rootfs/debootstrap.ok     debootstrap done            (~50-75 s the first time)
#   rootfs/base.ok            JRE etc. installed in chroot
#   image-<name>.tar + .hash  `podman save` of the last built image
# The image carries the label icepack.inputs-hash (hash of this script, versions.env,
# the pyspark version and the jars' sha1). If an image with TAG and the same hash
# exists: nothing is done. Else, if the saved tar has the same hash: `podman load`.
# Else: rebuild from the cached rootfs.
#
# Env: ICEPACK_CACHE_DIR, ICEPACK_FORCE_REBUILD=1, ICEPACK_NO_SAVE=1 (skip podman save),
#      versions from deploy/spark/versions.env.
# Needs root (debootstrap, chroot, mount).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$HERE/versions.env"

TAG="${1:-localhost/icepack-spark:3.5}"
CACHE="${ICEPACK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/icepack/spark}"
ROOTDIR="$CACHE/rootfs"
ROOTFS="$ROOTDIR/fs"
BASE_PACKAGES=(openjdk-17-jre-headless procps bash ca-certificates tini)
SAFE_NAME="$(echo "$TAG" | tr '/:' '__')"
SAVED_TAR="$CACHE/image-$SAFE_NAME.tar"

log() { echo "[build-image] $*" >&2; }
T_START=$SECONDS
stage_t0=$SECONDS
stage_done() { log "$1 took $((SECONDS - stage_t0)) s"; stage_t0=$SECONDS; }

[[ $EUID -eq 0 ]] || { log "must run as root (debootstrap/chroot)"; exit 1; }

# ---------------------------------------------------------------- host tools
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v sha256sum >/dev/null 2>&1 || missing+=(coreutils)
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

# ---------------------------------------------------------------- inputs
eval "$("$HERE/../local/spark-dist.sh" --env)"   # SPARK_HOME, ICEPACK_SPARK_JARS_DIR, ICEPACK_SPARK_JARS
IFS=, read -r -a EXTRA_JARS <<<"$ICEPACK_SPARK_JARS"

INPUTS_HASH="$(
  {
    cat "$HERE/build-image-rootfs.sh" "$HERE/versions.env"
    echo "pyspark=$PYSPARK_VERSION suite=$DEBIAN_SUITE packages=${BASE_PACKAGES[*]}"
    for j in "${EXTRA_JARS[@]}"; do echo "$(basename "$j") $(sha1sum <"$j" | awk '{print $1}')"; done
  } | sha256sum | cut -c1-16
)"
log "tag $TAG, inputs hash $INPUTS_HASH"

image_hash() {
  podman image inspect --format '{{ index .Labels "icepack.inputs-hash" }}' "$TAG" 2>/dev/null || true
}

if [[ "${ICEPACK_FORCE_REBUILD:-0}" != 1 ]]; then
  if [[ "$(image_hash)" == "$INPUTS_HASH" ]]; then
    log "image $TAG is up to date; nothing to do"
    echo "IMAGE=$TAG"
    exit 0
  fi
  if [[ -s "$SAVED_TAR" && "$(cat "$SAVED_TAR.hash" 2>/dev/null || true)" == "$INPUTS_HASH" ]]; then
    log "loading $SAVED_TAR"
    podman load -q -i "$SAVED_TAR" >&2
    if [[ "$(image_hash)" == "$INPUTS_HASH" ]]; then
      stage_done "podman load"
      echo "IMAGE=$TAG"
      exit 0
    fi
    log "loaded image does not carry the expected hash; rebuilding"
  fi
fi

# ---------------------------------------------------------------- chroot mounts
MOUNTED=()
cleanup() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTED[$i]}" 2>/dev/null || true; done
  rm -f "$ROOTFS/usr/sbin/policy-rc.d" 2>/dev/null || true
}
trap cleanup EXIT
mount_chroot() {
  local m
  for m in proc sys dev dev/pts; do mkdir -p "$ROOTFS/$m"; done
  mount -t proc proc "$ROOTFS/proc" && MOUNTED+=("$ROOTFS/proc")
  mount --rbind /sys "$ROOTFS/sys" && mount --make-rslave "$ROOTFS/sys" && MOUNTED+=("$ROOTFS/sys")
  mount --bind /dev "$ROOTFS/dev" && MOUNTED+=("$ROOTFS/dev")
  mount --bind /dev/pts "$ROOTFS/dev/pts" && MOUNTED+=("$ROOTFS/dev/pts")
}
umount_chroot() { cleanup; MOUNTED=(); }

# ---------------------------------------------------------------- stage 1: debootstrap
mkdir -p "$ROOTDIR"
DEBOOTSTRAP_KEY="$DEBIAN_SUITE minbase $DEBIAN_MIRROR"
if [[ "$(cat "$ROOTDIR/debootstrap.ok" 2>/dev/null || true)" != "$DEBOOTSTRAP_KEY" ]]; then
  log "debootstrap --variant=minbase $DEBIAN_SUITE -> $ROOTFS (about a minute)"
  rm -f "$ROOTDIR/debootstrap.ok" "$ROOTDIR/base.ok"
  rm -rf "$ROOTFS.tmp" "$ROOTFS"
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$ROOTFS.tmp" "$DEBIAN_MIRROR" >"$ROOTDIR/debootstrap.log" 2>&1 \
    || { tail -30 "$ROOTDIR/debootstrap.log" >&2; exit 1; }
  mv "$ROOTFS.tmp" "$ROOTFS"
  echo "$DEBOOTSTRAP_KEY" >"$ROOTDIR/debootstrap.ok"
  stage_done "debootstrap"
else
  log "debootstrap rootfs cached in $ROOTFS"
fi

# ---------------------------------------------------------------- stage 2: packages in chroot
BASE_KEY="${BASE_PACKAGES[*]}"
if [[ "$(cat "$ROOTDIR/base.ok" 2>/dev/null || true)" != "$BASE_KEY" ]]; then
  log "chroot apt-get install ${BASE_PACKAGES[*]}"
  cat >"$ROOTFS/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR $DEBIAN_SUITE main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main
deb http://deb.debian.org/debian-security $DEBIAN_SUITE-security main
EOF
  cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
  printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"; chmod +x "$ROOTFS/usr/sbin/policy-rc.d"
  mount_chroot
  chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${BASE_PACKAGES[*]} >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*"
  umount_chroot
  : >"$ROOTFS/etc/resolv.conf"
  echo "$BASE_KEY" >"$ROOTDIR/base.ok"
  stage_done "chroot apt-get install"
else
  log "JRE already installed in rootfs"
fi

# (not readlink -f: /etc/alternatives links are absolute and would resolve on the host)
JAVA_HOME_IN_IMAGE="$(ls -d "$ROOTFS"/usr/lib/jvm/java-17-openjdk-* 2>/dev/null | head -1 | sed "s#^$ROOTFS##")"
[[ -x "$ROOTFS$JAVA_HOME_IN_IMAGE/bin/java" ]] || { log "no java in rootfs"; exit 1; }

# ---------------------------------------------------------------- stage 3: Spark + jars
log "copying Spark ($SPARK_HOME) to /opt/spark and ${#EXTRA_JARS[@]} jars to /opt/spark/jars"
rm -rf "$ROOTFS/opt/spark"
mkdir -p "$ROOTFS/opt/spark"
cp -a "$SPARK_HOME/." "$ROOTFS/opt/spark/"
# python bytecode caches and the python package itself are not needed by spark-sql, but
# pyspark (python) stays usable with a python3 in the image; keep the tree as shipped.
find "$ROOTFS/opt/spark" -name __pycache__ -type d -prune -exec rm -rf {} +
cp "${EXTRA_JARS[@]}" "$ROOTFS/opt/spark/jars/"
mkdir -p "$ROOTFS/opt/spark/conf" "$ROOTFS/opt/spark/work-dir"
chmod 1777 "$ROOTFS/opt/spark/work-dir"
cat >"$ROOTFS/opt/spark/ICEPACK-IMAGE" <<EOF
built-by=deploy/spark/build-image-rootfs.sh
inputs-hash=$INPUTS_HASH
pyspark=$PYSPARK_VERSION
iceberg=$ICEBERG_VERSION
sqlite-jdbc=$SQLITE_JDBC_VERSION
EOF
# same uid/gid as the official apache/spark image (185), so bind mounts behave alike when run as it
if ! grep -q '^spark:' "$ROOTFS/etc/passwd"; then
  echo 'spark:x:185:185:spark:/opt/spark:/bin/bash' >>"$ROOTFS/etc/passwd"
  echo 'spark:x:185:' >>"$ROOTFS/etc/group"
fi
[[ -x "$ROOTFS/opt/spark/bin/spark-sql" ]] || { log "spark-sql missing in rootfs"; exit 1; }
stage_done "copy Spark"

# ---------------------------------------------------------------- stage 4: import
log "podman import -> $TAG"
podman rmi -f "$TAG" >/dev/null 2>&1 || true
tar --numeric-owner -C "$ROOTFS" \
  --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* --exclude=./tmp/* --exclude=./var/cache/apt/* \
  -c . | podman import -q \
  --change "ENV PATH=/opt/spark/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV JAVA_HOME=$JAVA_HOME_IN_IMAGE" \
  --change "ENV SPARK_HOME=/opt/spark" \
  --change "ENV SPARK_LOCAL_IP=127.0.0.1" \
  --change "ENV LANG=C.UTF-8" \
  --change "WORKDIR /opt/spark/work-dir" \
  --change "LABEL icepack.inputs-hash=$INPUTS_HASH" \
  --change "LABEL icepack.pyspark=$PYSPARK_VERSION" \
  --change "LABEL icepack.iceberg=$ICEBERG_VERSION" \
  --change 'CMD ["/bin/bash"]' \
  - "$TAG" >&2
[[ "$(image_hash)" == "$INPUTS_HASH" ]] || { log "imported image lacks the hash label"; exit 1; }
stage_done "podman import"

# ---------------------------------------------------------------- stage 5: save for reuse
if [[ "${ICEPACK_NO_SAVE:-0}" != 1 ]]; then
  log "podman save -> $SAVED_TAR"
  rm -f "$SAVED_TAR.hash"
  podman save -q -o "$SAVED_TAR.part" "$TAG" >&2
  mv -f "$SAVED_TAR.part" "$SAVED_TAR"
  echo "$INPUTS_HASH" >"$SAVED_TAR.hash"
  stage_done "podman save"
fi

log "built $TAG in $((SECONDS - T_START)) s; size: $(podman image inspect --format '{{.Size}}' "$TAG") bytes"
echo "IMAGE=$TAG"
