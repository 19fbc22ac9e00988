"""Shared by every test file: on a machine without CUDA, Triton kernels run in Triton's CPU interpreter.

Triton sets its interpreter up when it is first imported in a process, so TRITON_INTERPRET=1 must be in the
environment before any test imports it (tests/test_triton.py needs it; a file that imported triton first without it
would break every interpreted kernel after it). The compile-for-a-GPU check (tests/test_aot_compile.py) runs its
work in subprocesses that drop the variable.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
