#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and benchmarks (loopback only, trust auth).
#
#   scripts/pg_cluster.sh start DIR     initdb into DIR, start on a free 127.0.0.1 port,
#                                       create database durable_rpc, print its URL
#   scripts/pg_cluster.sh stop DIR      stop the server and remove DIR
#   scripts/pg_cluster.sh server-stop DIR / server-start DIR / restart DIR
#                                       stop/start the server only (same data, same port):
#                                       tests use them to simulate a database outage
#   scripts/pg_cluster.sh url DIR       print the URL again
#
# DIR must not exist or be empty. PG_CLUSTER_FSYNC=off trades crash safety of the
# machine (not of the server process) for speed; tests use it, benchmarks do not.
# initdb and postgres refuse to run as root: as root, they run as the `postgres` system
# user if it exists, else `nobody`, and DIR is handed to that user.
set -euo pipefail

PG_BIN="${PG_BIN:-}"
if [ -z "$PG_BIN" ]; then
  for candidate in /usr/lib/postgresql/*/bin; do
    [ -x "$candidate/initdb" ] && PG_BIN="$candidate"
  done
fi
if [ -z "$PG_BIN" ] && command -v initdb >/dev/null 2>&1; then
  PG_BIN="$(dirname "$(command -v initdb)")"
fi

die() { echo "pg_cluster: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: $0 start|stop|server-stop|server-start|restart|url DIR"
cmd="$1"
dir="$2"

as_owner() {
  # Runs a command as the cluster's owner (root cannot run postgres).
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$(cat "$dir/owner")" -- "$@"
  else
    "$@"
  fi
}

pg_ctl_() { as_owner "$PG_BIN/pg_ctl" -D "$dir/data" "$@"; }

server_start() {
  local port
  port="$(cat "$dir/port")"
  # -w: return once the server accepts connections. The socket lives in DIR, never /tmp.
  pg_ctl_ -w -t 60 -l "$dir/server.log" \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $dir/run" start >/dev/null \
    || { tail -n 30 "$dir/server.log" >&2 || true; die "postgres did not start"; }
}

server_stop() {
  if [ -f "$dir/data/postmaster.pid" ]; then
    pg_ctl_ -w -t 30 -m fast stop >/dev/null 2>&1 || pg_ctl_ -w -m immediate stop >/dev/null 2>&1 || true
  fi
}

url() { echo "postgresql://postgres@127.0.0.1:$(cat "$dir/port")/durable_rpc"; }

case "$cmd" in
  start)
    [ -n "$PG_BIN" ] || die "PostgreSQL binaries (initdb, pg_ctl) not found; set PG_BIN"
    mkdir -p "$dir"
    [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
    owner="$(id -un)"
    if [ "$(id -u)" -eq 0 ]; then
      if id postgres >/dev/null 2>&1; then owner=postgres; else owner=nobody; fi
    fi
    echo "$owner" >"$dir/owner"
    mkdir -p "$dir/run"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    echo "$port" >"$dir/port"
    [ "$(id -u)" -ne 0 ] || chown -R "$owner" "$dir"
    as_owner "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    {
      echo "max_connections = 200"
      echo "fsync = ${PG_CLUSTER_FSYNC:-on}"
      [ "${PG_CLUSTER_FSYNC:-on}" = "off" ] && echo "full_page_writes = off"
      echo "unix_socket_permissions = 0700"
    } >>"$dir/data/postgresql.conf"
    server_start
    as_owner "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
      -c "CREATE DATABASE durable_rpc" >/dev/null || die "cannot create the database"
    url
    ;;
  stop)
    [ -d "$dir" ] || exit 0
    [ -f "$dir/owner" ] && server_stop
    rm -rf "$dir"
    ;;
  server-stop) server_stop ;;
  server-start) server_start ;;
  restart) server_stop; server_start ;;
  url) url ;;
  *) die "unknown command $cmd" ;;
esac
