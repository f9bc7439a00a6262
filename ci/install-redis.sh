#!/usr/bin/env bash
# The lock-manager tests start a throwaway redis-server from the system's
# binaries (like the PostgreSQL cluster). Install it when it is missing.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; then
    echo "== redis-server present: $(redis-server --version 2>/dev/null || /usr/bin/redis-server --version)"
    exit 0
fi

echo "== installing redis-server (binary missing)"
# Installed with services held back: no system server is started, so there is
# nothing to stop afterwards (and no process is ever stopped by name).
bash "$(dirname "$0")/apt-install.sh" redis-server
command -v redis-server >/dev/null 2>&1
