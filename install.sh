#!/usr/bin/env bash
# Installs SARP (compiled, editable) with its test and benchmark extras into the active Python
# environment, then runs the main job: the quick backend-comparison benchmark.
#   bash install.sh             install, then `sarp-bench run --quick`
#   bash install.sh --no-bench  install only
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${VIRTUAL_ENV:-}" ] && [ "${SARP_ALLOW_SYSTEM_PYTHON:-}" != 1 ]; then
  echo "install.sh: activate a virtual environment first (python3 -m venv .venv && . .venv/bin/activate)" >&2
  exit 2
fi

# The benchmark's recovery anchor is a real redis-server (Debian's package); without it that row
# is reported as n/a.
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; } \
      || echo "install.sh: could not install redis-server; the Redis anchor will be n/a" >&2
  else
    echo "install.sh: redis-server not found (apt-get install redis-server); the Redis anchor will be n/a" >&2
  fi
fi

python -m pip install --upgrade pip
# The WiredTiger Python binding is built from its source distribution: it needs CMake, Ninja
# and SWIG older than 4.5 (4.5 dropped the PyInt_* macros its wrapper uses).
python -m pip install "swig==4.2.1" cmake ninja
scripts="$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
# Its setup.py configures CMake without a build type, and WiredTiger's default is Debug: -Og,
# and diagnostic assertions that abort the process when a write fails (a full disk). A cmake
# shim adds Release to that configure step. The wheel is kept in a cache of its own (pip's may
# hold a Debug build), one per Python version, so the build runs once.
wiredtiger="$(grep -o '"wiredtiger==[^"]*"' pyproject.toml | tr -d '"')"
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/sarp/wheels/$(python -c 'import sys; print(sys.implementation.cache_tag)')"
if ! compgen -G "$wheels/${wiredtiger/==/-}-*.whl" >/dev/null; then
  shim="$(mktemp -d)"
  printf '#!/bin/sh\ncase " $* " in *" -B "*) exec "%s/cmake" -DCMAKE_BUILD_TYPE=Release "$@";; esac\nexec "%s/cmake" "$@"\n' \
    "$scripts" "$scripts" > "$shim/cmake"
  chmod +x "$shim/cmake"
  PATH="$shim:$scripts:$PATH" python -m pip wheel --no-deps --no-cache-dir -w "$wheels" "$wiredtiger"
  rm -rf "$shim"
fi
python -m pip install --no-deps --force-reinstall "$wheels/${wiredtiger/==/-}"-*.whl
if ! python -c 'import sys, wiredtiger; sys.exit(wiredtiger.diagnostic_build())'; then
  echo "install.sh: the WiredTiger installed is a diagnostic (Debug) build" >&2
  exit 1
fi
PATH="$scripts:$PATH" python -m pip install -e ".[test,bench]"

if [ "${1:-}" != "--no-bench" ] && command -v sarp-bench >/dev/null && sarp-bench --help >/dev/null 2>&1; then
  sarp-bench run --quick
fi
