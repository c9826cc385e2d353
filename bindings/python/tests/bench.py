"""What the pip package costs, in one process, workloads interleaved round by
round:

- trivial exec (``return 1``) through ``exec_sync``, and the runtime's own
  share of it (``telemetry.durationMs``);
- one cell awaiting 50 tool calls in sequence: sync Python tools, async
  Python tools, and scripted tools the runtime answers itself in Rust, in
  the same session (the difference is the Python dispatch);
- the "no isolation" baseline Python code modes use today: the same work
  as Python source run by plain in-process ``exec()`` calling the same
  Python function 50 times.

Run from the venv ``cargo xtask test-python --release`` builds:
    cargo xtask test-python --release && target/package/python/venv/bin/python target/package/python/tests/bench.py 200
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from codemode import CodeMode


def echo_sync(i: int) -> dict[str, int]:
    """Echo (sync Python)."""
    return {"i": i}


async def echo_async(i: int) -> dict[str, int]:
    """Echo (async Python)."""
    return {"i": i}


def sequential(tool: str) -> str:
    return f"let s = 0; for (let i = 0; i < 50; i++) {{ const r = await tools.{tool}({{ i }}); s += r.i; }} return s;"


PLAIN = """
s = 0
for i in range(50):
    r = echo_sync(i=i)
    s += r["i"]
result = s
"""


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    cm = CodeMode(
        tools=[echo_sync, echo_async],
        scripted=[{"source": "client", "owner": "app", "name": "echo_rust", "description": "Echo (Rust)", "echoInput": True}],
    )
    inside: list[float] = []

    def check(r: dict[str, Any], want: Any) -> None:
        if r["status"] != "completed" or r["value"] != want:
            raise SystemExit(f"unexpected result: {str(r)[:300]}")

    def trivial() -> None:
        r = cm.exec_sync("return 1")
        check(r, 1)
        inside.append(r["telemetry"]["durationMs"])

    def plain() -> None:
        scope: dict[str, Any] = {"echo_sync": echo_sync}
        exec(compile(PLAIN, "<cell>", "exec"), scope)
        if scope["result"] != 1225:
            raise SystemExit("plain exec gave a wrong result")

    workloads = {
        "trivial exec": trivial,
        "50 sequential, sync Python tools": lambda: check(cm.exec_sync(sequential("echo_sync")), 1225),
        "50 sequential, async Python tools": lambda: check(cm.exec_sync(sequential("echo_async")), 1225),
        "50 sequential, Rust (scripted) tools": lambda: check(cm.exec_sync(sequential("echo_rust")), 1225),
        "plain in-process exec() of the same 50 calls (no isolation)": plain,
    }
    times: dict[str, list[float]] = {name: [] for name in workloads}
    for round_ in range(-5, rounds):
        for name, run in workloads.items():
            start = time.perf_counter()
            run()
            if round_ >= 0:
                times[name].append((time.perf_counter() - start) * 1000)
    cm.close()

    def quantile(xs: list[float], q: float) -> float:
        s = sorted(xs)
        return s[min(len(s) - 1, int(q * len(s)))]

    median = {name: statistics.median(xs) for name, xs in times.items()}
    print(f"rounds: {rounds} (after 5 warm-up rounds), Python {sys.version.split()[0]}")
    print("| workload | median ms | p90 ms |")
    print("|---|---|---|")
    for name, xs in times.items():
        print(f"| {name} | {median[name]:.3f} | {quantile(xs, 0.9):.3f} |")
    in_runtime = statistics.median(inside[5:])
    print(f"\ntrivial exec: {median['trivial exec']:.3f} ms wall, {in_runtime:.3f} ms of it in the runtime (telemetry.durationMs)")
    rust = median["50 sequential, Rust (scripted) tools"]
    for kind in ("sync", "async"):
        py = median[f"50 sequential, {kind} Python tools"]
        print(f"{kind} Python ÷ Rust tools: {py / rust:.2f}× ({(py - rust) / 50 * 1000:.1f} µs per call of Python dispatch)")
    print(f"sync Python tools in codemode ÷ plain exec(): {median['50 sequential, sync Python tools'] / median['plain in-process exec() of the same 50 calls (no isolation)']:.1f}×")


if __name__ == "__main__":
    main()
