#!/usr/bin/env python3
"""Groups `perf script` samples of one process by where the time goes.

Reads `perf script` text (with call chains) on stdin and prints each
group's share of the samples: the guest's compiled code (named through
CODEMODE_PERF_MAP=1), waking and sleeping threads (futex, eventfd, epoll,
the scheduler), system calls, JSON, allocation, and the host code.
A sample is named by its first frame (from the leaf) that falls in a group.

    perf record -F 1999 --call-graph fp -a -o perf.data -- sleep 8
    perf script -i perf.data --pid PID | python3 e2e/perf-groups.py
"""
import collections
import re
import sys

KERNEL = [
    ("wasm[0]", "guest (wasm)"),
    ("futex", "futex (a thread wakes or sleeps)"),
    ("eventfd", "eventfd (waking the I/O driver)"),
    ("mio::sys::unix::waker", "eventfd (waking the I/O driver)"),
    ("epoll", "epoll (a worker waits for I/O)"),
    ("ksys_write", "write syscall"),
    ("vfs_write", "write syscall"),
    ("ksys_read", "read syscall"),
    ("vfs_read", "read syscall"),
    ("schedule", "scheduler (switching threads)"),
    ("finish_task_switch", "scheduler (switching threads)"),
]
USER = [
    ("serde", "serde (JSON)"),
    ("JsonRpcMessage", "serde (JSON)"),
    ("malloc", "malloc/free/copy"),
    ("free", "malloc/free/copy"),
    ("memmove", "malloc/free/copy"),
    ("memcpy", "malloc/free/copy"),
    ("realloc", "malloc/free/copy"),
    ("_int_", "malloc/free/copy"),
    ("tokio::", "tokio"),
    ("codemode", "codemode host code"),
    ("rmcp", "rmcp"),
    ("wasmtime", "wasmtime"),
]


def frames(sample):
    out = []
    for line in sample.strip().split("\n")[1:]:
        line = line.strip()
        if not line:
            continue
        name = re.sub(r"^[0-9a-f]+ ", "", line).rsplit(" (", 1)[0]
        out.append(re.sub(r"\+0x[0-9a-f]+$", "", name))
    return out


def group(stack):
    for frame in stack[:12]:
        for needle, name in KERNEL:
            if needle in frame:
                return name
    for frame in stack[:6]:
        for needle, name in USER:
            if needle in frame:
                return name
    return "other"


def main():
    stacks = [f for f in (frames(s) for s in sys.stdin.read().split("\n\n")) if f]
    if not stacks:
        sys.exit("no samples on stdin (perf script output with call chains expected)")
    counts = collections.Counter(group(s) for s in stacks)
    print(f"{len(stacks)} samples")
    for name, n in counts.most_common():
        print(f"{100 * n / len(stacks):5.1f}%  {name}")


if __name__ == "__main__":
    main()
