#!/bin/sh
# netns-rsh-agent.sh - stands in for ssh as Open MPI's plm_rsh_agent (set by mpirun-netns.sh): no sshd.
# Open MPI calls it exactly like ssh:   netns-rsh-agent.sh [ssh-style options] HOST COMMAND...
# HOST is a namespace from the hostfile (rt0, rt1, ...); COMMAND is a shell command line (the orted
# start-up) to be joined with spaces and parsed by a shell, as sshd would. It runs in that network
# namespace, in a fresh UTS namespace whose hostname is HOST, so every emulated host has its own
# hostname (Open MPI's node names and session dirs /tmp/ompi.<host>.* then do not collide).
while [ $# -gt 0 ]; do
  case $1 in
    -[1246AaCfGgKkMNnqsTtVvXxYy]) shift;;              # flag-only ssh options
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2;;               # ssh options with an argument
    -*) shift;;
    *) break;;
  esac
done
[ $# -ge 2 ] || { echo "netns-rsh-agent: ERROR: usage: netns-rsh-agent.sh HOST COMMAND..." >&2; exit 255; }
host=$1; shift
[ -e "/run/netns/$host" ] || { echo "netns-rsh-agent: ERROR: no network namespace '$host' (run scripts/cluster/netns-up.sh)" >&2; exit 255; }
exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$1" && shift && exec /bin/sh -c "$*"' netns-rsh "$host" "$@"
