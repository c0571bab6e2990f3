#!/usr/bin/env bash
# A Slurm cluster of three hosts on one machine, for the tests of jobs under Slurm: the hosts are
# network namespaces (netns.sh), each with a slurmd of its own, the controller in the bridge's
# namespace, one munged for all (a key and socket in DIR). Nothing outside DIR and the namespaces
# is touched: each daemon runs in a mount namespace of its own, where DIR/etc-hosts stands for
# /etc/hosts (the hosts' names) and DIR/local-N for the node's local disk (DIR/local, Slurm's TmpFS,
# which PMIx needs apart on each node).
#   slurm_cluster.sh up PREFIX DIR     starts it; writes DIR/slurm.conf and DIR/hosts (the nodes'
#                                      names); prints the reason and exits 1 where it cannot start
#                                      (no root, no namespaces, no Slurm or munge, a daemon that dies)
#   slurm_cluster.sh down PREFIX DIR   ends every process of the cluster and its jobs, removes the
#                                      namespaces (safe to run twice)
#   slurm_cluster.sh run PREFIX DIR CMD...
#                                      runs CMD (sbatch, squeue, scancel, scontrol) in the bridge's
#                                      namespace with the cluster's SLURM_CONF
set -uo pipefail
action=$1
prefix=$2
dir=$3
here=$(cd "$(dirname "$0")" && pwd)
export SLURM_CONF="$dir/slurm.conf"

down() {
  for pidfile in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/pid"; do
    [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2> /dev/null
  done
  # The jobs' processes (slurmstepd and its tasks) live in the hosts' namespaces.
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^$prefix-"); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null
  done
  bash "$here/netns.sh" down "$prefix"
}

case "$action" in
  down)
    down
    exit 0
    ;;
  run)
    shift 3
    exec ip netns exec "$prefix-hub" "$@"
    ;;
  up) ;;
  *)
    echo "slurm_cluster.sh: unknown action $action" >&2
    exit 2
    ;;
esac

fail() {
  echo "$1"
  down
  exit 1
}
for tool in munged slurmctld slurmd sbatch unshare; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (Debian: slurm-wlm and munge; scripts/setup installs them)"
done
mkdir -p "$dir"
bash "$here/netns.sh" up "$prefix" 3 "$dir" > "$dir/netns.out" 2>&1 || fail "$(cat "$dir/netns.out")"
subnet=$(cat "$dir/subnet")
base=${subnet%.0/24}

# The hosts' names, as every daemon and job of the cluster resolves them.
{
  echo "127.0.0.1 localhost"
  echo "$base.254 $prefix-hub"
  for i in 1 2 3; do echo "$base.$i $prefix-$i"; done
} > "$dir/etc-hosts"
printf '%s\n' "$prefix-1" "$prefix-2" "$prefix-3" > "$dir/nodes"

mkdir -p "$dir/munge" "$dir/state" "$dir/log" "$dir/local"
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/key"
chmod 400 "$dir/munge/key"
munged --force --key-file="$dir/munge/key" --socket="$dir/munge/sock" --pid-file="$dir/munge/pid" \
  --log-file="$dir/munge/log" --seed-file="$dir/munge/seed" 2> "$dir/munge/start.err" ||
  fail "munged did not start: $(cat "$dir/munge/start.err" "$dir/munge/log" 2> /dev/null | tail -3)"

cpus=$(nproc)
cat > "$SLURM_CONF" << EOF
ClusterName=tandem-test
SlurmctldHost=$prefix-hub($base.254)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/local
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=10
KillWait=5
MessageTimeout=10
JobRequeue=1
EOF
for i in 1 2 3; do
  echo "NodeName=$prefix-$i NodeAddr=$base.$i CPUs=$cpus State=UNKNOWN" >> "$SLURM_CONF"
done
echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4" >> "$SLURM_CONF"
# No cgroup plugin is used (proctrack/pgid, task/none), but slurmd loads one: version 1 where the
# machine mounts it so (hybrid layouts), else whatever it finds.
if [ -d /sys/fs/cgroup/cpu ] && [ -d /sys/fs/cgroup/unified ]; then
  echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
else
  echo "CgroupPlugin=autodetect" > "$dir/cgroup.conf"
fi

# DAEMON NAMESPACE HOST...: runs a daemon in the namespace, under that host name, with the
# cluster's /etc/hosts and (for a node) its own local disk.
start() {
  local daemon=$1 ns=$2 host=$3 local_dir=$4
  shift 4
  ip netns exec "$ns" unshare --uts --mount --propagation private sh -c '
    hostname "$1" && mount --bind "$2/etc-hosts" /etc/hosts && { [ -z "$3" ] || mount --bind "$3" "$2/local"; } &&
    shift 3 && exec "$@"' sh "$host" "$dir" "$local_dir" "$@" > "$dir/log/$daemon-start.out" 2>&1 ||
    fail "$daemon on $host did not start: $(tail -3 "$dir/log/$daemon-start.out" "$dir/log/$daemon"*.log 2> /dev/null)"
}
start slurmctld "$prefix-hub" "$prefix-hub" "" slurmctld -i
for i in 1 2 3; do
  mkdir -p "$dir/spool/$prefix-$i" "$dir/local-$i"
  start "slurmd-$prefix-$i" "$prefix-$i" "$prefix-$i" "$dir/local-$i" slurmd -N "$prefix-$i"
done
# Up when the controller sees the three nodes idle (30 s at most).
for try in $(seq 150); do
  idle=$(ip netns exec "$prefix-hub" sinfo -h -N -t idle -o %N 2> /dev/null | sort -u | wc -l)
  [ "$idle" = 3 ] && exit 0
  sleep 0.2
done
fail "the nodes did not come up within 30 s: $(ip netns exec "$prefix-hub" sinfo -N 2>&1 | tail -4 | tr '\n' ' '); $(tail -n 3 "$dir"/log/*.log | tr '\n' ' ')"
