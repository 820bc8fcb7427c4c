#!/usr/bin/env bash
# Checks what a user gets from the wheel in dist/ (scripts/build_wheels.sh): its tags are
# cp311-abi3 and manylinux, it installs into a fresh venv with no Rust toolchain on PATH
# (so pip cannot quietly compile anything), and from there the package imports, the Rust
# codec round-trips a value and the CLI answers --version. Also that the sdist carries the
# protos and the Rust sources that its build needs. Any failure ends the script non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "check_wheel: $*" >&2; exit 1; }

shopt -s nullglob
wheels=(dist/durable_rpc-*.whl)
sdists=(dist/durable_rpc-*.tar.gz)
shopt -u nullglob
[ "${#wheels[@]}" -eq 1 ] || fail "expected one wheel in dist/, found ${#wheels[@]}"
[ "${#sdists[@]}" -eq 1 ] || fail "expected one sdist in dist/, found ${#sdists[@]}"
wheel="$(realpath "${wheels[0]}")"
sdist="${sdists[0]}"

# The filename and the WHEEL metadata must both say abi3 for CPython >= 3.11 on manylinux;
# a plain linux_x86_64 or cp311-cp311 tag is a wheel usable only where it was built.
case "$(basename "$wheel")" in
  durable_rpc-*-cp311-abi3-manylinux*_x86_64*.whl) ;;
  *) fail "wheel $(basename "$wheel") is not tagged cp311-abi3-manylinux*_x86_64" ;;
esac
python - "$wheel" <<'PY' || fail "wheel tags"
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/WHEEL"))
    tags = [ln.split(":", 1)[1].strip() for ln in zf.read(meta).decode().splitlines()
            if ln.startswith("Tag:")]
    libs = [n for n in zf.namelist() if n.endswith((".so", ".pyd"))]
    names = set(zf.namelist())
bad = [t for t in tags if not (t.startswith("cp311-abi3-manylinux") and t.endswith("_x86_64"))]
if not tags or bad:
    sys.exit(f"WHEEL tags {tags}: want only cp311-abi3-manylinux*_x86_64")
if libs != ["durable_rpc/_core.abi3.so"]:
    sys.exit(f"extension modules {libs}: want exactly durable_rpc/_core.abi3.so")
# `durable-rpc ui` serves its templates and static files from the package.
ui_assets = {"durable_rpc/ui/templates/base.html", "durable_rpc/ui/static/ui.js",
             "durable_rpc/ui/static/ui.css"}
if not ui_assets <= names:
    sys.exit(f"the wheel lacks the web UI's assets: {sorted(ui_assets - names)}")
print("wheel tags:", ", ".join(tags))
PY

# The sdist is built by maturin on the user's machine: it needs the crate (with the
# Python source of the exception classes that the extension embeds) and the protos.
listing="$(tar -tzf "$sdist")"
for want in rust_core/Cargo.toml rust_core/src/py/errors.py proto/durable_rpc/v1/ pyproject.toml; do
  grep -q "/$want" <<<"$listing" || fail "sdist $sdist lacks $want"
done

# PATH without any directory that holds cargo or rustc (~/.cargo/bin, /usr/bin on a
# system toolchain, ...): the install must need neither.
no_rust_path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] || continue
  case "$d" in *cargo* | *rustup*) continue ;; esac
  if [ -e "$d/cargo" ] || [ -e "$d/rustc" ]; then continue; fi
  no_rust_path="${no_rust_path:+$no_rust_path:}$d"
done
base_python="$(python -c 'import sys; print(sys._base_executable)')"

tmp="$(mktemp -d /tmp/durable-rpc-wheel.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
(
  export PATH="$no_rust_path"
  unset VIRTUAL_ENV CARGO_HOME RUSTUP_HOME
  ! command -v cargo >/dev/null && ! command -v rustc >/dev/null || fail "Rust is still on PATH"
  "$base_python" -m venv "$tmp/venv"
  # --only-binary: every dependency from a wheel too, so nothing is compiled anywhere.
  "$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --only-binary=:all: "$wheel"
  cd "$tmp" # not the repository: the import must come from the installed wheel
  "$tmp/venv/bin/python" - <<'PY'
import durable_rpc
from durable_rpc import _core, payload

assert "site-packages" in durable_rpc.__file__, durable_rpc.__file__
assert _core.__file__.endswith("_core.abi3.so"), _core.__file__
value = {"order": 42, "items": ["a", "b"], "paid": True, "total": 9.5, "note": None}
assert payload.decode(payload.encode(value)) == value
try:
    payload.decode(b"not a frame")
except _core.PayloadError as e:
    assert e.reason == "invalid_payload_framing", e.reason
else:
    raise AssertionError("a bad frame decoded")
print("import and codec round trip: ok")
# `durable-rpc ui` finds its templates and static files in the installed package.
from durable_rpc.ui._app import create_app

templates = create_app("127.0.0.1:7233").state.ui.templates
for name in ("base.html", "runs.html", "run.html", "signin.html"):
    templates.get_template(name)
print("web UI templates: ok")
# PostgreSQL's migrations read the hot path's function texts (store/pg_functions/*.sql).
from durable_rpc.store._migrations import PG_MIGRATIONS

assert any("drpc_record_decision" in s for m in PG_MIGRATIONS for s in m.statements)
print("PostgreSQL function texts: ok")
PY
  version="$("$tmp/venv/bin/durable-rpc" --version)"
  [ "$version" = "durable-rpc, version $("$tmp/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("durable-rpc"))')" ] \
    || fail "durable-rpc --version printed: $version"
  echo "$version"
)
echo "check_wheel: $(basename "$wheel") installs and works without Rust"
