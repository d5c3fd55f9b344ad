#!/usr/bin/env bash
# Installs the benchmark's peers. Each step may fail; the harness then skips
# that peer with a message (the report's "Skipped peers", e.g. benches/results/latest.md).
#   JAX:     PyPI (jax, jaxlib, numpy) into benches/.venv (gitignored)
#   PyTorch: Debian's python3-torch for /usr/bin/python3
#            (else PyPI's CPU wheel into benches/.venv-torch)
# Markers benches/.venv/ok-jax and benches/.venv-torch-python record success.
cd "$(dirname "$0")"
log() { echo "setup_peers: $*" >&2; }
if [ ! -e .venv/ok-jax ]; then
    { /usr/bin/python3 -m venv .venv || python3 -m venv .venv; } &&
    .venv/bin/pip install -q --disable-pip-version-check jax jaxlib numpy &&
    .venv/bin/python -c "import jax, numpy" && touch .venv/ok-jax || log "JAX could not be installed"
fi
if [ ! -e .venv-torch-python ]; then
    if ! /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
        if command -v apt-get > /dev/null; then
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy) > /dev/null 2>&1 ||
                log "apt-get install python3-torch failed"
        fi
    fi
    if /usr/bin/python3 -c "import torch, numpy" 2>/dev/null; then
        echo /usr/bin/python3 > .venv-torch-python
    else
        { /usr/bin/python3 -m venv .venv-torch || python3 -m venv .venv-torch; } &&
        .venv-torch/bin/pip install -q --disable-pip-version-check torch numpy
        if .venv-torch/bin/python -c "import torch, numpy" 2>/dev/null; then
            echo "$PWD/.venv-torch/bin/python" > .venv-torch-python
        else
            log "PyTorch could not be installed"
        fi
    fi
fi
exit 0
