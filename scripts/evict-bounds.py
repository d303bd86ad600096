#!/usr/bin/env python3
"""Bounds on what an online eviction policy can win on a block trace.

Replays a Mooncake-format trace at block level the way ../shared/bench
describes (sequential; a request hits the longest resident prefix of its
blocks; afterwards all its blocks are resident; only unlocked leaves are
evicted) under a few insertion/eviction rules, including two oracles that
know more than any online policy can:

  lru             the reference
  bip-N           bimodal insertion: a request's new blocks enter at the cold
                  end unless it hit or a 1-in-N coin says otherwise
  knows-reuse     oracle: knows whether a chain will ever be reused, not when
  knows-reuse-bip-N   the same oracle with bimodal insertion among the reused

Usage: scripts/evict-bounds.py TRACE [CAPACITY ...]
"""
import heapq, json, random, sys

COLD = 1 << 40


def load(path):
    reqs = [json.loads(l)["hash_ids"] for l in open(path) if l.strip()]
    parent = {}
    for r in reqs:
        for j, b in enumerate(r):
            parent[b] = r[j - 1] if j else None
    # reused[i]: some later request extends request i's chain
    seen, owner, reused = set(), {}, [False] * len(reqs)
    for j, r in enumerate(reqs):
        k = 0
        while k < len(r) and r[k] in seen:
            k += 1
        if k > 1:
            reused[owner[r[k - 1]]] = True
        for b in r:
            seen.add(b)
            owner[b] = j
    return reqs, parent, reused


def replay(reqs, parent, cap, keyfn):
    res, kids, key, ver, heap = set(), {}, {}, {}, []
    hit = total = 0
    for i, r in enumerate(reqs):
        k = 0
        while k < len(r) and r[k] in res:
            k += 1
        hit += k
        total += len(r)
        locked, held = set(r[:k]), []
        while len(res) + len(r) - k > cap:
            kk, vv, v = heapq.heappop(heap)
            if v not in res or ver[v] != vv:
                continue
            if v in locked:
                held.append((kk, vv, v))
                continue
            if kids.get(v, 0):
                continue            # re-queued when its last child goes
            res.discard(v)
            p = parent[v]
            if p is not None and p in res:
                kids[p] -= 1
                if not kids[p]:
                    heapq.heappush(heap, (key[p], ver[p], p))
        for h in held:
            heapq.heappush(heap, h)
        ks = keyfn(i, r, k)
        for b in r:
            if b not in res:
                res.add(b)
                if parent[b] is not None:
                    kids[parent[b]] = kids.get(parent[b], 0) + 1
        for b, kb in zip(r, ks):
            key[b] = kb
            ver[b] = ver.get(b, 0) + 1
            heapq.heappush(heap, (kb, ver[b], b))
    return hit / total


def policy(name, reused):
    rnd = random.Random(1)
    n = int(name.rsplit("-", 1)[1]) if name[-1].isdigit() else 0

    def key(i, r, k):
        warm = True
        if name.startswith("knows-reuse"):
            warm = reused[i]
        if warm and n:
            warm = k > 1 or rnd.random() < 1 / n
        return [i] * len(r) if warm else [i] * k + [i - COLD] * (len(r) - k)
    return key


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    reqs, parent, reused = load(sys.argv[1])
    caps = [int(c) for c in sys.argv[2:]] or [1000, 10000]
    names = ["lru", "bip-16", "knows-reuse", "knows-reuse-bip-4"]
    out = []
    for cap in caps:
        for name in names:
            h = replay(reqs, parent, cap, policy(name, reused))
            out.append({"capacity": cap, "policy": name,
                        "block_hit_rate": round(h, 4)})
            print(json.dumps(out[-1]), flush=True)


if __name__ == "__main__":
    main()
