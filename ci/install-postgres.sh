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
# Services held back: the Debian package's system cluster is never started.
bash "$(dirname "$0")/apt-install.sh" postgresql postgresql-contrib
have_postgres_binaries
