#!/usr/bin/env bash
# The real-server tests start a throwaway cluster from the system's PostgreSQL
# binaries (initdb, pg_ctl, postgres). Install them when they are missing.
set -euo pipefail

have_postgres_binaries() {
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

if have_postgres_binaries; then
    echo "== PostgreSQL binaries present: $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tr '\n' ' ')"
    exit 0
fi

echo "== installing PostgreSQL (binaries missing)"
if [ "$(id -u)" -ne 0 ]; then
    echo "PostgreSQL binaries are missing and we are not root: install postgresql, or set DATABASE_URL" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends postgresql postgresql-contrib
# The Debian package starts a system cluster; the tests do not use it.
if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters --no-header 2>/dev/null | while read -r version name _; do
        pg_ctlcluster "$version" "$name" stop || true
    done
fi
have_postgres_binaries
