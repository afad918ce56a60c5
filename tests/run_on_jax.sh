#!/usr/bin/env bash
# The model library's tests on Keras-on-JAX, in a virtual environment of its
# own (JAX and Keras; no TensorFlow), so "backend-neutral" stays checked: every
# layer's tests, each model's contract (build, call, fit step, save and load),
# the generator's searches and sessions, batched decoding and LoRA. The whole
# library set (about 22 minutes on 2 cores) runs with TFFORMER_JAX=all.
# TensorFlow-only tests skip by themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TFFORMER_JAX_VENV:-${TMPDIR:-/tmp}/tfformer-jax-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "jax==0.10.*" "keras>=3.15,<4" pytest pytest-xdist hypothesis
if [ "${TFFORMER_JAX:-}" = all ]; then
  tests=(tests/tfformer/layers tests/tfformer/models tests/tfformer/decoding)
  only=()
else
  tests=(tests/tfformer/layers tests/tfformer/models tests/tfformer/decoding/test_generator.py
    tests/tfformer/decoding/test_session.py)
  only=(-k "layers or contract or (test_generator and not prefix_recompute) or test_session or batched or lora")
fi
KERAS_BACKEND=jax PYTHONPATH=. "$venv/bin/python" -m pytest -n 2 -m "not slow" \
  -p no:cacheprovider "${only[@]}" "${tests[@]}"
