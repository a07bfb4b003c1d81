#!/bin/sh
# rsh agent for emulated hosts (Open MPI `--mca plm_rsh_agent THIS_SCRIPT`).
#
# Called like ssh: `AGENT [options] HOST command...`. HOST is looked up in the file
# `hosts.map` next to this script (lines `HOST NAMESPACE`), and the command runs in that
# network namespace, in a new UTS namespace whose host name is HOST (so gethostname()
# there returns HOST), through `sh -c` as a remote shell would.
set -eu
map="$(dirname "$0")/hosts.map"

# Skip ssh-style options: Open MPI may pass some (e.g. `-x`, or whatever plm_rsh_args holds).
while [ $# -gt 0 ]; do
    case "$1" in
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;   # ssh options that take a value
        --) shift; break ;;
        -*) shift ;;
        *) break ;;
    esac
done
if [ $# -lt 2 ]; then
    echo "rsh-agent: usage: $0 [options] HOST command..." >&2
    exit 255
fi
host="$1"
shift
ns="$(awk -v h="$host" '$1 == h { print $2; exit }' "$map")"
if [ -z "$ns" ]; then
    echo "rsh-agent: unknown host $host (not in $map)" >&2
    exit 255
fi
# ssh joins the command words with spaces and hands the line to the remote shell.
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' rsh-agent "$host" "$@"
