#!/bin/sh
# Patroni runs this once, on the node that bootstraps the cluster, with a
# connection string to it as the only argument: the role and the database
# ledgerd uses. The password comes from the environment (LEDGER_DB_PASSWORD),
# through a psql variable, so no quoting can break it.
set -eu
psql "$1" -v ON_ERROR_STOP=1 -v pw="$LEDGER_DB_PASSWORD" <<'SQL'
CREATE ROLE ledger LOGIN PASSWORD :'pw';
CREATE DATABASE ledger OWNER ledger;
SQL
