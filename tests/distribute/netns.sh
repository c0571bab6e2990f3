#!/usr/bin/env bash
# Hosts as network namespaces on one machine, for the multi-machine tests (mpirun through an rsh
# agent). Nothing outside the namespaces made here is touched: the bridge lives in a hub
# namespace of its own, where mpirun runs too, and the hosts are addressed by IP.
#   netns.sh up PREFIX N DIR [RATE]
#                               makes PREFIX-hub and PREFIX-1..N on 10.231.K.0/24 (K from PREFIX),
#                               writes DIR/agent (the rsh agent), DIR/hosts (ip:1,...) and
#                               DIR/subnet; prints the reason and exits 1 where namespaces are not allowed.
#                               RATE (tc's units: 1gbit, 100mbit) shapes each host's link, both ways,
#                               with a token bucket (tbf), as a switch port of that speed would
#   netns.sh down PREFIX N      removes them (safe to run twice)
#   netns.sh hub PREFIX CMD...  runs CMD in the hub namespace
set -uo pipefail
action=$1
prefix=$2
down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-"); do ip netns delete "$ns" 2>/dev/null; done
}
case "$action" in
  down)
    down
    exit 0
    ;;
  hub)
    shift 2
    exec ip netns exec "$prefix-hub" "$@"
    ;;
  up) ;;
  *)
    echo "netns.sh: unknown action $action" >&2
    exit 2
    ;;
esac
n=$3
dir=$4
rate=${5:-}
if [ "$(id -u)" != 0 ]; then
  echo "network namespaces need root (this is uid $(id -u))"
  exit 1
fi
if ! command -v ip > /dev/null; then
  echo "the ip command (iproute2) is not installed"
  exit 1
fi
# Bytes per second of a tc rate: 100mbit, 1gbit, 2.5gbit.
tc_bytes() {
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = substr(r, length(n "") + 1)
    if (u == "kbit") n *= 1e3; else if (u == "mbit") n *= 1e6; else if (u == "gbit") n *= 1e9; else if (u != "bit") exit 1
    printf "%d\n", n / 8 }'
}
if [ -n "$rate" ] && ! command -v tc > /dev/null; then
  echo "the tc command (iproute2) is not installed"
  exit 1
fi
k=$(( $(echo "$prefix" | cksum | cut -d' ' -f1) % 200 + 20 ))
subnet="10.231.$k.0/24"
fail() {
  echo "$1"
  down
  exit 1
}
ip netns add "$prefix-hub" 2> "$dir/netns.err" || fail "cannot make a network namespace: $(cat "$dir/netns.err")"
ip -n "$prefix-hub" link set lo up || fail "cannot bring up loopback in $prefix-hub"
ip -n "$prefix-hub" link add br0 type bridge || fail "cannot make a bridge"
ip -n "$prefix-hub" addr add "10.231.$k.254/24" dev br0 || fail "cannot address the bridge"
ip -n "$prefix-hub" link set br0 up || fail "cannot bring up the bridge"
hosts=""
: > "$dir/map"
for i in $(seq "$n"); do
  ns="$prefix-$i"
  ip netns add "$ns" || fail "cannot make $ns"
  ip -n "$ns" link set lo up
  ip link add "tv$k-$i" netns "$ns" type veth peer name "p$i" netns "$prefix-hub" || fail "cannot make a veth pair"
  ip -n "$ns" link set "tv$k-$i" name eth0
  ip -n "$ns" addr add "10.231.$k.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$prefix-hub" link set "p$i" master br0
  ip -n "$prefix-hub" link set "p$i" up
  if [ -n "$rate" ]; then
    # A bucket of 64 KiB (the largest segment the veth hands over in one piece: a larger one
    # would let whole messages through at memory speed) and up to 100 ms of queue, as a switch
    # port's buffer, so that bursts of several senders are queued rather than dropped.
    tc_bytes "$rate" > /dev/null || fail "cannot read the rate $rate (expected e.g. 1gbit, 100mbit)"
    for end in "$ns eth0" "$prefix-hub p$i"; do
      read -r where dev <<< "$end"
      tc -n "$where" qdisc replace dev "$dev" root tbf rate "$rate" burst 65536 latency 100ms 2> "$dir/netns.err" ||
        fail "cannot shape $ns's link with tc tbf: $(cat "$dir/netns.err")"
    done
  fi
  hosts="$hosts${hosts:+,}10.231.$k.$i:1"
  echo "10.231.$k.$i $ns" >> "$dir/map"
done
# The rsh agent: `agent [ssh options] HOST COMMAND...` runs COMMAND in HOST's namespace, with
# the namespace's name as its host name (its own UTS namespace).
cat > "$dir/agent" <<AGENT
#!/usr/bin/env bash
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
ns=\$(awk -v h="\$host" '\$1 == h {print \$2}' "$dir/map")
[ -n "\$ns" ] || { echo "agent: no namespace for host \$host" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0"; eval "\$*"' "\$ns" "\$*"
AGENT
chmod +x "$dir/agent"
echo "$hosts" > "$dir/hosts"
echo "$subnet" > "$dir/subnet"
# Reachable? (a closed port answers "refused" once the links are up)
for try in $(seq 50); do
  answer=$(ip netns exec "$prefix-1" bash -c "exec 3<>/dev/tcp/10.231.$k.254/9" 2>&1)
  [[ $answer == *refused* ]] && exit 0
  sleep 0.1
done
fail "the namespaces cannot reach each other over the bridge"
