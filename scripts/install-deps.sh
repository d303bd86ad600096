#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/install-deps.sh - install the Debian packages kvmm builds and
# tests with, when they are missing and we are root.  Not root: say what
# is missing and carry on (the build then uses what it finds).
set -u
PKGS="gcc make pkg-config libxxhash-dev libcunit1-dev libjansson-dev liburing-dev libnuma-dev gnuplot-nox fio"
# the remote tier: hiredis to build it, redis-server for its tests
PKGS="$PKGS libhiredis-dev redis-server redis-tools"
# kvmmd --kv-events: ZMQ, msgpack-c, libcrypto (vLLM's KV events)
PKGS="$PKGS libzmq3-dev libmsgpack-dev libssl-dev"
# kvmmd --metrics: libmicrohttpd; its tests: promtool and a Prometheus server
PKGS="$PKGS libmicrohttpd-dev prometheus"
# the Python package and make check's pytest: a venv with pip (ensurepip),
# and Python.h for its cffi extension; without them pytest is skipped
PKGS="$PKGS python3 python3-dev python3-venv python3-pip"
# make fuzz: clang with libFuzzer
[ "${KVMM_FUZZ:-0}" = 1 ] && PKGS="$PKGS clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: missing:$missing (run 'make deps' as root to install them)" >&2
	exit 0
fi
echo "  DEPS   $missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends $missing >/dev/null
