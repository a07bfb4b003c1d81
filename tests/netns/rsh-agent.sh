#!/bin/sh
# rsh agent for emulated hosts (Open MPI `--mca plm_rsh_agent THIS_SCRIPT`).
#
# Called like ssh: `AGENT [options] HOST command...`. The command runs on emulated node HOST
# through `node-exec.sh` next to this script (the node's cgroups, network namespace and host
# name: see there), through `sh -c` as a remote shell would.
set -eu

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
# ssh joins the command words with spaces and hands the line to the remote shell.
exec "$(dirname "$0")/node-exec.sh" "$host" /bin/sh -c "$*"
