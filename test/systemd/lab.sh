#!/bin/bash
# shellcheck disable=SC2016,SC2015 # quoted scripts run by an inner sh; a && b || die is intended
# lab.sh -- a real systemd as PID 1 of its own pid/mount/uts/ipc/cgroup namespaces, so tests
# can `systemctl start` tandem's units on hosts whose PID 1 is not systemd (CI VMs).
# Same recipe as the systemd-lab tool, cut down to what tandem's tests use.
#
# Usage: lab.sh up | down | exec CMD... | install-unit FILE|DIR.d...
# Env:   TANDEM_LAB_DIR (required: one dir per lab, so test files can run labs side by side)
# Needs root, a cgroup2 hierarchy, systemd and util-linux (unshare, nsenter, setsid, flock).
#
# The lab shares the host's file system and network. Private inside: /run (tmpfs),
# /etc/systemd/system (= $TANDEM_LAB_DIR/units), /sys/fs/cgroup (fresh cgroup2), the journal,
# /dev/console. Units that would touch shared host state (tmpfiles-setup wipes /tmp, udev,
# sysctl, ...) are masked; the boot target is basic.target only.
set -uo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
LAB=$(readlink -m "${TANDEM_LAB_DIR:?TANDEM_LAB_DIR must name this lab\'s working dir}")
UNITS=$LAB/units
TARGET=tandem-lab.target
MASKS=(
    systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service
    systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer
    systemd-udevd.service systemd-udev-trigger.service kmod-static-nodes.service
    systemd-sysctl.service systemd-modules-load.service systemd-binfmt.service
    proc-sys-fs-binfmt_misc.automount systemd-remount-fs.service systemd-repart.service
    systemd-random-seed.service systemd-pstore.service systemd-firstboot.service
    systemd-machine-id-commit.service systemd-sysusers.service systemd-journal-flush.service
    systemd-update-utmp.service systemd-timesyncd.service systemd-logind.service
    systemd-journald-audit.socket console-getty.service getty.target getty@tty1.service
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
    e2scrub_reap.service fstrim.timer man-db.timer
)

die() { echo "lab.sh: $*" >&2; exit 125; }
starttime() { # field 22 of /proc/PID/stat: tells a live process from a reused PID
    local s; local -a f
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }; read -r -a f <<<"$s"
    [[ ${f[0]} != Z && ${f[0]} != X ]] && echo "${f[19]}"
}
alive() { [[ -n ${1:-} && -n ${2:-} && $(starttime "$1") == "$2" ]]; }
# shellcheck disable=SC1091 # written by cmd_up
load() { UPID='' USTART='' SPID='' SSTART='' CG=''; [[ -f $LAB/pids ]] && source "$LAB/pids"; }
in_lab() { nsenter -t "$SPID" -a /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$PWD" "$@"; }
require_up() { load && alive "$SPID" "$SSTART" || die "lab $LAB is not up"; }
lock() { mkdir -p "$LAB" && exec 9>"$LAB/.lock" && flock -w 60 9 || die "cannot lock $LAB"; }

cmd_up() {
    [[ $(id -u) == 0 ]] || die "must run as root"
    lock
    load && alive "$SPID" "$SSTART" && die "already up"
    load && teardown
    local root
    if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then root=/sys/fs/cgroup
    elif [[ $(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]; then root=/sys/fs/cgroup/unified
    else die "no cgroup2 hierarchy"; fi
    CG=$root/tandem-lab-$(printf %s "$LAB" | md5sum | cut -c1-8)
    [[ -d $CG ]] && find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
    [[ -d $CG ]] && die "cgroup $CG is busy"
    rm -rf "$UNITS" "$LAB/empty"; mkdir -p "$UNITS" "$LAB/empty"
    local m i
    for m in "${MASKS[@]}"; do ln -s /dev/null "$UNITS/$m"; done
    printf '[Unit]\nDescription=tandem test lab\nRequires=basic.target\nAfter=basic.target\n' >"$UNITS/$TARGET"
    : >"$LAB/console.log"; rm -f "$LAB/upid"
    mkdir "$CG" || die "cannot create cgroup $CG"
    setsid -f env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TANDEM_LAB_DIR="$LAB" \
        /bin/sh -c 'echo $$ >"$1/upid" && echo $$ >"$2/cgroup.procs" &&
            exec unshare --pid --fork --mount --propagation private --mount-proc --uts --ipc --cgroup \
                /bin/bash "$3" __init' sh "$LAB" "$CG" "$SELF" </dev/null >"$LAB/boot.log" 2>&1 9>&-
    UPID='' SPID=''
    for ((i = 0; i < 200; i++)); do
        [[ -z $UPID ]] && UPID=$(cat "$LAB/upid" 2>/dev/null)
        [[ -n $UPID ]] && SPID=$(awk '{print $1}' "/proc/$UPID/task/$UPID/children" 2>/dev/null)
        [[ -n $SPID && $(cat "/proc/$SPID/comm" 2>/dev/null) == systemd ]] && break
        SPID=; sleep 0.05
    done
    USTART=$(starttime "${UPID:-0}"); SSTART=$(starttime "${SPID:-0}")
    printf 'UPID=%s\nUSTART=%s\nSPID=%s\nSSTART=%s\nCG=%s\n' "$UPID" "$USTART" "$SPID" "$SSTART" "$CG" >"$LAB/pids"
    [[ -n $SSTART ]] || { cat "$LAB/boot.log" >&2; teardown; die "systemd did not start"; }
    for ((i = 0; i < 200; i++)); do in_lab test -S /run/systemd/private && break; sleep 0.05; done
    local st
    st=$(timeout 30 nsenter -t "$SPID" -a systemctl is-system-running --wait 2>/dev/null)
    [[ $st == running || $st == degraded ]] || { tail "$LAB/console.log" >&2; teardown; die "boot failed ($st)"; }
    echo "lab up: systemd host pid $SPID ($st)"
}

ns_init() { # PID 1 of the new namespaces: private mounts, then exec systemd
    set -e
    mount --make-rprivate /
    umount -R /sys/fs/cgroup
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
    mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; mount -o remount,bind,ro /sys
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
    [[ -d /var/log/journal ]] && mount -t tmpfs -o mode=2755 tmpfs /var/log/journal
    mount --bind "$TANDEM_LAB_DIR/units" /etc/systemd/system
    mount --bind "$TANDEM_LAB_DIR/empty" /lib/systemd/system/sysinit.target.wants
    mount --bind "$TANDEM_LAB_DIR/console.log" /dev/console
    hostname tandem-lab
    unset TANDEM_LAB_DIR
    export container=other
    exec /lib/systemd/systemd --system --unit=$TARGET --log-target=journal --show-status=no
}

teardown() { # poweroff, SIGKILL after 20 s, wait for unshare, remove the cgroup
    local i
    if alive "$SPID" "$SSTART"; then
        kill -s RTMIN+4 "$SPID"
        for ((i = 0; i < 400; i++)); do alive "$SPID" "$SSTART" || break; sleep 0.05; done
        alive "$SPID" "$SSTART" && kill -9 "$SPID"
    fi
    for ((i = 0; i < 100; i++)); do alive "$UPID" "$USTART" || break; sleep 0.05; done
    alive "$UPID" "$USTART" && kill -9 "$UPID"
    for ((i = 0; i < 60; i++)); do [[ -n $UPID && -d /proc/$UPID ]] || break; sleep 0.05; done
    if [[ -n $CG && -d $CG ]]; then
        for ((i = 0; i < 100; i++)); do grep -q '^populated 0' "$CG/cgroup.events" && break; sleep 0.05; done
        find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
    fi
    rm -f "$LAB/pids" "$LAB/upid"
}

case ${1:-} in
up) cmd_up ;;
down) [[ -d $LAB ]] || exit 0; lock; load && teardown; rm -rf "$UNITS" "$LAB/empty"; exit 0 ;;
exec) shift; require_up; export SYSTEMD_PAGER=; in_lab "$@" ;;
install-unit)
    shift; require_up; lock
    for f in "$@"; do
        n=$(basename -- "$f")
        [[ $n == "$TARGET" || -L $UNITS/$n ]] && die "refusing to overwrite the lab's $n"
        rm -rf -- "${UNITS:?}/$n"; cp -r -- "$f" "$UNITS/$n" && chmod -R u+rwX,go+rX "$UNITS/$n" || die "cannot copy $f"
    done
    in_lab systemctl daemon-reload ;;
__init) ns_init ;;
*) sed -n '2,9p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
