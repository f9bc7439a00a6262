#!/usr/bin/env bash
# The Python lock clients (examples/clients/python) run in a virtualenv under
# target/ with pinned packages — pg_partsmith 1.10.0 from PyPI among them.
# Made once: a venv whose requirements file is unchanged is kept. Built in a
# temporary directory and moved into place, so an interrupted install never
# leaves a half-made venv behind. Also installs libfaketime (clock skew of
# client processes) when it is missing and we are root.
#
#   bash ci/install-python-clients.sh            # prints the venv's python
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        bash ci/apt-install.sh faketime >&2
    else
        echo "libfaketime missing (Debian: faketime): clock-skew faults will not skew" >&2
    fi
fi

requirements=examples/clients/python/requirements.txt
venv=target/leaseproof-clients-venv
stamp="${venv}/requirements.txt"
# The clients import the leaseproof Python package (python/src): the venv
# sees the tree's sources through a .pth file, so the tests run the code the
# package ships (`pip install ./python` would build the binary as well).
see_package() {
    local site
    site="$("$1/bin/python3" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
    echo "$(pwd)/python/src" > "${site}/leaseproof-source.pth"
}
if [ -x "${venv}/bin/python3" ] && cmp -s "${requirements}" "${stamp}"; then
    see_package "${venv}"
    echo "${venv}/bin/python3"
    exit 0
fi

python="${PYTHON:-python3}"
if ! "${python}" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    echo "need Python >= 3.11 (pg-partsmith requires it); set PYTHON" >&2
    exit 1
fi
if ! "${python}" -m venv --help >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        bash ci/apt-install.sh python3-venv >&2
    else
        echo "python3 -m venv is missing (Debian: python3-venv)" >&2
        exit 1
    fi
fi
mkdir -p target
building="$(mktemp -d target/leaseproof-clients-venv.XXXXXX)"
trap 'rm -rf "${building}"' EXIT
"${python}" -m venv "${building}" >&2
"${building}/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "${requirements}" >&2
"${building}/bin/pip" check >&2
cp "${requirements}" "${building}/requirements.txt"
rm -rf "${venv}"
mv "${building}" "${venv}"
trap - EXIT
see_package "${venv}"
# A venv's scripts name their own path: the move leaves them pointing at the
# temporary one, so call the interpreter directly, never bin/pip, from here on.
echo "${venv}/bin/python3"
