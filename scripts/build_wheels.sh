#!/usr/bin/env bash
# Builds the distributions into dist/: one abi3 wheel (CPython 3.11 and every later
# version) tagged manylinux2014, and the sdist. Zig (the ziglang package, a dev extra)
# links against glibc 2.17's symbols, so the wheel's manylinux tag is true and it installs
# on any glibc >= 2.17 Linux without a Rust toolchain; maturin audits the tag itself and
# fails the build if the library needs more.
# Usage: bash scripts/build_wheels.sh   (from the dev venv: needs maturin and ziglang)
set -euo pipefail
cd "$(dirname "$0")/.."

rm -f dist/durable_rpc-*.whl dist/durable_rpc-*.tar.gz
maturin build --release --zig --compatibility manylinux2014 --out dist
maturin sdist --out dist
ls -l dist
