#!/bin/sh
# SPDX-License-Identifier: MIT
# scripts/redis-cluster.sh - a real Redis Cluster on loopback for the
# remote tier's tests and benchmark: 3 masters, 3 replicas, free ports.
#
#   redis-cluster.sh start DIR [MAXMEMORY]  start it in DIR, wait for
#                                           cluster_state:ok, print the seeds
#   redis-cluster.sh stop DIR               kill every server by its PID
#   redis-cluster.sh wait DIR [SECONDS]     wait until every live node says ok
#   redis-cluster.sh masters DIR            "PORT PID" of each master now
#   redis-cluster.sh seeds DIR              host:port,... of every node
#
# Exits 77 (the automake convention for "skipped") when redis-server or
# redis-cli is not installed: apt-get install redis-server redis-tools.
set -u
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|wait|masters|seeds DIR" >&2; exit 2; }
NODES=6

have() { command -v "$1" >/dev/null 2>&1; }

cli() {	# cli PORT ARGS...
	p=$1; shift
	redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null
}

ports() { cat "$dir/ports"; }

seeds() {
	s=""
	for p in $(ports); do s="$s${s:+,}127.0.0.1:$p"; done
	echo "$s"
}

# wait SECONDS: every node that answers says cluster_state:ok with all
# 16384 slots served, and every replica is in sync with its master
wait_ok() {
	t=$(( ${1:-60} * 10 ))
	while [ "$t" -gt 0 ]; do
		ok=1 seen=0
		for p in $(ports); do
			info=$(cli "$p" cluster info) || continue
			seen=1
			echo "$info" | grep -q 'cluster_state:ok' || ok=0
			echo "$info" | grep -q 'cluster_slots_ok:16384' || ok=0
			# a replica that has not synced once cannot take over
			repl=$(cli "$p" info replication)
			echo "$repl" | grep -q 'role:slave' && { echo "$repl" | grep -q 'master_link_status:up' || ok=0; }
		done
		[ "$seen" = 1 ] && [ "$ok" = 1 ] && return 0
		sleep 0.1
		t=$((t - 1))
	done
	echo "redis-cluster: not ok after ${1:-60} s" >&2
	return 1
}

free_port() {	# a port whose cluster bus port (+10000) is free too, both
		# below the kernel's ephemeral ports (32768 up)
	while :; do
		p=$(( 10000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 ))
		ss -Htln "sport = :$p or sport = :$((p + 10000))" 2>/dev/null | grep -q . || { echo "$p"; return; }
	done
}

case $cmd in
start)
	have redis-server && have redis-cli || {
		echo "redis-cluster: redis-server/redis-cli not installed (apt-get install redis-server redis-tools)" >&2
		exit 77
	}
	maxmem=${3:-0}
	mkdir -p "$dir"
	# whatever fails from here stops what was started
	trap '[ $? = 0 ] || "$0" stop "$dir"' EXIT
	: > "$dir/ports"
	: > "$dir/pids"
	i=0
	while [ "$i" -lt "$NODES" ]; do
		p=$(free_port)
		mkdir -p "$dir/$p"
		# node-timeout 2 s: a dead master is replaced within seconds
		redis-server --port "$p" --bind 127.0.0.1 --protected-mode no \
			--cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
			--cluster-node-timeout 2000 --repl-diskless-sync-delay 0 --dir "$dir/$p" --save '' --appendonly no \
			--maxmemory "$maxmem" --maxmemory-policy allkeys-lru \
			--client-output-buffer-limit 'replica 0 0 0' \
			--logfile "$dir/$p/log" --daemonize no </dev/null >/dev/null 2>&1 &
		echo "$!" >> "$dir/pids"
		echo "$p" >> "$dir/ports"
		i=$((i + 1))
	done
	for p in $(ports); do
		t=100
		until cli "$p" ping | grep -q PONG; do
			t=$((t - 1))
			[ "$t" -gt 0 ] || { echo "redis-cluster: node $p did not start (see $dir/$p/log)" >&2; exit 1; }
			sleep 0.05
		done
	done
	addrs=""
	for p in $(ports); do addrs="$addrs 127.0.0.1:$p"; done
	# shellcheck disable=SC2086
	redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
		echo "redis-cluster: create failed (see $dir/create.log)" >&2; exit 1; }
	wait_ok 60 || exit 1
	seeds
	;;
stop)
	[ -f "$dir/pids" ] || exit 0
	for pid in $(cat "$dir/pids"); do
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in $(cat "$dir/pids"); do
		t=50
		while kill -0 "$pid" 2>/dev/null && [ "$t" -gt 0 ]; do sleep 0.1; t=$((t - 1)); done
		kill -KILL "$pid" 2>/dev/null
	done
	rm -f "$dir/pids"
	;;
wait)
	wait_ok "${3:-60}"
	;;
masters)
	n=1
	for p in $(ports); do
		pid=$(sed -n "${n}p" "$dir/pids")
		n=$((n + 1))
		if cli "$p" role | head -1 | grep -qx master; then echo "$p $pid"; fi
	done
	;;
seeds)
	seeds
	;;
*)
	echo "usage: $0 start|stop|wait|masters|seeds DIR" >&2
	exit 2
	;;
esac
