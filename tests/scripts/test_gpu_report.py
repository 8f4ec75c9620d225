"""tests/scripts/test_gpu_report.py — scripts/gpu_report.py: its parsers of ctest, compute-sanitizer
and benchmark logs, and the report made from their JSON lines (the GPT-2 table's MFU and ratio,
the time by kernel family, the steps a cut run did not reach)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import gpu_report  # noqa: E402

CTEST_LOG = """\
    Start 1: a passing test
1/4 Test #1: a passing test .......   Passed    0.10 sec
2/4 Test #2: a skipped test .......***Skipped   0.01 sec
3/4 Test #3: a failing test .......***Failed    0.20 sec
4/4 Test #4: a slow test ..........***Timeout  90.00 sec

50% tests passed, 2 tests failed out of 4

The following tests did not run:
\t  2 - a skipped test (Skipped)

The following tests FAILED:
\t  3 - a failing test (Failed)
\t  4 - a slow test (Timeout)
"""

SANITIZER_LOG = """\
== sanitizer run: test_cuda_norm
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
== sanitizer run: test_cuda_reduce
========= Invalid __global__ read of size 4 bytes
========= ERROR SUMMARY: 3 errors
== sanitizer run: test_cuda_nn_ops
"""


class Parsers(unittest.TestCase):
    def test_ctest_counts_failures_and_skips(self):
        t = gpu_report.parse_ctest("ctest -L cuda", CTEST_LOG)
        self.assertEqual((t["passed"], t["failed"], t["total"]), (1, 2, 4))
        self.assertEqual(t["skipped"], ["a skipped test"])
        self.assertEqual(t["failures"], ["a failing test (Failed)", "a slow test (Timeout)"])

    def test_ctest_without_a_summary_says_nothing_passed(self):
        t = gpu_report.parse_ctest("ctest", "ctest: no such build tree\n")
        self.assertIsNone(t["passed"])

    def test_sanitizer_keeps_each_finished_run(self):
        s = gpu_report.parse_sanitizer("memcheck", SANITIZER_LOG)
        self.assertEqual(s["runs"], ["test_cuda_norm", "test_cuda_reduce", "test_cuda_nn_ops"])
        self.assertEqual(s["summaries"], [0, 3])
        self.assertEqual(s["errors"], 3)

    def test_rows_tag_benchmarks_and_kernel_times(self):
        log = ('noise\n{"workload": "gpt2_train_step", "ms": 100, "throughput": 163840}\n'
               '{"workload": "gpt2_train_step", "family": "attention", "kernel": "k", "launches": 24, "ms": 30}\n{broken\n')
        rows = gpu_report.parse_rows("multigrad", log)
        self.assertEqual([r["kind"] for r in rows], ["bench", "kernel_time"])
        self.assertTrue(all(r["source"] == "multigrad" for r in rows))

    def test_train_keeps_the_summary_lines(self):
        t = gpu_report.parse_train("epoch 1/3: train loss 5.5\ntokens_per_s: 137.4\nmfu: 0.0123 (of ...)\n")
        self.assertEqual(t, {"kind": "train", "tokens_per_s": "137.4", "mfu": "0.0123 (of ...)"})

    def test_largest_batch_scales_the_measured_peak_to_the_memory(self):
        records = [{"kind": "devices", "memory_bytes": 80 * 2**30},
                   {"kind": "bench", "source": "multigrad", "workload": "w", "config": "config=gpt2 batch=16",
                    "peak_bytes": 20 * 2**30}]
        self.assertEqual(gpu_report.largest_batch(records, "w"), 54)  # 16 x 0.85 x 80 / 20
        records[1]["peak_bytes"] = 70 * 2**30
        self.assertIsNone(gpu_report.largest_batch(records, "w"))  # 16 already as large as fits
        self.assertIsNone(gpu_report.largest_batch(records[:1], "w"))  # not measured

    def test_devices_reads_cuda0_peaks(self):
        d = gpu_report.parse_devices("CUDA devices: 1\n  cuda:0  NVIDIA H100  79.1 GiB  peak 66908.2 GFLOP/s float32 "
                                     "(132 SMs x 1.98 GHz x 256), 1070530.6 GFLOP/s bf16 (...)\n")
        self.assertEqual(d["peak_float32"], 66908.2 * 1e9)
        self.assertEqual(d["peak_bf16"], 1070530.6 * 1e9)
        self.assertEqual(d["memory_bytes"], 79.1 * 2**30)


class Report(unittest.TestCase):
    def write_report(self, records):
        with tempfile.TemporaryDirectory() as tmp:
            results, out = os.path.join(tmp, "r.jsonl"), os.path.join(tmp, "r.md")
            with open(results, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
                f.write("not json\n")  # a torn last line must not stop the report
            gpu_report.report(results, out)
            return open(out).read()

    def test_gpt2_table_mfu_ratio_and_families(self):
        text = self.write_report([
            {"kind": "run", "date": "d", "commit": "abc", "mode": "quick", "budget_s": 480, "rehearse": 0,
             "plan": "preflight,gpt2 bf16,memcheck"},
            {"kind": "devices", "text": "cuda:0", "peak_bf16": 1e15, "peak_float32": 6e13},
            {"kind": "step", "name": "preflight", "status": "ok", "seconds": 3, "note": ""},
            {"kind": "step", "name": "gpt2 bf16", "status": "ok", "seconds": 20, "note": ""},
            {"kind": "bench", "source": "multigrad", "workload": "gpt2_train_step_bf16", "ms": 200.0,
             "throughput": 100000.0, "config": "config=gpt2 batch=16 context=1024", "flops_per_token": 1e9,
             "peak_bytes": 2**31},
            {"kind": "bench", "source": "torch", "workload": "gpt2_train_step_bf16", "ms": 100.0,
             "throughput": 200000.0, "config": "config=gpt2 batch=16 context=1024", "peak_bytes": 2**30},
            {"kind": "kernel_time", "source": "multigrad", "workload": "gpt2_train_step_bf16", "family": "attention",
             "kernel": "attention_fwd_kernel", "launches": 12, "ms": 80.0},
            {"kind": "kernel_time", "source": "multigrad", "workload": "gpt2_train_step_bf16", "family": "matmul",
             "kernel": "cublas_gemm_ex", "launches": 48, "ms": 60.0},
        ])
        self.assertIn("| bf16 | multigrad | gpt2 | 16 | 100,000 | 200.0 | 0.100 | 2.00 |", text)  # 1e5 x 1e9 / 1e15
        self.assertIn("bf16, batch 16: multigrad takes 2.00x PyTorch eager's time", text)
        self.assertIn("| attention | 80.00 | 40.0% | 12 | attention_fwd_kernel (80.00 ms) |", text)
        self.assertIn("account for 140.0 of the step's 200.0 ms", text)
        self.assertIn("Not run: memcheck (the run ended before them", text)


if __name__ == "__main__":
    unittest.main()
