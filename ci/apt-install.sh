#!/usr/bin/env bash
# Installs Debian packages without letting them start services: the tests start
# their own throwaway servers, and a package's system server (redis-server,
# postgresql, pgbouncer) would otherwise be left running — and stopping it
# afterwards by name could end a developer's own server. `policy-rc.d`
# answering 101 is Debian's documented way to say "start nothing"; an existing
# policy file is kept and put back.
#
#   bash ci/apt-install.sh redis-server faketime
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: ci/apt-install.sh PACKAGE..." >&2
    exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages ($*) and not root: install them, or point the tests at your own servers" >&2
    exit 1
fi

policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "${policy}" ]; then
    saved="$(mktemp)"
    cp -p "${policy}" "${saved}"
fi
restore_policy() {
    if [ -n "${saved}" ]; then
        mv -f "${saved}" "${policy}"
    else
        rm -f "${policy}"
    fi
}
trap restore_policy EXIT
printf '#!/bin/sh\nexit 101\n' > "${policy}"
chmod 755 "${policy}"

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "$@"
