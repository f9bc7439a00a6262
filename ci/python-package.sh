#!/usr/bin/env bash
# The Python package (python/) as a user gets it: a fresh virtualenv,
# `pip install ./python` (maturin builds the wheel with the `leaseproof`
# binary inside; a build cargo already made is reused when the profile and
# flags match — CI passes `MATURIN_PEP517_ARGS="--profile dev"` to pack the
# test build's binary), then the package's own pytest suite, which drives
# the installed binary against real servers through the plugin.
#
#   bash ci/python-package.sh         # prints pytest's summary; exit = pytest's
#   bash ci/python-package.sh install # only the virtualenv and the install
#   bash ci/python-package.sh test    # only the suite, on what `install` made
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/python-package-venv
step=all
case "${1:-}" in
    install | test) step="$1"; shift ;;
esac
if [ "${step}" != test ]; then
    rm -rf "${venv}"
    python3 -m venv "${venv}"
    pip=("${venv}/bin/python3" -m pip --disable-pip-version-check --quiet)
    "${pip[@]}" install --no-deps -r examples/clients/python/requirements.txt -r python/tests/requirements.txt
    started=$(date +%s)
    "${pip[@]}" install ./python
    echo "pip install ./python: $(( $(date +%s) - started )) s"
    "${venv}/bin/python3" -m pip check
fi
if [ "${step}" = install ]; then
    exit 0
fi
# The installed package is what is tested, not the tree's sources.
cd python/tests
exec "../../${venv}/bin/python3" -m pytest -p no:cacheprovider -q "$@"
