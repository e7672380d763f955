"""Keep llama.cpp off Intel's AMX tiles in this process and its children, and nothing else.

llama.cpp's AMX buffer type exists only while ``arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)``
succeeds (ggml-cpu/amx/amx.cpp, ``ggml_amx_init``); where it fails, llama.cpp says "AMX is not ready
to be used!" and puts the weights in its other extra buffer type, the repacked layouts (CPU_REPACK),
whose kernels are AVX2/AVX-512.  On a machine whose virtual CPU grants that permission and then faults
on ``tileloadd``, answering the request with EPERM is the narrowest switch there is: the repacked
kernels stay (``use_extra_bufts = false`` turns them off too: 1.25x slower one-token decodes on the
1.5B test model, docs/benchmarks.md).

The answer is a seccomp filter of four checks (x86-64, ``arch_prctl``, ``ARCH_REQ_XCOMP_PERM``: EPERM;
everything else allowed), installed on every thread of the process (``SECCOMP_FILTER_FLAG_TSYNC``)
and inherited by the processes it starts: a llama-server started by SpecChat is kept off the tiles
the same way.  It cannot be removed, so it is installed only where the CPU probe found AMX faulting,
before the first model loads.  Linux x86-64 only; elsewhere :func:`deny` answers False and the caller
turns the extra buffer types off instead.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import threading

ARCH_REQ_XCOMP_PERM = 0x1023
_NR_ARCH_PRCTL = 158  # x86-64
_NR_SECCOMP = 317  # x86-64
_AUDIT_ARCH_X86_64 = 0xC000003E
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO_EPERM = 0x00050000 | 1
_LD_ABS_W, _JEQ_K, _RET_K = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K

# struct seccomp_data: int nr (0), u32 arch (4), u64 instruction_pointer (8), u64 args[6] (16)
PROGRAM = (
    (_LD_ABS_W, 0, 0, 4),  # A = arch
    (_JEQ_K, 0, 5, _AUDIT_ARCH_X86_64),  # another ABI: allow
    (_LD_ABS_W, 0, 0, 0),  # A = syscall number
    (_JEQ_K, 0, 3, _NR_ARCH_PRCTL),  # not arch_prctl: allow
    (_LD_ABS_W, 0, 0, 16),  # A = low 32 bits of args[0]
    (_JEQ_K, 0, 1, ARCH_REQ_XCOMP_PERM),  # another arch_prctl request: allow
    (_RET_K, 0, 0, _RET_ERRNO_EPERM),  # the tile permission: refused
    (_RET_K, 0, 0, _RET_ALLOW),
)


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


_lock = threading.Lock()
_installed = False


def supported() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def installed() -> bool:
    """Whether this process refuses the tile permission (then a probe run from it would prove nothing)."""
    return _installed


def deny() -> bool:
    """Install the filter (once per process); whether the tile permission is now refused here."""
    global _installed
    with _lock:
        if _installed:
            return True
        if not supported():
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        filters = (_Filter * len(PROGRAM))(*[_Filter(*f) for f in PROGRAM])
        program = _Program(len(PROGRAM), filters)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        if libc.syscall(_NR_SECCOMP, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(program)) != 0:
            return False
        _installed = True
        return True


def tile_permission_errno() -> int:
    """Ask for the tile permission the way llama.cpp does: 0 when granted, else the errno (EPERM once
    :func:`deny` ran; EINVAL or EOPNOTSUPP on a CPU or kernel without AMX).  For tests and --self-test."""
    libc = ctypes.CDLL(None, use_errno=True)
    xtiledata = 18
    if libc.syscall(_NR_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, xtiledata) == 0:
        return 0
    return ctypes.get_errno()
