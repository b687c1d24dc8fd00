#!/bin/bash
# lab.sh -- a real N-node Corosync + Pacemaker cluster on one host for tandem's cluster
# tests: each node is a set of Linux namespaces (net, mount, uts, ipc, pid) running the
# real corosync and pacemakerd. Same approach as ClusterLabs-style namespace labs:
#
#   netns ${NS}sw      bridge br0 with ${NET}.254 (clients run here and reach every node)
#   netns ${NS}nodeI   eth0 = ${NET}.I/24, a veth port of br0
#   $LAB/nodeI/        the node's "disk": corosync/pacemaker state, logs, and local/
#                      (bind-mounted on $LAB/local inside the node: tandem's data and log)
#
# Usage: lab.sh up N | down | exec NODE CMD... | kill NODE | start NODE | pids NODE |
#               wait [SECS] | sw CMD... | partition NODE | heal NODE
# kill = power loss: SIGKILL to the node's pid-namespace init makes the kernel kill every
# process of the node. Only PIDs recorded by this script (and the processes inside the
# node's pid namespace) are ever signalled. The kernel still closes the dead processes'
# sockets (peers see FIN/RST at once, as after a crash of the software); with
# TANDEM_LAB_UNPLUG=1 kill then also pulls the node's cable (its bridge port goes down),
# so from then on nothing answers at its address, as after a real power loss.
# partition = the node loses the other nodes but not the switch: a blackhole route on
# each side drops every packet between them (existing connections fall silent, no
# FIN or reset), while clients in the switch namespace still reach every node, so
# an isolated primary keeps being sent messages. heal removes the routes.
set -uo pipefail

SELF=$(readlink -f "$0")
LAB=${TANDEM_LAB_DIR:-/var/tmp/tandem-lab}
NET=${TANDEM_LAB_NET:-10.203.0}
NS=${TANDEM_LAB_NS:-tdlab-}
TOKEN=${TANDEM_LAB_TOKEN:-1000}
UNPLUG=${TANDEM_LAB_UNPLUG:-0}
STATE=$LAB/state
SWNS=${NS}sw

die() { echo "lab: $*" >&2; exit 1; }
log() { echo "[lab $(date +%T.%3N)] $*" >&2; }
nnodes() { cat "$STATE/nnodes" 2>/dev/null || echo 0; }
all_nodes() { local i; for ((i = 1; i <= $(nnodes); i++)); do echo "node$i"; done; }

init_pid() {
    local p
    p=$(cat "$STATE/$1.init.pid" 2>/dev/null) || return 1
    [[ -n $p && -d /proc/$p ]] || return 1
    [[ $(readlink "/proc/$p/ns/pid" 2>/dev/null) == "$(cat "$STATE/$1.pidns" 2>/dev/null)" ]] || return 1
    echo "$p"
}
node_pids() {
    local ns
    ns=$(cat "$STATE/$1.pidns" 2>/dev/null) || return 0
    [[ -n $ns ]] || return 0
    find /proc/[0-9]*/ns/pid -maxdepth 0 -printf '%p %l\n' 2>/dev/null |
        awk -v ns="$ns" '$2 == ns { split($1, a, "/"); print a[3] }'
}

corosync_conf() {
    local i
    printf 'totem {\n  version: 2\n  cluster_name: tandemlab\n  transport: knet\n  crypto_cipher: none\n  crypto_hash: none\n  token: %s\n}\nnodelist {\n' "$TOKEN"
    for ((i = 1; i <= $1; i++)); do
        printf '  node {\n    ring0_addr: %s.%d\n    name: node%d\n    nodeid: %d\n  }\n' "$NET" "$i" "$i" "$i"
    done
    printf '}\nquorum {\n  provider: corosync_votequorum\n}\nlogging {\n  to_logfile: yes\n  logfile: /var/log/cluster/corosync.log\n  to_stderr: no\n  to_syslog: no\n  timestamp: on\n}\n'
}

# An empty CIB from the installed pacemaker (its own feature set), born without stonith
# (no fence devices in a lab), with quorum required and a short dc-deadtime.
cib() {
    local p='<crm_config><cluster_property_set id="cib-bootstrap-options">'
    p+='<nvpair id="cib-bootstrap-options-stonith-enabled" name="stonith-enabled" value="false"/>'
    p+='<nvpair id="cib-bootstrap-options-no-quorum-policy" name="no-quorum-policy" value="stop"/>'
    p+='<nvpair id="cib-bootstrap-options-dc-deadtime" name="dc-deadtime" value="5s"/>'
    p+='</cluster_property_set></crm_config>'
    cibadmin --empty | sed "s|<crm_config/>|$p|"
}

prepare_node() {
    local d=$LAB/$1 m u g f
    rm -rf "$d"
    mkdir -p "$d"/{etc-corosync,var-lib-corosync,var-lib-pacemaker/{cib,pengine,blackbox,cores},var-lib-pcsd,var-log/{pacemaker,cluster},local}
    cp -a /etc/corosync/uidgid.d "$d/etc-corosync/" 2>/dev/null || true
    cp "$STATE/corosync.conf" "$d/etc-corosync/corosync.conf"
    cib >"$d/var-lib-pacemaker/cib/cib.xml"
    chown -R hacluster:haclient "$d/var-lib-pacemaker" "$d/var-log/pacemaker"
    chmod 750 "$d"/var-lib-pacemaker/{cib,pengine,blackbox,cores}
    chmod 600 "$d/var-lib-pacemaker/cib/cib.xml"
    chmod 2770 "$d/var-log/pacemaker"
    while read -r m u g f; do
        [[ -e $d/var-log/$f ]] || { mkdir -p "$d/var-log/$f" && chown "$u:$g" "$d/var-log/$f" && chmod "$m" "$d/var-log/$f"; }
    done < <(find /var/log -mindepth 1 -maxdepth 1 -type d -printf '%m %u %g %f\n')
    echo "$1" >"$d/hostname"
}

net_up() {
    local i ns
    ip netns add "$SWNS" || die "cannot create netns $SWNS"
    ip -n "$SWNS" link set lo up
    ip -n "$SWNS" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$SWNS" addr add "$NET.254/24" dev br0
    ip -n "$SWNS" link set br0 up
    for ((i = 1; i <= $1; i++)); do
        ns=${NS}node$i
        ip netns add "$ns" || die "cannot create netns $ns"
        ip -n "$SWNS" link add "v-node$i" type veth peer name eth0 netns "$ns"
        ip -n "$SWNS" link set "v-node$i" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
}

net_down() {
    local ns
    for ns in $(ip netns list | awk '{print $1}'); do
        [[ $ns == "$SWNS" || $ns == ${NS}node* ]] && ip netns del "$ns"
    done
    return 0
}

start_node() {
    local node=$1 a b i
    init_pid "$node" >/dev/null && return 0
    ip -n "$SWNS" link set "v-$node" up
    rm -f "$STATE/$node".{init.pid,pidns} "$LAB/$node/.up"
    cp "$SELF" "$STATE/lab.init.$$" && mv -f "$STATE/lab.init.$$" "$STATE/lab.init"
    (export TANDEM_LAB_DIR="$LAB"
     exec setsid ip netns exec "${NS}$node" unshare --mount --uts --ipc --pid --fork --mount-proc \
        --propagation private /bin/bash "$STATE/lab.init" _init "$node" </dev/null >>"$LAB/$node/init.log" 2>&1) &
    a=$!
    for ((i = 0; i < 100; i++)); do
        b=$(awk '{print $1}' "/proc/$a/task/$a/children" 2>/dev/null)
        [[ -n $b && $(readlink "/proc/$b/ns/pid" 2>/dev/null) != "$(readlink /proc/self/ns/pid)" ]] && break
        b=
        sleep 0.05
    done
    [[ -n $b ]] || die "$node: init did not appear (see $LAB/$node/init.log)"
    echo "$b" >"$STATE/$node.init.pid"
    readlink "/proc/$b/ns/pid" >"$STATE/$node.pidns"
    for ((i = 0; i < 300; i++)); do
        [[ -e $LAB/$node/.up ]] && return 0
        init_pid "$node" >/dev/null || die "$node: init died (see $LAB/$node/init.log)"
        sleep 0.1
    done
    die "$node: pacemakerd did not start"
}

kill_node() {
    local node=$1 b p i
    b=$(init_pid "$node") && kill -KILL "$b"
    for ((i = 0; i < 100; i++)); do
        p=$(node_pids "$node")
        [[ -z $p ]] && break
        # shellcheck disable=SC2086 # a list of pids
        kill -KILL $p 2>/dev/null
        sleep 0.05
    done
    [[ -z $(node_pids "$node") ]] || die "$node: processes survive: $(node_pids "$node")"
    [[ $UNPLUG == 1 ]] && ip -n "$SWNS" link set "v-$node" down
    rm -f "$STATE/$node".{init.pid,pidns} "$LAB/$node/.up"
}

# blackhole routes between NODE and every other node, both ways (add or del)
partition_routes() {
    local op=$1 node=$2 peer
    for peer in $(all_nodes); do
        [[ $peer == "$node" ]] && continue
        ip -n "${NS}$node" route "$op" blackhole "$NET.${peer#node}/32" 2>/dev/null
        ip -n "${NS}$peer" route "$op" blackhole "$NET.${node#node}/32" 2>/dev/null
    done
    return 0
}

do_init() { # PID 1 of the node's pid namespace
    local node=$1 d=$LAB/$1 cs pm
    set +e
    hostname "$node"
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
    mkdir -p /run/crm /run/lock /run/resource-agents /run/pacemaker
    chown hacluster:haclient /run/crm && chmod 750 /run/crm
    chmod 1777 /run/lock
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
    mount --bind "$d/etc-corosync" /etc/corosync
    mount --bind "$d/var-lib-corosync" /var/lib/corosync
    mount --bind "$d/var-lib-pacemaker" /var/lib/pacemaker
    mkdir -p /var/lib/pcsd && mount --bind "$d/var-lib-pcsd" /var/lib/pcsd
    mount --bind "$d/var-log" /var/log
    mount --bind "$STATE/hosts" /etc/hosts
    mount --bind "$d/hostname" /etc/hostname
    mount --bind "$d/local" "$LAB/local"
    trap 'kill -TERM $pm 2>/dev/null; wait $pm; kill -TERM $cs 2>/dev/null; wait $cs; exit 0' TERM
    corosync -f >>/var/log/cluster/corosync.stdout 2>&1 &
    cs=$!
    for ((i = 0; i < 300; i++)); do corosync-cfgtool -s >/dev/null 2>&1 && break; sleep 0.1; done
    PCMK_logfile=/var/log/pacemaker/pacemaker.log PCMK_logfacility=none pacemakerd >>/var/log/pacemaker/pacemakerd.stdout 2>&1 &
    pm=$!
    touch "$d/.up"
    log "$node: corosync $cs, pacemakerd $pm"
    while :; do sleep 2 & wait $!; done # stay PID 1 and reap orphans
}

# online count, quorum and DC as NODE sees them, from crm_mon's XML
view() {
    local x
    x=$("$SELF" exec "$1" crm_mon -1 --output-as=xml 2>/dev/null) || return 1
    printf '%s %s %s\n' "$(grep -c '<node name="[^"]*" id="[^"]*" online="true"' <<<"$x")" \
        "$(grep -o 'with_quorum="[a-z]*"' <<<"$x" | head -1 | cut -d'"' -f2)" \
        "$(grep -o '<current_dc present="true"[^>]*name="[^"]*"' <<<"$x" | sed 's/.*name="//;s/"$//')"
}

cmd_wait() {
    local t=${1:-180} start=$SECONDS node want ok dc0 on q dc
    while ((SECONDS - start < t)); do
        want=0 ok=1 dc0=
        for node in $(all_nodes); do init_pid "$node" >/dev/null && want=$((want + 1)); done
        for node in $(all_nodes); do
            init_pid "$node" >/dev/null || continue
            read -r on q dc < <(view "$node") || { ok=0; break; }
            if [[ $on -ne $want || $q != true || -z $dc ]] || [[ -n $dc0 && $dc != "$dc0" ]]; then ok=0; break; fi
            dc0=$dc
        done
        ((ok && want > 0)) && { log "cluster formed: $want nodes, DC $dc0"; return 0; }
        sleep 1
    done
    die "cluster did not form within ${t}s"
}

cmd_up() {
    local n=${1:-3} node i
    [[ -s $STATE/nnodes ]] && die "lab is up already (lab.sh down)"
    ip netns list | awk '{print $1}' | grep -qE "^${NS}(sw|node[0-9]+)$" && die "stale namespaces ${NS}*; run lab.sh down"
    mkdir -p "$STATE" "$LAB/local"
    rm -f "$STATE"/*
    echo "$n" >"$STATE/nnodes"
    corosync_conf "$n" >"$STATE/corosync.conf"
    { printf '127.0.0.1\tlocalhost\n'; for ((i = 1; i <= n; i++)); do printf '%s.%d\tnode%d\n' "$NET" "$i" "$i"; done; } >"$STATE/hosts"
    for node in $(all_nodes); do prepare_node "$node"; done
    net_up "$n"
    for node in $(all_nodes); do start_node "$node"; done
    cmd_wait 180
}

cmd_down() {
    local node
    for node in $(all_nodes); do kill_node "$node"; done
    net_down
    rm -f "$STATE"/*
    log "lab down"
}

[[ $EUID -eq 0 ]] || die "must run as root"
cmd=${1:-}
shift || true
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down ;;
exec)
    node=$1; shift
    b=$(init_pid "$node") || die "$node is not running"
    exec nsenter -t "$b" --net --mount --uts --ipc --pid -- "$@"
    ;;
sw) exec ip netns exec "$SWNS" "$@" ;;
kill) for n in "$@"; do kill_node "$n"; log "$n killed"; done ;;
start) for n in "$@"; do start_node "$n"; done ;;
pids) node_pids "$1" ;;
wait) cmd_wait "$@" ;;
partition) partition_routes add "$1"; log "$1 cut off from the other nodes" ;;
heal) partition_routes del "$1"; log "$1 back with the other nodes" ;;
_init) do_init "$@" ;;
*) die "usage: lab.sh up N | down | exec NODE CMD... | sw CMD... | kill NODE... | start NODE... | pids NODE | wait [SECS] | partition NODE | heal NODE" ;;
esac
