#!/bin/bash
# What stage's masks cost one bubblewrap sandbox (issue 36): the empty files bound over
# /proc/cmdline, /proc/kallsyms and /proc/keys, and the empty read-only tmpfs over
# /usr/local (`_masks` in drivers/toolkit/sandbox.py).
#
#     sudo bash bench/mask_cost.sh [SANDBOXES] [ROUNDS]    # 40 4
#
# Starts SANDBOXES sandboxes one after another, as an unprivileged uid, with the binds and
# namespaces stage uses, without and then with the masks; ROUNDS alternate the two, so a
# busy spell on the machine hits both. Prints the mean time of one sandbox per round.
# Asserts nothing: the figures are for bench/README.md.
set -euo pipefail
SANDBOXES=${1:-40} ROUNDS=${2:-4}
empty=$(mktemp /tmp/rtax-mask-empty-XXXXXX)
trap 'rm -f "$empty"' EXIT
chmod 644 "$empty"
base=(bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts
  --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64
  --proc /proc --dev /dev --tmpfs /tmp --size 1048576 --tmpfs /workspace)
masks=(--ro-bind "$empty" /proc/cmdline --ro-bind "$empty" /proc/kallsyms
  --ro-bind "$empty" /proc/keys --perms 0755 --tmpfs /usr/local --remount-ro /usr/local)
one() {
  local t0 t1
  t0=$(date +%s%N)
  for _ in $(seq 1 "$SANDBOXES"); do
    setpriv --reuid 65534 --regid 65534 --clear-groups "$@" --remount-ro / true
  done
  t1=$(date +%s%N)
  echo $(((t1 - t0) / SANDBOXES / 1000))
}
for r in $(seq 1 "$ROUNDS"); do
  a=$(one "${base[@]}")
  b=$(one "${base[@]}" "${masks[@]}")
  echo "round $r: without masks ${a} us, with masks ${b} us"
done
