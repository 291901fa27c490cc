#!/usr/bin/env bash
# Installs what the real-process tests drive, from Debian, when it is missing and we
# are root: chromium and chromium-driver (the dashboard's browser tests) and
# etcd-server (the cluster metadata tests). Never fails the build: without them
# those tests skip and say why.
set -u
need=()
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    need+=(chromium chromium-driver fonts-dejavu-core)
fi
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
    need+=(etcd-server)
fi
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "missing ${need[*]} and cannot apt-get install them: the browser and etcd tests will skip"
    exit 0
fi
echo "installing ${need[*]} for the browser and etcd tests"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }; then
    echo "could not install ${need[*]}: the tests needing them will skip"
fi
exit 0
