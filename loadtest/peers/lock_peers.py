"""The lock benchmark of `seckill-bench lock`, run with the Python lock libraries people use.

`seckill-bench lock peers` runs this script beside its own locks (`loadtest/src/lock/peers.rs`);
`cargo xtask setup` installs the pinned libraries into the project's venv
(`~/.cache/seckill-bench/venv`, see `xtask/src/setup.rs`). By hand:

    ~/.cache/seckill-bench/venv/bin/python loadtest/peers/lock_peers.py \\
        --library kazoo --redis-url redis://127.0.0.1:6379 --zookeeper 127.0.0.1:2181

The workload is the one of `loadtest/src/lock.rs`: W workers contend for one lock for S
seconds; each holder reads a counter in Redis and writes it back plus one, as two separate
commands (GET, then SET), then releases. Under a correct lock no two increments overlap, so
`violations = grants - final counter` is 0. Each acquire waits at most `--wait` seconds (then
the worker asks again); its latency counts only when it was granted, from the moment the worker
asked. The lease is `--lease` seconds (the ZooKeeper session timeout for kazoo). The hand-off
time runs from a holder's release call to the next grant.

How the libraries are used, as their documentation shows a threaded program using them:

* the workers are threads (`threading.Thread`), the Python user's way of running W at once;
* every library gets ONE client object shared by all threads: one `redis.Redis` (its
  connection pool hands each thread a connection of its own while a command runs), or one
  started `KazooClient` (one session, one connection, which kazoo multiplexes); each thread
  makes its own lock object on that client. `seckill-bench lock --clients 1` shares one lock
  client among its workers the same way;
* the probe has a client of its own (a second `redis.Redis`), as the Rust bench has a pool of
  its own for it.

The libraries, with their defaults except for the lease:

* `python-redis-lock`: `redis_lock.Lock(client, name, expire=lease)`. A waiter blocks in
  `BLPOP` on a signal list that the release script pushes one element to: one waiter woken per
  release, no polling. With `--renewal`, `auto_renewal=True` as well: the like-for-like of
  `redis-watchdog`'s watchdog (a thread renews the lease while the lock is held; it is started
  and joined per acquisition, which costs time). Without it, a holder that outlives the lease
  loses the lock unawares.
* `redis-py`: `client.lock(name, timeout=lease, blocking_timeout=wait)`, its default
  `sleep=0.1`: a waiter polls `SET NX` every 100 ms.
* `kazoo`: `client.Lock(path)`, the Curator-like recipe (sequential ephemeral nodes, a watch on
  the predecessor).

Prints one JSON object: the keys of `seckill-bench lock --json` that apply here.
"""

import argparse
import json
import math
import sys
import threading
import time
import uuid
from importlib import metadata

import redis

LIBRARIES = ("python-redis-lock", "redis-py", "kazoo")
DISTRIBUTION = {"python-redis-lock": "python-redis-lock", "redis-py": "redis", "kazoo": "kazoo"}


def quantile(sorted_us, q):
    """The smallest recorded value that at least a share `q` of the values do not exceed."""
    if not sorted_us:
        return 0
    return sorted_us[max(0, math.ceil(q * len(sorted_us)) - 1)]


class Subject:
    """One library's lock, made once per worker thread; `acquire` says whether it was granted."""

    def __init__(self, args, run):
        self.args = args
        self.name = f"seckill-bench:peers:{run}"
        self.zk = None
        if args.library == "kazoo":
            from kazoo.client import KazooClient

            self.zk = KazooClient(hosts=args.zookeeper, timeout=args.lease)
            self.zk.start()
            self.path = f"/seckill-bench-peers/{run}"
        else:
            self.redis = redis.Redis.from_url(args.redis_url)

    def lock(self):
        library, args = self.args.library, self.args
        if library == "python-redis-lock":
            import redis_lock

            return redis_lock.Lock(
                self.redis, self.name, expire=int(args.lease), auto_renewal=args.renewal
            )
        if library == "redis-py":
            return self.redis.lock(self.name, timeout=args.lease, blocking_timeout=args.wait)
        return self.zk.Lock(self.path)

    def acquire(self, lock):
        library, wait = self.args.library, self.args.wait
        if library == "python-redis-lock":
            # It takes whole seconds.
            return lock.acquire(blocking=True, timeout=max(1, round(wait)))
        if library == "redis-py":
            return lock.acquire()
        from kazoo.exceptions import LockTimeout

        try:
            return lock.acquire(timeout=wait)
        except LockTimeout:
            return False

    def close(self):
        if self.zk is not None:
            self.zk.delete(self.path, recursive=True)
            self.zk.stop()
            self.zk.close()


class Handoffs:
    """From a release call to the next grant (one lock: grants and releases alternate)."""

    def __init__(self):
        self.guard = threading.Lock()
        self.released = None
        self.times_us = []

    def releasing(self):
        with self.guard:
            self.released = time.perf_counter()

    def granted(self, now):
        with self.guard:
            if self.released is not None:
                self.times_us.append(int((now - self.released) * 1e6))
                self.released = None


def worker(subject, probe, counter, end, handoffs, out, errors):
    try:
        lock = subject.lock()
        latencies, grants = [], 0
        while time.monotonic() < end:
            asked = time.perf_counter()
            if not subject.acquire(lock):
                continue
            now = time.perf_counter()
            handoffs.granted(now)
            latencies.append(int((now - asked) * 1e6))
            grants += 1
            value = probe.get(counter)
            probe.set(counter, int(value or 0) + 1)
            handoffs.releasing()
            lock.release()
        out.append((grants, latencies))
    except Exception as e:  # noqa: BLE001 - reported in the JSON, the run fails
        errors.append(f"{type(e).__name__}: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", choices=LIBRARIES, required=True)
    parser.add_argument("--redis-url", required=True, help="probe counter (and the Redis locks)")
    parser.add_argument("--zookeeper", help="host:port[,…], for kazoo")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--lease", type=float, default=10.0, help="seconds")
    parser.add_argument("--wait", type=float, default=1.0, help="seconds one acquire may wait")
    parser.add_argument(
        "--renewal", action="store_true", help="python-redis-lock with auto_renewal=True"
    )
    args = parser.parse_args()
    if args.library == "kazoo" and not args.zookeeper:
        parser.error("kazoo needs --zookeeper")

    run = uuid.uuid4().hex
    counter = f"seckill-bench:lock-probe:{run}"
    probe = redis.Redis.from_url(args.redis_url)
    subject = Subject(args, run)
    out, errors, handoffs = [], [], Handoffs()
    start = time.monotonic()
    end = start + args.seconds
    threads = [
        threading.Thread(target=worker, args=(subject, probe, counter, end, handoffs, out, errors))
        for _ in range(args.workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    final = int(probe.get(counter) or 0)
    probe.delete(counter)
    subject.close()

    grants = sum(g for g, _ in out)
    latencies = sorted(us for _, ls in out for us in ls)
    handoff_us = sorted(handoffs.times_us)
    json.dump(
        {
            "library": args.library,
            "renewal": args.renewal,
            "version": metadata.version(DISTRIBUTION[args.library]),
            "python": sys.version.split()[0],
            "workers": args.workers,
            "clients": 1,
            "seconds": elapsed,
            "acquisitions": grants,
            "acquisitions_per_sec": grants / elapsed,
            "acquire_p50_us": quantile(latencies, 0.50),
            "acquire_p99_us": quantile(latencies, 0.99),
            "acquire_max_us": latencies[-1] if latencies else 0,
            "violations": grants - final,
            "handoff_p50_us": quantile(handoff_us, 0.50) if handoff_us else None,
            "grants_per_worker": [g for g, _ in out],
            "errors": errors,
        },
        sys.stdout,
    )
    print()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
