#!/bin/sh
# The local cluster's stand-in for the official postgres image's entrypoint
# (no registry here to pull that image from). It honours the same interface
# the chart uses, and nothing more: POSTGRES_PASSWORD (required),
# POSTGRES_USER (default postgres), POSTGRES_DB (default: the user's name) and
# PGDATA. On an empty PGDATA it runs initdb with scram-sha-256 for TCP and
# trust on the Unix socket (inside the pod only), listens on every address,
# and creates the database; then it runs the command (`postgres`).
set -eu
: "${PGDATA:?PGDATA must be set}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: POSTGRES_PASSWORD is not set; the database would have no password" >&2
    exit 1
  fi
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile="$(mktemp)"
  printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    createdb -U "$user" "$db"
    pg_ctl -D "$PGDATA" -m fast -w stop
  fi
  echo "initialized $PGDATA: user $user, database $db"
fi
exec "$@"
