#!/usr/bin/env bash
# Start LocalStack's S3 in host mode (no Docker) on 127.0.0.1, in the foreground (the caller stops it).
#   localstack/localstack.sh DATA_DIR PORT
# LocalStack gets a venv of its own in the user's cache dir ($TIERED_CACHE_DIR, else $XDG_CACHE_HOME/tiered, else
# ~/.cache/tiered), never inside the clone; created once, reused after, with the pins that let
# localstack-core 4.9.2 resolve on Python 3.11.
set -euo pipefail
data_dir=${1:?usage: localstack.sh DATA_DIR PORT}
port=${2:?usage: localstack.sh DATA_DIR PORT}
cache_root=${TIERED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tiered}
venv="$cache_root/localstack-4.9.2-venv"
mkdir -p "$cache_root"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import localstack" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "localstack-core[runtime]==4.9.2" "cbor2<5.7" "cryptography<44" "pyopenssl<24.3" "service_identity<24.2"
fi
mkdir -p "$data_dir/tmp"
export TMPDIR="$data_dir/tmp"  # LocalStack keeps its S3 objects under the temp dir: keep them in the test's dir
cd "$data_dir"  # never run from the repo root: nothing there may shadow the localstack package
export GATEWAY_LISTEN="127.0.0.1:$port" SERVICES=s3 LOCALSTACK_VOLUME_DIR="$data_dir/volume" DATA_DIR="$data_dir/data" \
  SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 SKIP_INFRA_DOWNLOADS=1 LOCALSTACK_CLI=0
exec "$venv/bin/python" -m localstack.runtime.main
