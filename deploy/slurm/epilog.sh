#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/c4/slurm/epilog.sh): stop the job's c4 sidecar that
# prolog.sh started. SIGTERM lets it ship what the daemon has not acknowledged yet (or keep it
# in the spill directory, which is then left for an operator: `c4 sidecar --spill-dir DIR`
# replays it); after C4_SLURM_STOP_WAIT seconds (default 30) it is killed. Always exits 0.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
export PATH
env_file=${C4_SLURM_ENV:-/etc/c4/slurm.env}
if [ -r "$env_file" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$env_file"
    set +a
fi

log() { logger -t c4-epilog "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null || echo "c4-epilog: $*" >&2; }

[ -n "${SLURM_JOB_ID:-}" ] || exit 0
run_dir=${C4_SLURM_RUN_DIR:-/run/c4}/slurm-$SLURM_JOB_ID
spill_dir=${C4_SLURM_SPILL_DIR:-/var/spool/c4}/slurm-$SLURM_JOB_ID
[ -d "$run_dir" ] || exit 0

if [ -f "$run_dir/sidecar.pid" ]; then
    pid=$(cat "$run_dir/sidecar.pid")
    if kill -TERM "$pid" 2>/dev/null; then
        waited=0
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$waited" -ge $(( ${C4_SLURM_STOP_WAIT:-30} * 10 )) ]; then
                log "sidecar $pid did not stop within ${C4_SLURM_STOP_WAIT:-30} s: killing it"
                kill -KILL "$pid" 2>/dev/null
                break
            fi
            sleep 0.1
            waited=$(( waited + 1 ))
        done
    fi
fi
if [ -f "$run_dir/sidecar.log" ]; then
    log "$(tail -n 1 "$run_dir/sidecar.log")"
fi
rm -rf "$run_dir"
# an empty spill means everything reached the daemon
rmdir "$spill_dir" 2>/dev/null || [ ! -d "$spill_dir" ] || log "records left in $spill_dir"
exit 0
