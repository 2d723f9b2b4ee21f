"""kernels/torch/hvp_bench.py: the plain-attention HVP it times is the right one (finite differences in
float64), its torch.func form (what torch.compile compiles) equals it, the products each flashcheck mode counts,
a CPU run writes one record per size (eager mode; torch.compile and the hog modes run on the GPU machine), and
bad arguments exit 2."""
import importlib.util
import json
import math
import os
import tempfile
import unittest

import torch

_PATH = os.path.join(os.path.dirname(__file__), "..", "hvp_bench.py")
_spec = importlib.util.spec_from_file_location("hvp_bench", _PATH)
hvp_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hvp_bench)


class HvpBench(unittest.TestCase):
    def test_hvp_is_the_directional_derivative_of_the_first_backward(self):
        # f(x) = <ddQ, dQ(x)> + <ddK, dK(x)> + <ddV, dV(x)> over x = (Q, K, V, dO); its derivative along a
        # random e by central differences (h = 1e-5 in float64: truncation ~h^2, rounding ~1e-16 / h)
        # must equal <hvp(x), e> to ~1e-8 relative.
        g = torch.Generator().manual_seed(3)
        for causal in (False, True):
            q, k, v, dout, ddq, ddk, ddv = (torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(7))
            scale = 1 / math.sqrt(4)
            e = [torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(4)]

            def f(x):
                xq, xk, xv, xo = (t.detach().requires_grad_() for t in x)
                o = hvp_bench.plain_attention(xq, xk, xv, scale, causal)
                dq, dk, dv = torch.autograd.grad(o, (xq, xk, xv), xo)
                return float((ddq * dq).sum() + (ddk * dk).sum() + (ddv * dv).sum())

            h = 1e-5
            x = [q, k, v, dout]
            numeric = (f([a + h * b for a, b in zip(x, e)]) - f([a - h * b for a, b in zip(x, e)])) / (2 * h)
            analytic = sum(float((r * b).sum()) for r, b in zip(hvp_bench.hvp(q, k, v, dout, ddq, ddk, ddv, scale, causal), e))
            self.assertAlmostEqual(numeric, analytic, delta=1e-8 * max(1.0, abs(analytic)), msg=f"causal={causal}")

    @unittest.skipUnless(hasattr(torch, "func"), f"torch.func needs torch >= 2.0 (this is {torch.__version__})")
    def test_the_functional_form_is_the_same_hvp(self):
        g = torch.Generator().manual_seed(5)
        for causal in (False, True):
            x = [torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(7)]
            for a, b in zip(hvp_bench.hvp_functional(*x, 0.5, causal), hvp_bench.hvp(*x, 0.5, causal)):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)

    def test_the_products_each_mode_counts(self):
        # forward 2; a deterministic first backward 7 (dK/dV pass 4 with S and dP, dQ pass 3), cuda.fa3's fused one 5;
        # Flash Hog 25 (3 statistics passes) or 22 (2)
        self.assertEqual(hvp_bench.products_of("hog"), (2 + 7 + 25, 25))
        self.assertEqual(hvp_bench.products_of("hog.2pass"), (2 + 7 + 22, 22))
        self.assertEqual(hvp_bench.products_of("hog.2pass.fa3"), (31, 22))
        self.assertEqual(hvp_bench.products_of("hog.2pass.fa3.unchecked"), (31, 22))
        self.assertEqual(hvp_bench.products_of("hog.2pass.fa3.fused"), (29, 22))
        self.assertEqual(set(hvp_bench.HOG_MODES) | {"eager", "compile"}, set(hvp_bench.MODES))

    def test_the_memory_exponent_fit(self):
        self.assertAlmostEqual(hvp_bench.memory_exponent([(n, 3.0 * n * n) for n in (1024, 4096, 8192, 16384)]), 2.0)
        self.assertAlmostEqual(hvp_bench.memory_exponent([(n, 5.0 * n) for n in (4096, 65536)]), 1.0)
        self.assertIsNone(hvp_bench.memory_exponent([(4096, 1.0)]))

    def test_a_cpu_run_writes_a_record_per_size(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "hvp.jsonl")
            rc = hvp_bench.main(["--out", out, "--device", "cpu", "--n", "8,17", "--heads", "2", "--d", "16",
                                     "--mask", "none,causal", "--modes", "eager", "--repeats", "2", "--warmup", "0"])
            self.assertEqual(rc, 0)
            with open(out) as f:
                records = [json.loads(line) for line in f]
            self.assertEqual(hvp_bench.main(["--out", out, "--table"]), 0)  # the table of what was written
        self.assertEqual([(r["mask"], r["shape"]["N"]) for r in records], [("none", 8), ("none", 17), ("causal", 8), ("causal", 17)])
        for r in records:
            for key in ("schema", "kind", "experiment", "device", "commit", "time", "verdict"):  # the report's schema
                self.assertIn(key, r)
            self.assertEqual((r["kind"], r["experiment"], r["subject"]), ("experiment", "hvp-bench", "torch.eager"))
            self.assertEqual(r["metrics"]["status"], "ok")
            self.assertGreater(r["metrics"]["median_ms"], 0)
            self.assertEqual(len(r["metrics"]["ms"]), 2)
            self.assertIsNone(r["metrics"]["peak_bytes"])  # measured on a GPU only

    def test_bad_arguments_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "x.jsonl")
            self.assertEqual(hvp_bench.main(["--out", out, "--device", "cpu", "--n", "0"]), 2)
            self.assertEqual(hvp_bench.main(["--out", out, "--device", "cpu", "--mask", "diagonal"]), 2)
            self.assertEqual(hvp_bench.main(["--out", out, "--device", "cpu", "--modes", "hog"]), 2)  # CUDA kernels
            self.assertEqual(hvp_bench.main(["--out", os.path.join(d, "missing.jsonl"), "--table"]), 2)


if __name__ == "__main__":
    unittest.main()
