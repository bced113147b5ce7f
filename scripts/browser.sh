#!/usr/bin/env bash
# Makes a headless Chromium available for the report's browser test (tests/browser): Debian's
# `chromium` package, installed with apt when missing (CI runs as root), driven by Playwright from
# PyPI (a test extra) with executable_path set to it, so no browser build is ever downloaded.
# Prints the executable's path on the last line; exits non-zero with a reason when it cannot.
set -euo pipefail
for candidate in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
        echo "$candidate"
        exit 0
    fi
done
if ! command -v apt-get >/dev/null; then
    echo "[browser] no chromium and no apt-get to install it" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "[browser] no chromium, and installing Debian's chromium package needs root" >&2
    exit 1
fi
echo "[browser] installing Debian's chromium package" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
echo /usr/bin/chromium
