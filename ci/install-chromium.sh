#!/usr/bin/env bash
# The timeline pictures are tested in a real browser: headless Chromium from
# Debian's packages. Install it when it is missing.
set -euo pipefail

for candidate in chromium chromium-browser; do
    if command -v "${candidate}" >/dev/null 2>&1; then
        echo "== ${candidate} present: $("${candidate}" --version 2>/dev/null || echo unknown version)"
        exit 0
    fi
done

echo "== installing chromium (binary missing)"
if [ "$(id -u)" -ne 0 ]; then
    echo "chromium is missing and we are not root: install chromium, or set LEASEPROOF_CHROMIUM" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
command -v chromium >/dev/null 2>&1
