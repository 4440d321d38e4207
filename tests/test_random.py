"""``T.rng_init`` / ``T.rng_rand`` / ``T.rng_rand_float``: curand's Philox4x32-10 stream on every target (TileLang's
``examples/rand/rand_uint.py``, whose reference is Triton's ``tl.randint4x`` over the same counters)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.random_philox import States, element, philox4x32_10, uniform
from tileagent.compiler.targets.cuda_random import HELPERS
from tests.conftest import nvrtc_available

# Random123's known-answer vectors for philox4x32 with 10 rounds: (counter, key) -> output, words x..w
KNOWN = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
         ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
         ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
          (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.parametrize("counter, key, expected", KNOWN)
def test_philox4x32_10_gives_the_known_answer_vectors(counter, key, expected):
    assert tuple(int(w) for w in philox4x32_10(counter, key)) == expected


def test_the_stream_is_curands_counter_layout():
    """Element p of subsequence s is word p % 4 of philox(counter (p // 4, 0, s, 0), key = seed)."""
    assert int(element(0, 0, 2)) == KNOWN[0][2][2]
    words = philox4x32_10((5, 0, 3, 0), (42, 0))
    assert [int(element(42, 3, 20 + k)) for k in range(4)] == [int(w) for w in words]
    states = States(2)
    states.init(torch.tensor([42, 7]), 3, torch.tensor([18, 0]))
    values, thread = states.draw(torch.tensor([3, 1]))
    assert thread.tolist() == [0, 0, 0, 1] and values.tolist() == [int(element(42, 3, 18 + k)) for k in range(3)] + [
        int(element(7, 3, 0))]
    assert states.pos.tolist() == [21, 1]
    assert uniform(torch.tensor([0, 2**32 - 1])).tolist() == [2.0**-33, 1.0]


def rand_1d(M, seed, target):
    """TileLang's rand_uint example: one thread draws 128 numbers per block in T.Parallel order."""
    num_per_thread, threads = 128, 1

    @T.prim_func
    def main(A: T.Tensor((M,), "uint32")):
        with T.Kernel(T.ceildiv(M, threads * num_per_thread), threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx * num_per_thread + tx * num_per_thread)
            for i, j in T.Parallel(threads, num_per_thread):
                idx = (bx * threads + i) * num_per_thread + j
                if idx < M:
                    A[idx] = T.rng_rand()
    return tileagent.compile(main, out_idx=[0], target=target)


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("M, seed", [(512, 123), (200, 7)])
def test_rand_uint_draws_the_philox_stream_in_parallel_order(target, M, seed):
    out = rand_1d(M, seed, target)()
    assert out.dtype == torch.uint32
    assert out.to(torch.int64).tolist() == element(seed, 0, torch.arange(M)).tolist()


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_per_thread_draws_and_uniform_floats(target):
    @T.prim_func
    def main(A: T.Tensor((64, 3), "uint32"), U: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            tx = T.get_thread_binding()
            T.rng_init(9, bx * 32 + tx, 4)
            for k in T.serial(3):
                A[bx * 32 + tx, k] = T.rng_rand()
            if tx % 2 == 0:
                U[bx * 32 + tx] = T.rng_rand_float()
    a, u = torch.zeros(64, 3, dtype=torch.uint32), torch.zeros(64)
    tileagent.compile(main, target=target)(a, u)
    t = torch.arange(64)
    assert a.to(torch.int64).tolist() == torch.stack([element(9, t, 4 + k) for k in range(3)], 1).tolist()
    assert u[0::2].tolist() == uniform(element(9, t[0::2], 7)).tolist() and not u[1::2].any()


def test_rand_is_our_philox_device_function_in_cuda():
    src = rand_1d(512, 123, "cuda:sm_90a").get_kernel_source()
    assert "tl_philox tl_rng;" in src and "tl_rng_init(tl_rng, " in src and "= tl_rng_rand(tl_rng);" in src
    assert "#include <curand" not in src  # our own device function: no curand header for NVRTC to find
    if nvrtc_available():
        assert rand_1d(512, 123, "cuda:sm_90a").cubin("sm_90a")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_cuda_device_functions_compute_the_interpreters_numbers(tmp_path):
    """The generated Philox helpers, compiled for the host with a few shims, draw what compiler.random_philox does."""
    shims = """#include <cstdio>
#define __device__
#define __forceinline__ inline
struct uint4 { unsigned int x, y, z, w; }; struct uint2 { unsigned int x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
"""
    main = """
int main() {
  tl_philox s;
  tl_rng_init(s, 0x123456789ULL, 5ULL, 4294967301ULL);
  for (int i = 0; i < 9; ++i) printf("%u\\n", tl_rng_rand(s));
  printf("%a\\n", tl_rng_uniform(s));
}"""
    (tmp_path / "philox.cpp").write_text(shims + HELPERS["philox"] + main)
    subprocess.run(["g++", "-O1", "-o", str(tmp_path / "philox"), str(tmp_path / "philox.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "philox")], capture_output=True, text=True, check=True).stdout.split()
    states = States(1)
    states.init(0x123456789, 5, 4294967301)
    values, _ = states.draw(torch.tensor([10]))
    assert [int(x) for x in out[:9]] == values[:9].tolist()
    assert float.fromhex(out[9]) == float(uniform(values[9]))  # exact: %a prints every bit


def test_random_numbers_are_coded_diagnostics():
    def program(threads, init=True, twice=False):
        @T.prim_func
        def main(A: T.Tensor((128,), "uint32")):
            with T.Kernel(1, threads=threads) as bx:
                if init:
                    T.rng_init(1, 0, 0)
                for i in T.Parallel(128):
                    A[i] = T.rng_rand() + T.rng_rand() if twice else T.rng_rand()
        return tileagent.compile(main, target="cpu")

    for kwargs, code, words in (({"threads": 128}, "E509", "kernel of 128 threads"),
                                ({"threads": 1, "init": False}, "E301", "without T.rng_init"),
                                ({"threads": 1, "twice": True}, "E301", "draws 2 random numbers")):
        with pytest.raises(CompileError) as info:
            program(**kwargs)
        assert info.value.code == code and words in info.value.message and info.value.span is not None
    with pytest.raises(CompileError) as info:
        T.rng_init(1, 0, 0, generator="curandStateXORWOW_t")
    assert info.value.code == "E701"
