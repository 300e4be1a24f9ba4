#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/c4/slurm/epilog.sh): stop the job's c4 sidecar that
# prolog.sh started. SIGTERM lets it ship what the daemon has not acknowledged yet (or keep it
# in the spill directory, which is then left for an operator: `c4 sidecar --spill-dir DIR`
# replays it); after C4_SLURM_STOP_WAIT seconds (default 30) it is killed. Always exits 0.

C4_SLURM_SCRIPT=epilog
# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"
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
