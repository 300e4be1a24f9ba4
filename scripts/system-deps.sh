#!/usr/bin/env bash
# Installs the system packages that the integration tests drive for real, when missing and when
# we are root. Without root the tests that need them skip and say why.
set -euo pipefail
need=()
command -v clickhouse-server >/dev/null 2>&1 || [ -x /usr/bin/clickhouse ] || need+=(clickhouse-server clickhouse-client)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld slurmd slurm-client munge)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: not root; tests needing ${need[*]} will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
