"""Run a PyTorch peer with glibc's allocator keeping freed memory (import this first, before torch).

Why: PyTorch allocates every activation and gradient afresh each step, and glibc hands large blocks back to the
kernel when they are freed (mmap'd blocks, and trimming the heap), so the next step touches new pages and takes a
page fault for each 4 KiB. On a bare host a fault costs ~0.1-0.3 us and this goes unnoticed; on some VMs a fault
traps to the hypervisor: on the 2-vCPU development VM of 2026-11-27 (AMD EPYC, KVM/PVM) a fault cost ~9 us, and
PyTorch 1.13 ran the quality CNN at 61-67 samples/s instead of 634-657 (a ReLU over 16.7 M floats took 245 ms,
130,869 faults in 5 calls; bench/RESULTS.md, "PyTorch peers and page faults"). ringtrain reuses its buffers from
step to step, so it does not pay this, and a ratio against a peer that does would not hold on another machine.
PyTorch's own CPU performance guide recommends a caching allocator (jemalloc, tcmalloc); glibc's tunables give the
same effect with nothing installed: mmap_threshold and trim_threshold at their maximum keep every freed block in the
heap for the next step.

ensure() re-executes the current script once with GLIBC_TUNABLES set (glibc reads it only at start-up) unless it
already holds both settings, or RINGTRAIN_PEER_MALLOC=default asks for glibc's defaults (to show the difference).
describe() says which ran, for the peer's environment line; minor_faults() counts this process's page faults."""
import os
import resource
import sys

TUNABLES = "glibc.malloc.mmap_threshold=2147483647:glibc.malloc.trim_threshold=4294967295"


def ensure():
    if os.environ.get("RINGTRAIN_PEER_MALLOC") == "default":
        return
    current = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.mmap_threshold=" in current and "glibc.malloc.trim_threshold=" in current:
        return
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = f"{current}:{TUNABLES}" if current else TUNABLES
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def describe():
    if os.environ.get("RINGTRAIN_PEER_MALLOC") == "default":
        return "glibc defaults (RINGTRAIN_PEER_MALLOC=default)"
    return "glibc, freed memory kept (GLIBC_TUNABLES=" + os.environ.get("GLIBC_TUNABLES", "") + ")"


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
