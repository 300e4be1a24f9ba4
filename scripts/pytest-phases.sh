#!/usr/bin/env bash
# The test suite in two phases. Tests marked `root` (network namespaces and the lab, cgroups,
# tc, a real Slurm) take machine-wide names and measure real slowdowns, and tests marked
# `serial` judge the timing of real processes, so they run one at a time; everything else
# runs on C4_TEST_WORKERS processes (default 2), a test file per process (module fixtures stay
# in one process). With arguments, pytest runs them as given, serially.
#   scripts/pytest-phases.sh PYTHON [PYTEST_ARGS...]
set -uo pipefail
py=${1:?usage: pytest-phases.sh PYTHON [PYTEST_ARGS...]}
shift
if [ $# -gt 0 ]; then
    exec "$py" -m pytest --durations=30 "$@"
fi
"$py" -m pytest -n "${C4_TEST_WORKERS:-2}" --dist loadfile -m "not (root or serial)" --durations=20
parallel=$?
"$py" -m pytest -m "root or serial" --durations=10
serial=$?
echo "tests in parallel: exit $parallel; tests marked root or serial (one at a time): exit $serial"
[ "$parallel" -eq 0 ] || exit "$parallel"
exit "$serial"
