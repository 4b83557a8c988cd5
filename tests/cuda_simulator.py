"""Shared harness for tests of numba.cuda kernels without a GPU (not a test file).

numba's CUDA simulator must be switched on (NUMBA_ENABLE_CUDASIM=1) before numba.cuda is
first imported, and other test files of the same pytest run import numba.cuda for real.
So a kernel test file registers its checks in a `KernelChecks`, runs them all in ONE
child process (`python <the test file>`, simulator on) and reports each as its own test;
a second child, without the simulator, can compile the kernels to PTX for a real GPU
(catches typing that the simulator's Python execution cannot: int/uint mixes widening to
float64, unsupported features). With a real GPU the same checks run in-process.

A test file using it starts with

    if __name__ == "__main__":      # the simulator child
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        sys.path[:0] = [<repo root>, <tests/>]

and ends with `if __name__ == "__main__": child_main(CHECKS, sys.argv[1:])`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
NO_NVVM = "NO_NVVM"        # what a PTX child prints when numba cannot compile CUDA here


class KernelChecks(dict):
    """name -> check(*args); a check raises on failure. Use the instance as a decorator."""

    def __call__(self, function):
        self[function.__name__] = function
        return function

    def run(self, names=None, *args) -> list:
        """Run checks here, one {'name', 'ok', 'seconds', 'error'} dict per check."""
        results = []
        for name in names or sorted(self):
            started = time.perf_counter()
            try:
                self[name](*args)
                error = None
            except (Exception, pytest.fail.Exception):    # a failed pytest.raises too
                error = traceback.format_exc()
            results.append({"name": name, "ok": error is None, "error": error,
                            "seconds": round(time.perf_counter() - started, 2)})
        return results


def child_main(checks: KernelChecks, names, *args) -> None:
    """The simulator child's body: run the checks, one JSON line per result."""
    # The simulator's block manager polls its threads while holding the GIL; a short
    # switch interval hands the GIL to the simulated threads sooner (~10% faster).
    sys.setswitchinterval(0.0005)
    for outcome in checks.run(names, *args):
        print(json.dumps(outcome), flush=True)


def child_env(simulator: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return env


def run_children(commands: dict, timeout_s: float) -> dict:
    """{name: (argv, simulator?)} started together (they overlap on the cores); returns
    {name: CompletedProcess} once all have finished (a child past timeout_s is killed)."""
    running = {name: subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=child_env(simulator), cwd=REPO_ROOT)
               for name, (argv, simulator) in commands.items()}
    finished = {}
    for name, process in running.items():
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        finished[name] = subprocess.CompletedProcess(process.args, process.returncode,
                                                     stdout, stderr)
    return finished


def child_results(child: subprocess.CompletedProcess) -> dict:
    """{check name: result dict} from a simulator child's JSON lines (fails if none)."""
    results = {}
    for line in child.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["name"]] = result
    if not results:
        pytest.fail(f"the simulator child reported nothing (exit {child.returncode}):\n"
                    f"{child.stdout[-3000:]}\n{child.stderr[-3000:]}")
    return results


def assert_check_passed(results: dict, name: str) -> None:
    result = results.get(name)
    assert result is not None, f"the simulator child did not run {name}"
    assert result["ok"], f"{name} failed in the CUDA simulator:\n{result['error']}"


def compile_ptx(function, signature, cc=(9, 0)) -> str:
    """PTX of a kernel for compute capability `cc`, without a GPU (needs NVVM). Device
    functions compile for "the current GPU", so one is faked."""
    import types

    from numba import cuda
    try:
        from numba.cuda import dispatcher
        dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    except ImportError:
        pass
    ptx, _ = cuda.compile_ptx(function.py_func, signature, cc=cc)
    return ptx


def ptx_child_main(compile_all) -> None:
    """The PTX child's body: `compile_all()` returns the number of variants compiled."""
    try:
        from numba.cuda.cudadrv.error import CudaSupportError, NvvmSupportError
        try:
            count = compile_all()
        except (NvvmSupportError, CudaSupportError) as error:
            print(f"{NO_NVVM} {error}")
            return
    except ImportError as error:
        print(f"{NO_NVVM} {error}")
        return
    print(f"COMPILED {count} kernel variants")


def assert_compiled(child: subprocess.CompletedProcess) -> None:
    if NO_NVVM in child.stdout:
        pytest.skip("numba cannot compile CUDA here (no NVVM: pip install numba-cuda[cu12])")
    assert child.returncode == 0 and "COMPILED" in child.stdout, child.stdout + child.stderr
