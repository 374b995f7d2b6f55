#!/bin/bash
# What one bubblewrap sandbox costs per mount in the host's table (issue 36).
#
#     sudo bash bench/mount_table.sh [MOUNTS] [SANDBOXES] [ROUNDS]    # 1000 20 3
#
# In a private mount namespace of its own (nothing is left on the host), with 0 and then
# MOUNTS extra tmpfs mounts (what rtax 0fa77ce made: one per stage environment), starts
# SANDBOXES sandboxes one after another, as an unprivileged uid, with the binds stage
# uses, and prints the mean time of one. ROUNDS alternate the two, so a busy spell on the
# machine hits both. Asserts nothing: the figures are for bench/README.md.
set -euo pipefail
MOUNTS=${1:-1000} SANDBOXES=${2:-20} ROUNDS=${3:-3}
if [ "${RTAX_MOUNT_TABLE_INNER:-}" != 1 ]; then
  for r in $(seq 1 "$ROUNDS"); do
    for k in 0 "$MOUNTS"; do
      RTAX_MOUNT_TABLE_INNER=1 unshare -m --propagation private "$0" "$k" "$SANDBOXES" 1
    done
  done
  exit 0
fi
d=$(mktemp -d /tmp/rtax-mount-table-XXXXXX)
trap 'rm -rf --one-file-system "$d"' EXIT  # the mounts go with the namespace
for i in $(seq 1 "$MOUNTS"); do
  mkdir "$d/$i" && mount -t tmpfs -o size=1m tmpfs "$d/$i"
done
n=$(wc -l < /proc/self/mountinfo)
t0=$(date +%s%N)
for _ in $(seq 1 "$SANDBOXES"); do
  setpriv --reuid 65534 --regid 65534 --clear-groups \
    bwrap --unshare-user --unshare-pid --unshare-net --ro-bind /usr /usr \
    --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --proc /proc --dev /dev --tmpfs /tmp --size 1048576 --tmpfs /workspace \
    --remount-ro / true
done
t1=$(date +%s%N)
for i in $(seq 1 "$MOUNTS"); do umount "$d/$i"; done
echo "mounts in the table: $n; one sandbox: $(( (t1 - t0) / SANDBOXES / 1000 )) us"
