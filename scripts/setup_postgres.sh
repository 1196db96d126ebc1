#!/usr/bin/env bash
# The tests start a PostgreSQL server (tune --storage postgresql://...): `make test` runs this
# to install the server where its binaries are missing (a fresh Debian machine; needs root, as
# CI runs). `make demo` needs no database and does not wait for it.
set -euo pipefail
if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "[setup] installing PostgreSQL (apt-get) for the tuning tests"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
else
  echo "[setup] note: PostgreSQL is not installed; the tests that start one will fail (apt-get install postgresql)"
fi
