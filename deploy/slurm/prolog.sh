#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/c4/slurm/prolog.sh, PrologFlags=Alloc): start this
# node's c4 sidecar for the job, as the job's user, on the socket the job's ranks use:
#   $C4_SLURM_RUN_DIR/slurm-$SLURM_JOB_ID/sidecar.sock
# A prolog that fails drains the node, so every problem here is logged and the job runs
# anyway (without telemetry from this node): it always exits 0.
#
# Settings (KEY=VALUE lines in $C4_SLURM_ENV, default /etc/c4/slurm.env):
#   C4_BIN              the c4 command (default: c4 on PATH)
#   C4_SLURM_RUN_DIR    parent of the per-job socket directories (default /run/c4)
#   C4_SLURM_SPILL_DIR  parent of the per-job spill directories (default /var/spool/c4)
#   C4_SLURM_DAEMONS    daemons to shard jobs over, HOST:PORT,HOST:PORT,... (job id modulo
#                       their number picks one; default: C4_DAEMON)
#   C4_SLURM_WAIT       seconds to wait for the socket before letting the job start (default 10)
# and any `c4 sidecar` setting (C4_DAEMON, C4_SPILL_MAX_BYTES, C4_BATCH_RECORDS, ...).

C4_SLURM_SCRIPT=prolog
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
uid=${SLURM_JOB_UID:-0}
gid=${SLURM_JOB_GID:-$(id -g "$uid" 2>/dev/null || echo 0)}
c4=${C4_BIN:-c4}

if [ -e "$run_dir/sidecar.pid" ] && kill -0 "$(cat "$run_dir/sidecar.pid")" 2>/dev/null; then
    exit 0   # already running for this job (a prolog run again for a later step)
fi

daemon=${C4_DAEMON:-127.0.0.1:7444}
if [ -n "${C4_SLURM_DAEMONS:-}" ]; then
    # every node of a job computes the same shard: the live detectors need all of a job's
    # telemetry in one daemon
    set -- $(echo "$C4_SLURM_DAEMONS" | tr ',' ' ')
    shift $(( SLURM_JOB_ID % $# ))
    daemon=$1
fi

if ! mkdir -p "$run_dir" "$spill_dir" || ! chown "$uid:$gid" "$run_dir" "$spill_dir" \
        || ! chmod 0755 "$run_dir"; then
    log "cannot prepare $run_dir and $spill_dir"
    exit 0
fi

# setsid: the sidecar outlives the prolog (slurmd kills the prolog's process group when it
# returns). setpriv drops to the job's user, who can read its own ranks' /proc entries.
setsid setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all -- \
    "$c4" sidecar --daemon "$daemon" --socket "$run_dir/sidecar.sock" \
    --spill-dir "$spill_dir" --host "${SLURMD_NODENAME:-$(hostname -s)}" \
    </dev/null >"$run_dir/sidecar.log" 2>&1 &
echo $! >"$run_dir/sidecar.pid"

waited=0
while [ ! -S "$run_dir/sidecar.sock" ]; do
    if ! kill -0 "$(cat "$run_dir/sidecar.pid")" 2>/dev/null; then
        log "the sidecar exited at start: $(tail -n 3 "$run_dir/sidecar.log" | tr '\n' ' ')"
        exit 0
    fi
    if [ "$waited" -ge $(( ${C4_SLURM_WAIT:-10} * 10 )) ]; then
        log "no sidecar socket after ${C4_SLURM_WAIT:-10} s; the ranks will keep retrying"
        exit 0
    fi
    sleep 0.1
    waited=$(( waited + 1 ))
done
exit 0
