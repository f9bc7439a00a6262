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
bash "$(dirname "$0")/apt-install.sh" chromium fonts-dejavu-core
command -v chromium >/dev/null 2>&1
