#!/usr/bin/env bash
# Run the cpctl benchmarks in their own venv (benchmarks/.venv-bench): cpctl plus the tools it is
# compared with (ansible-core, parallel-ssh, fabric) and matplotlib. Not part of the test suite.
#
#   bash benchmarks/run.sh                # all benchmarks (fanout needs root: it starts sshd)
#   bash benchmarks/run.sh fanout drift   # some of them
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv-bench"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$here/requirements.txt" -e "$root"
export PATH="$venv/bin:$PATH"
cd "$root"
exec "$venv/bin/python" -m benchmarks "${@:-all}"
