#!/bin/sh
# Runs a command on an emulated node: `node-exec.sh [--daemon] HOST PROGRAM [ARGS...]`.
#
# HOST is looked up in the file `hosts.map` next to this script (lines
# `HOST NAMESPACE [CGROUP_PROCS_FILE...]`). The process first joins the node's cgroups (its
# pid written to each `cgroup.procs` file, so PROGRAM and all its children count against the
# node's CPU cap), then enters the node's network namespace, its mount and IPC namespaces
# (those of the keeper process whose pid is in `ns/HOST.pid` next to this script: the node's
# own /dev/shm, System V IPC and boot id, so that nothing but the link joins it to the other
# nodes; checked by the boot id in `ns/HOST.boot_id`, so that a reused pid is never
# entered) and a new UTS namespace whose host name is HOST (so gethostname() there returns
# HOST), then becomes PROGRAM in the caller's working directory (exec all the way: the
# process id stays the caller's child's, so process groups and kill work).
#
# With --daemon, the cgroups are those `daemons.map` lists for HOST (lines `HOST
# [CGROUP_PROCS_FILE...]`): the uncapped cgroup beside the node's, for its agent and pcmd.
#
# nsenter, not `ip netns exec`: the latter also makes a mount namespace with a fresh /sys,
# which hides /sys/fs/cgroup, and the IOS agent's sensor then cannot see the node's cap.
#
# Every step before the exec is a shell builtin (read, echo, test): hydra runs this script
# for each process it starts on a node, a spawned replacement included, and each fork of an
# external program costs a millisecond or more on a loaded machine.
set -eu
case "$0" in
*/*) here="${0%/*}" ;;
*) here=. ;;
esac
daemon=no
if [ "${1:-}" = "--daemon" ]; then
    daemon=yes
    shift
fi
if [ $# -lt 2 ]; then
    echo "node-exec: usage: $0 [--daemon] HOST PROGRAM [ARGS...]" >&2
    exit 255
fi
host="$1"
shift
# Finds HOST's line in the map file $1: true, with the fields after HOST in `rest`, or false.
host_line() {
    while read -r name rest; do
        if [ "$name" = "$host" ]; then
            return 0
        fi
    done <"$1"
    return 1
}
if ! host_line "$here/hosts.map"; then
    echo "node-exec: unknown host $host (not in $here/hosts.map)" >&2
    exit 255
fi
ns="${rest%% *}"
procs_files="${rest#"$ns"}"
if [ "$daemon" = yes ]; then
    if ! host_line "$here/daemons.map"; then
        echo "node-exec: no daemons' cgroup for $host (not in $here/daemons.map)" >&2
        exit 255
    fi
    procs_files="$rest"
fi
for procs in $procs_files; do
    if ! echo $$ >"$procs"; then
        echo "node-exec: cannot join cgroup $procs" >&2
        exit 255
    fi
done
read -r keeper <"$here/ns/$host.pid"
read -r expected_boot_id <"$here/ns/$host.boot_id"
live_boot_id=
read -r live_boot_id 2>/dev/null <"/proc/$keeper/root/proc/sys/kernel/random/boot_id" || true
if [ "$live_boot_id" != "$expected_boot_id" ]; then
    echo "node-exec: $host is gone (its namespaces' keeper $keeper is not running)" >&2
    exit 255
fi
# Entering a mount namespace moves the process to its root: go back to where the caller was
# (the file system is the same one). In the new UTS namespace the host name is written
# through /proc (a builtin, where `hostname` would be one more program to start).
exec nsenter --net="/run/netns/$ns" --mount="/proc/$keeper/ns/mnt" --ipc="/proc/$keeper/ns/ipc" \
    unshare --uts /bin/sh -c 'echo "$1" >/proc/sys/kernel/hostname && cd "$2" && shift 2 && exec "$@"' \
    node-exec "$host" "$PWD" "$@"
