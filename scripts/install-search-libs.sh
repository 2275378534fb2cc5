#!/usr/bin/env bash
# Builds the environment for comparing well-kept Bayesian-optimisation libraries against the optimizer
# (python -m bench.search_efficiency --libraries): the project without its dev tools, the CPU build of torch 2.13.0
# (optuna's GPSampler needs it), optuna and scikit-learn. The operator's own environments are left alone.
set -euo pipefail
venv=${1:-.venv-search}
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -e . "torch==2.13.0" "optuna==5.0.0" "scikit-learn==1.9.1"
"$venv/bin/python" -c "import torch, optuna, sklearn; print('search libraries ready: torch', torch.__version__, \
'optuna', optuna.__version__, 'scikit-learn', sklearn.__version__)"
