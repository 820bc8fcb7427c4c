#!/usr/bin/env bash
# Installs everything the tests need into ./.venv, then runs every lint and test.
# The README's test command and .ci/run both run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "python environment (.venv) and the package with its Rust extension (release build)"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
python -m pip install --quiet --upgrade pip
# The extension is abi3 (_core.abi3.so); a version-specific one left by an older build
# would shadow it on import, so it goes.
rm -f python/durable_rpc/_core.cpython-*.so
python -m pip install --quiet -e ".[dev]"

step "rust: fmt, clippy (pure core and with the PyO3 adapters), tests"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features python -- -D warnings
cargo test --quiet

step "python lint: ruff, mypy (strict), stubtest for _core.pyi, generated protobuf code is fresh"
ruff check .
ruff format --check .
mypy
python -m mypy.stubtest durable_rpc._core
python scripts/gen_proto.py --check

step "wheels: abi3 manylinux wheel and sdist into dist/, the wheel installed and run without Rust"
bash scripts/build_wheels.sh
bash scripts/check_wheel.sh

step "PostgreSQL for the store and scale-out tests (scripts/pg_cluster.sh; stopped on exit)"
if [ -z "${DURABLE_RPC_TEST_PG_URL:-}" ]; then
  PG_TMP="$(mktemp -d /tmp/durable-rpc-pg.XXXXXX)"
  chmod 755 "$PG_TMP" # the postgres user must reach the cluster directory
  trap 'bash scripts/pg_cluster.sh stop "$PG_TMP/cluster"; rm -rf "$PG_TMP"' EXIT
  if DURABLE_RPC_TEST_PG_URL="$(PG_CLUSTER_FSYNC=off bash scripts/pg_cluster.sh start "$PG_TMP/cluster")"; then
    export DURABLE_RPC_TEST_PG_URL DURABLE_RPC_TEST_PG_DIR="$PG_TMP/cluster"
    echo "PostgreSQL at $DURABLE_RPC_TEST_PG_URL"
  elif [ "${CI:-}" = "true" ]; then
    echo "PostgreSQL could not be started; CI requires it" >&2
    exit 1
  else
    echo "warning: PostgreSQL could not be started; its tests will be skipped" >&2
  fi
fi

step "pytest"
# Each test's own timeout (pyproject: 300 s, thread method) ends a stuck test; this cap
# ends the whole run if anything outside a test (a fixture's teardown, collection) hangs.
# The slowest tests are listed at the end, so the suite's time stays visible.
timeout --kill-after=60 3000 python -m pytest -q -p no:cacheprovider --durations=25 "$@"
