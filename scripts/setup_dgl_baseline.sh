#!/usr/bin/env bash
# A virtual environment holding DGL 2.1's CPU stack, for the baselines of
# scripts/bench_epoch.py (--peer dgl). DGL 2.1.0 is the newest wheel and only
# loads with torch <= 2.2.1, so it cannot share gnnsys's environment.
#   bash scripts/setup_dgl_baseline.sh [VENV_DIR]      (default: .dgl-venv)
# then: python scripts/bench_epoch.py --peer dgl --peer-python VENV_DIR/bin/python
set -euo pipefail
venv="${1:-.dgl-venv}"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] not in [(3, 9), (3, 10), (3, 11), (3, 12)])'; then
    echo "setup_dgl_baseline: DGL 2.1 has wheels for Python 3.9-3.12; set PYTHON to one of them" >&2
    exit 2
fi
"$python" -m venv "$venv"
# The package index's torch 2.2.1 is the CUDA build; it runs on a CPU-only machine.
# Constraints of the host's pip config (a torch cap for the main env) do not apply here.
PIP_CONSTRAINT= "$venv/bin/pip" install --quiet "torch==2.2.1" "dgl==2.1.0" "torchdata==0.7.1" "numpy<2" \
    "pandas" "pyyaml" "pydantic"
"$venv/bin/python" - <<'PY'
import dgl, torch
print(f"DGL baseline ready: dgl {dgl.__version__}, torch {torch.__version__}")
PY
