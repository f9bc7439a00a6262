#!/usr/bin/env bash
# The lock-manager tests start a throwaway redis-server from the system's
# binaries (like the PostgreSQL cluster). Install it when it is missing.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
    echo "== redis-server present: $(redis-server --version 2>/dev/null || /usr/bin/redis-server --version)"
    exit 0
fi

echo "== installing redis-server (binary missing)"
if [ "$(id -u)" -ne 0 ]; then
    echo "redis-server is missing and we are not root: install redis-server, or set REDIS_URL" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends redis-server
# The Debian package starts a system server; the tests do not use it.
if command -v service >/dev/null 2>&1; then
    service redis-server stop >/dev/null 2>&1 || true
fi
pkill -x redis-server >/dev/null 2>&1 || true
command -v redis-server >/dev/null 2>&1
