#!/usr/bin/env bash
# Sets up everything the tests need on a fresh Debian machine, and does nothing that is done:
# uv (from PyPI), Debian's mosquitto and postgresql (servers the tests start themselves, on free
# ports: none is assumed running), a Java 17 runtime (for Spark and Apache Kafka), Debian's
# chromium (the docs' browser test), the workspace's venv, and Apache Kafka's jars (from Maven
# Central into ~/.cache/sluice, once).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if ! command -v uv >/dev/null 2>&1 && ! python3 -m uv --version >/dev/null 2>&1; then
  say "installing uv from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check uv
fi
UV="uv"; command -v uv >/dev/null 2>&1 || UV="python3 -m uv"

missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
# Debian keeps initdb off PATH, in /usr/lib/postgresql/<version>/bin (sluice.testing.postgres)
command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null \
  || missing+=(postgresql)
# the documentation site's browser test drives Debian's chromium (never a downloaded browser)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "Missing Debian packages: ${missing[*]}. Install them (apt-get install ${missing[*]}) and rerun." >&2
    exit 1
  fi
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

say "syncing the workspace (uv sync --locked)"
# Bytecode compiled once here: where PYTHONDONTWRITEBYTECODE is set (as on the machines this
# project is developed and tested on) Python never caches what it compiles, so every process
# (each Airflow task, Dagster run and CLI call of the tests) compiled Airflow, pyspark and
# pandas from source again: 6.1 s to import them, against 2.7 s from compiled files.
$UV sync --locked --all-packages --quiet --compile-bytecode
$UV run --locked --all-packages python -m compileall -q -j 0 core/src providers/airflow/src providers/dagster/src dags_examples >/dev/null
# Apache Kafka (the tests' reference broker) runs from jars resolved once into the user's cache
# (sluice.jars); a second run finds them there and touches no network. Set
# SLUICE_MAVEN_REPOSITORY to a Maven mirror behind a proxy.
if $UV run --locked --all-packages python -c "import sys, sluice.brokers as b, sluice.jars as j; sys.exit(0 if j.cached(b.KAFKA_COORDINATES) else 1)" 2>/dev/null; then
  :
else
  say "fetching Apache Kafka's jars into ${XDG_CACHE_HOME:-$HOME/.cache}/sluice (first time only)"
  if ! $UV run --locked --all-packages python -m sluice.jars >/dev/null; then
    say "warning: Apache Kafka's jars could not be fetched (see above); tests on Apache Kafka will fail until they are"
  fi
fi
# Kafka Connect and Debezium's PostgreSQL connector (the real change data capture tests), the
# same way.
if ! $UV run --locked --all-packages python -m sluice.testing.debezium_postgres >/dev/null; then
  say "warning: the jars of Kafka Connect and Debezium could not be fetched (see above)"
fi
# Azurite and fake-gcs-server (the Delta sink's tests on Azure Blob Storage and Google Cloud
# Storage), pinned, installed once into the same cache with npm and go (sluice.cloudservers).
if ! $UV run --locked --all-packages python -m sluice.cloudservers >/dev/null; then
  say "warning: Azurite or fake-gcs-server could not be installed (needs npm and go; see above)"
fi
say "ready: .venv has sluice-core, sluice-airflow, sluice-dagster and the dev tools"
