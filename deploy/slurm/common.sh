# Sourced by prolog.sh and epilog.sh (from the directory they are in): a sane PATH, the
# settings file, logging, and the job's directories. Expects C4_SLURM_SCRIPT (prolog or epilog).
#
# Settings (KEY=VALUE lines in $C4_SLURM_ENV, default /etc/c4/slurm.env):
#   C4_SLURM_RUN_DIR    parent of the per-job socket directories (default /run/c4)
#   C4_SLURM_SPILL_DIR  parent of the per-job spill directories (default /var/spool/c4)

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
export PATH
env_file=${C4_SLURM_ENV:-/etc/c4/slurm.env}
if [ -r "$env_file" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$env_file"
    set +a
fi

log() {
    logger -t "c4-$C4_SLURM_SCRIPT" "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null \
        || echo "c4-$C4_SLURM_SCRIPT: $*" >&2
}

[ -n "${SLURM_JOB_ID:-}" ] || { log "no SLURM_JOB_ID: not run by slurmd?"; exit 0; }
run_dir=${C4_SLURM_RUN_DIR:-/run/c4}/slurm-$SLURM_JOB_ID
spill_dir=${C4_SLURM_SPILL_DIR:-/var/spool/c4}/slurm-$SLURM_JOB_ID
