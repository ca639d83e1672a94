#!/usr/bin/env bash
# The one test command (README): set up what is missing, then run the whole test suite.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"
PATH="/usr/sbin:$PATH" $UV run --locked --all-packages pytest "$@"
status=$?
# pytest exits 5 when it collected no test (e.g. a -k that matches nothing): not a failure.
if [ "$status" -eq 5 ]; then status=0; fi
exit "$status"
