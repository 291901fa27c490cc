#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the dashboard's browser tests
# when they are missing and we are root. Never fails the build: without a browser
# those tests skip and say why.
set -u
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "no chromium/chromedriver and cannot apt-get install them: the dashboard's browser tests will skip"
    exit 0
fi
echo "installing chromium and chromium-driver for the dashboard's browser tests"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver fonts-dejavu-core >/dev/null; }; then
    echo "could not install chromium: the dashboard's browser tests will skip"
fi
exit 0
