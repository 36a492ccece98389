#!/usr/bin/env bash
# System packages the tests use: real Nsight Systems (Debian non-free) for the end-to-end
# capture test, Chromium for the HTML report's browser test, a C compiler for the wrapper's
# fast path and the ingest's SQLite scan. Idempotent; needs root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
command -v nsys >/dev/null 2>&1 || need+=(nsight-systems nsight-systems-target)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# .ci/run installs into a fresh virtual environment: Debian's Python makes one with python3-venv
python -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
# a C compiler and Python's headers build the wrapper's C fast path (nsyscomm/capture/_fastpath.c);
# g++ is what torch.compile's Inductor needs for its CPU code (tests/capture/test_capture_wrapper.py)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v g++ >/dev/null 2>&1 || need+=(g++)
python -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || need+=(python3-dev)
# SQLite's headers build the ingest's C scan of nsys exports (nsyscomm/ingest/nsys/_sqlite_scan.c)
[ -e /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
[ ${#need[@]} -eq 0 ] && { echo "system packages present"; exit 0; }

if ! apt-cache policy nsight-systems 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  # nsys lives in Debian's non-free component: reuse this machine's own Debian mirror entry
  src=/etc/apt/sources.list.d/debian.sources
  uri=$(awk '/^URIs:/ && !/security/ {print $2; exit}' "$src" 2>/dev/null || true)
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  cat > /etc/apt/sources.list.d/nsyscomm-nonfree.sources <<SRC
Types: deb
URIs: ${uri:-http://deb.debian.org/debian}
Suites: ${suite}
Components: non-free contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
