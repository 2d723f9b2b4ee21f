"""flashcheck's PyTorch ops: autograd to second order (gradcheck, gradgradcheck in float64 on the CPU
backends), agreement with eager PyTorch, strides, and clear errors for bad input."""
import itertools
import math
import unittest

import torch

import flashcheck

torch.manual_seed(0)
F64 = torch.float64


def plain_attention(q, k, v, mask="none", scale=None):
    """Eager attention in the inputs' dtype (the autograd reference), GQA by repeating kv heads."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = scale * q @ k.transpose(-2, -1)
    nq, nk = s.shape[-2:]
    i = torch.arange(nq).unsqueeze(1)
    j = torch.arange(nk).unsqueeze(0)
    if mask != "none":
        visible = j <= i if mask == "causal_tl" else j <= i + (nk - nq)
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, -1) @ v


def random_qkv(b=1, hq=2, hkv=1, nq=3, nk=4, d=3, dv=2, dtype=F64, requires_grad=True):
    q = torch.randn(b, hq, nq, d, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(b, hkv, nk, d, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(b, hkv, nk, dv, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


MASKS = {"none": dict(causal=False), "causal_tl": dict(causal=True, causal_alignment="top_left"),
         "causal_br": dict(causal=True, causal_alignment="bottom_right")}


class AttentionAutograd(unittest.TestCase):
    def test_gradcheck_and_gradgradcheck_in_float64(self):
        # float64 storage and accumulation: finite differences with eps 1e-6 agree to ~1e-10, far inside
        # gradcheck's default atol 1e-5, rtol 1e-3; a wrong derivative is off by O(1).
        for mask, kwargs in MASKS.items():
            for nq, nk in ((3, 4), (4, 3)):
                with self.subTest(mask=mask, nq=nq, nk=nk):
                    q, k, v = random_qkv(nq=nq, nk=nk)

                    def f(q, k, v):
                        return flashcheck.attention(q, k, v, scale=0.7, **kwargs)

                    self.assertTrue(torch.autograd.gradcheck(f, (q, k, v)))
                    self.assertTrue(torch.autograd.gradgradcheck(f, (q, k, v)))

    def test_second_derivative_matches_autograd_through_plain_attention(self):
        for hog in ("hog", "hog.2pass"):
            with self.subTest(double_backward_kernel=hog):
                q, k, v = random_qkv(b=2, hq=4, hkv=2, nq=5, nk=7, d=4, dv=3)
                do = torch.randn(2, 4, 5, 3, dtype=F64)
                u = [torch.randn_like(x) for x in (q, k, v)]

                def hvp(attn):
                    grads = torch.autograd.grad(attn(q, k, v), (q, k, v), do, create_graph=True)
                    return torch.autograd.grad(grads, (q, k, v), u)

                ours = hvp(lambda q, k, v: flashcheck.attention(q, k, v, causal=True, double_backward_kernel=hog))
                reference = hvp(lambda q, k, v: plain_attention(q, k, v, "causal_tl"))
                for a, b in zip(ours, reference):
                    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    def test_second_derivative_with_create_graph_works_and_a_third_is_refused(self):
        # create_graph=True on the second derivative is what torch.autograd.functional.hvp and gradient
        # penalties ask for: it must work; only a third derivative, when taken, is refused.
        q, k, v = random_qkv()
        (dq,) = torch.autograd.grad(flashcheck.attention(q, k, v).sum(), q, create_graph=True)
        (dqq,) = torch.autograd.grad(dq.sum(), q, create_graph=True)
        (reference,) = torch.autograd.grad(
            torch.autograd.grad(plain_attention(q, k, v).sum(), q, create_graph=True)[0].sum(), q)
        torch.testing.assert_close(dqq.detach(), reference, rtol=1e-10, atol=1e-12)
        self.assertTrue(dqq.requires_grad)
        with self.assertRaisesRegex(RuntimeError, "third derivatives are not implemented"):
            torch.autograd.grad(dqq.sum(), q)

    def test_functional_hvp(self):
        q, k, v = random_qkv()
        u = tuple(torch.randn_like(x) for x in (q, k, v))

        def loss(attn):
            return lambda q, k, v: attn(q, k, v).pow(2).sum()

        _, ours = torch.autograd.functional.hvp(loss(flashcheck.attention), (q, k, v), u)
        _, reference = torch.autograd.functional.hvp(loss(plain_attention), (q, k, v), u)
        for a, b in zip(ours, reference):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    def test_fa3_fused_is_cpu_fa3_on_the_cpu(self):
        # kernel="fa3.fused" is cuda.fa3's fused backward on CUDA tensors; the CPU twin has one backward, cpu.fa3's
        q, k, v = random_qkv(b=1, hq=2, hkv=1, nq=9, nk=13, d=16, dv=16, dtype=torch.float32)
        results = []
        for kernel in ("fa3", "fa3.fused"):
            o = flashcheck.attention(q, k, v, causal=True, kernel=kernel)
            results.append((o,) + torch.autograd.grad(o, (q, k, v), torch.ones_like(o)))
        for a, b in zip(*results):
            self.assertTrue(torch.equal(a, b))

    def test_strided_inputs_give_the_contiguous_result(self):
        # [B, N, H, D] memory seen as [B, H, N, D]: the CPU backends read any strides.
        q0 = torch.randn(2, 6, 3, 8, dtype=torch.float32)
        k0 = torch.randn(2, 5, 3, 8, dtype=torch.float32)
        v0 = torch.randn(2, 5, 3, 4, dtype=torch.float32)
        q, k, v = (x.transpose(1, 2) for x in (q0, k0, v0))
        self.assertFalse(q.is_contiguous())
        strided = flashcheck.attention(q, k, v, causal=True)
        contiguous = flashcheck.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
        self.assertTrue(torch.equal(strided, contiguous))

    def test_bf16_error_is_within_its_rounding(self):
        # O is a convex combination of V's rows: with V and P stored in bf16 and fp32 accumulation, each
        # element's error is below (2u + N 2^-24) max|V| with u = 2^-8; 4u max|V| leaves room for the
        # rounding of O itself.
        q, k, v = random_qkv(b=2, hq=4, hkv=2, nq=64, nk=80, d=32, dv=32, dtype=torch.bfloat16, requires_grad=False)
        o = flashcheck.attention(q, k, v, causal=True, causal_alignment="bottom_right")
        self.assertEqual(o.dtype, torch.bfloat16)
        reference = plain_attention(q.double(), k.double(), v.double(), "causal_br")
        bound = 4 * 2.0 ** -8 * v.double().abs().max()
        self.assertLessEqual((o.double() - reference).abs().max().item(), bound.item())

    def test_fully_masked_rows_are_zero_with_zero_gradient(self):
        # top-left causal with Nq > Nk... every row sees key 0; bottom-right with Nq > Nk hides the first rows
        q, k, v = random_qkv(nq=5, nk=2)
        o = flashcheck.attention(q, k, v, causal=True, causal_alignment="bottom_right")
        self.assertTrue(torch.equal(o[:, :, :3], torch.zeros_like(o[:, :, :3])))
        (dq,) = torch.autograd.grad(o.sum(), q)
        self.assertTrue(torch.equal(dq[:, :, :3], torch.zeros_like(dq[:, :, :3])))

    def test_forward_op_returns_the_log_sum_exp(self):
        q, k, v = random_qkv(requires_grad=False)
        o, lse = torch.ops.flashcheck.attention_forward(q, k, v, "none", None, "fa2", None)
        s = (q @ k.repeat_interleave(2, 1).transpose(-2, -1)) / math.sqrt(q.shape[-1])
        torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(o, plain_attention(q, k, v), rtol=1e-12, atol=1e-13)


class AttentionErrors(unittest.TestCase):
    def assert_refused(self, pattern, fn):
        with self.assertRaisesRegex(RuntimeError, pattern):
            fn()

    def test_bad_input_raises_clear_errors(self):
        q, k, v = random_qkv(requires_grad=False)
        att = flashcheck.attention
        self.assert_refused("k has dtype Float, expected Double", lambda: att(q, k.float(), v))
        self.assert_refused("must have 4 dimensions", lambda: att(q, k[0], v))
        self.assert_refused("head dims differ", lambda: att(q, k[..., :2], v))
        self.assert_refused("same heads and sequence length", lambda: att(q, k, v[:, :, :3]))
        self.assert_refused("multiple of key/value heads", lambda: att(q[:, :1].expand(1, 3, 3, 3), k.expand(1, 2, 4, 3), v.expand(1, 2, 4, 2)))
        self.assert_refused("is empty", lambda: att(q[:, :, :0], k, v))
        self.assert_refused("NaN|non-finite", lambda: att(q.clone().fill_(float("nan")), k, v))
        self.assert_refused("not supported", lambda: att(q.to(torch.int32), k, v))
        self.assert_refused("unknown mask", lambda: torch.ops.flashcheck.attention(q, k, v, "diagonal", None, "fa2", "hog", None))
        self.assert_refused("no subject named cpu.fa9", lambda: att(q, k, v, kernel="fa9"))
        self.assert_refused("bad policy", lambda: att(q, k, v, policy="fp64,acc=int8"))
        with self.assertRaises(ValueError):
            att(q, k, v, causal=True, causal_alignment="middle")



@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the CUDA dispatch (cuda.fa2, cuda.fa3, cuda.hog) cannot be exercised here")
class AttentionCuda(unittest.TestCase):
    """CUDA tensors run cuda.fa2 (or cuda.fa3) and cuda.hog in place; their results are the CPU twins' up to
    the accumulation order."""

    def test_forward_and_gradients_match_the_cpu_op(self):
        formats = ((torch.bfloat16, 2.0 ** -8), (torch.float16, 2.0 ** -11))
        # fa3.fused: dQ summed by fp32 reductions in whatever order they land, within the same bound; d = 128 causal:
        # cuda.fa3's forward under the persistent scheduler (its auto)
        for (dtype, u), causal, kernel, d in itertools.product(formats, (False, True), ("fa2", "fa3", "fa3.fused"), (64, 128)):
            with self.subTest(dtype=dtype, causal=causal, kernel=kernel, d=d):
                q, k, v = random_qkv(b=2, hq=4, hkv=2, nq=70, nk=131, d=d, dv=d, dtype=dtype)
                # [B, N, H, D] memory seen as [B, H, N, D]: the kernels read these strides in place
                q, k, v = (x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for x in (q, k, v))
                qc, kc, vc = (x.detach().cuda().requires_grad_() for x in (q, k, v))
                do = torch.randn(2, 4, 70, d, dtype=dtype)
                o_cpu = flashcheck.attention(q, k, v, causal=causal, causal_alignment="bottom_right", kernel=kernel)
                o_gpu = flashcheck.attention(qc, kc, vc, causal=causal, causal_alignment="bottom_right", kernel=kernel)
                self.assertTrue(o_gpu.is_cuda)
                g_cpu = torch.autograd.grad(o_cpu, (q, k, v), do)
                g_gpu = torch.autograd.grad(o_gpu, (qc, kc, vc), do.cuda())
                # the same rounding points; the accumulation order differs (kernels/cuda/tests bound it
                # elementwise): here, within 4 u of each tensor's largest entry
                for a, b in zip((o_cpu,) + g_cpu, (o_gpu,) + g_gpu):
                    scale = a.double().abs().max().item()
                    self.assertLessEqual((a.double() - b.cpu().double()).abs().max().item(), 4 * u * scale)

    def test_views_the_kernels_cannot_read_in_place_are_copied(self):
        # A broadcast dout (stride 0 along N: the gradient of o.mean(2)), an MQA k expanded over the heads (stride 0
        # along H) and an unaligned base (an offset of one element): every kernel, cuda.fa3's TMA maps included, gets
        # a fresh contiguous copy and the same values as from contiguous inputs.
        for kernel in ("fa2", "fa3"):
            with self.subTest(kernel=kernel):
                q, k, v = (x.cuda().to(torch.bfloat16) for x in random_qkv(b=2, hq=4, hkv=1, nq=70, nk=131, d=64, dv=64, requires_grad=False))
                k_mqa = k.expand(2, 4, 131, 64)
                flat = torch.randn(1 + v.numel(), device="cuda").to(torch.bfloat16)
                v_odd = flat[1:].view(2, 1, 131, 64).expand(2, 4, 131, 64)
                o = flashcheck.attention(q, k_mqa, v_odd, kernel=kernel)
                self.assertTrue(torch.equal(o, flashcheck.attention(q, k_mqa.contiguous(), v_odd.contiguous(), kernel=kernel)))
                o_, lse = torch.ops.flashcheck.attention_forward(q, k_mqa, v_odd, "none", None, kernel, None)
                dout = torch.randn(2, 4, 1, 64, device="cuda").to(torch.bfloat16).expand(2, 4, 70, 64)
                grads = torch.ops.flashcheck.attention_backward(q, k_mqa, v_odd, o_, lse, dout, "none", None, kernel, None)
                again = torch.ops.flashcheck.attention_backward(q, k_mqa.contiguous(), v_odd.contiguous(), o_, lse, dout.contiguous(), "none", None, kernel, None)
                for a, b in zip(grads, again):
                    self.assertTrue(torch.equal(a, b))

    def test_unsupported_cuda_calls_get_clear_errors(self):
        q, k, v = (x.cuda() for x in random_qkv(requires_grad=False, d=64, dv=64))
        with self.assertRaisesRegex(RuntimeError, "cuda.fa2 computes in bfloat16 or float16"):
            flashcheck.attention(q, k, v)
        q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
        with self.assertRaisesRegex(RuntimeError, "head dims 64 and 128"):
            flashcheck.attention(q[..., :32], k[..., :32], v[..., :32])
        with self.assertRaisesRegex(RuntimeError, "no CUDA kernel cuda.fa1"):
            flashcheck.attention(q, k, v, kernel="fa1")
        qg = q.detach().requires_grad_()
        (dq,) = torch.autograd.grad(flashcheck.attention(qg, k, v, double_backward_kernel="naive").sum(), qg, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "no CUDA kernel cuda.naive"):
            torch.autograd.grad(dq.sum(), qg)
        # NaN / Inf anywhere in an input, in either 16-bit format, named (one device pass over the inputs; the op's
        # kernel is launched before the flags are read, so every first-order kernel runs on the NaN first)
        k_nan = k.clone()
        k_nan[0, 0, 3, 5] = float("nan")
        with self.assertRaisesRegex(RuntimeError, "k contains NaN or Inf"):
            flashcheck.attention(q, k_nan, v)
        for kernel in ("fa3", "fa3.fused"):
            with self.assertRaisesRegex(RuntimeError, "k contains NaN or Inf"):
                flashcheck.attention(q, k_nan, v, kernel=kernel)
            o3, lse3 = torch.ops.flashcheck.attention_forward(q, k, v, "none", None, kernel, None)
            do_nan = torch.randn_like(o3)
            do_nan[0, 1, 2, 3] = float("nan")
            with self.assertRaisesRegex(RuntimeError, "dout contains NaN or Inf"):
                torch.ops.flashcheck.attention_backward(q, k, v, o3, lse3, do_nan, "none", None, kernel, None)
        o, lse = torch.ops.flashcheck.attention_forward(q, k, v)
        do_inf = torch.randn_like(o)
        do_inf[-1, -1, -1, -1] = float("-inf")
        with self.assertRaisesRegex(RuntimeError, "dout contains NaN or Inf"):
            torch.ops.flashcheck.attention_backward(q, k, v, o, lse, do_inf)
        with self.assertRaisesRegex(RuntimeError, "v contains NaN or Inf"):
            v16 = v.to(torch.float16)
            v16[0, 0, 1, 0] = float("inf")
            flashcheck.attention(q.to(torch.float16), k.to(torch.float16), v16)
        do = torch.randn_like(o)
        ddq = torch.randn_like(q)
        ddq[0, 0, 1, 2] = float("inf")
        for hog in ("hog", "hog.2pass"):
            with self.assertRaisesRegex(RuntimeError, "ddq contains NaN or Inf"):
                torch.ops.flashcheck.attention_double_backward(q, k, v, o, lse, do, ddq, None, None, "none", None, hog, None)
        # and the op still works after the errors (the flags' pinned buffers went back to the cache after the pass)
        self.assertTrue(torch.isfinite(flashcheck.attention(q, k, v, kernel="fa3")).all())
        with self.assertRaisesRegex(RuntimeError, "ddk"):
            torch.ops.flashcheck.attention_double_backward(q, k, v, o, lse, do, None, k[:, :, :1], None)

    def test_second_derivative_matches_the_cpu_op(self):
        # A whole HVP on the GPU: cuda.fa2's forward and backward, then cuda.hog's double backward (a
        # second torch.autograd.grad), against the same chain on the CPU backends (cpu.fa2, cpu.hog).
        # The rounding points are the same; the fp32 accumulation order differs, so a storage rounding
        # (of P, dS, dS', ddP as tensor-core operands, and of the outputs) can land one ulp (2u) apart.
        # Each output is a sum of two products of such operands over Nk (or Nq) terms that partly cancel,
        # so the bound is 16u of the tensor's largest entry: 2u per flipped operand, a factor 2 for the two
        # products, and up to 4 for the cancellation between them (the harness's elementwise bound,
        # kernels/cuda/tests, is the tight one; this checks the op's wiring: strides, GQA, masks, tails).
        # kernel="fa3": cuda.fa3's forward and deterministic backward first (cpu.fa3 on the CPU), as hvp_bench.py's .fa3 modes;
        # "fa3.fused" its fused backward (cpu.fa3 on the CPU too).
        for dtype, u in ((torch.bfloat16, 2.0 ** -8), (torch.float16, 2.0 ** -11)):
            for hog, kernel in (("hog", "fa2"), ("hog.2pass", "fa2"), ("hog.2pass", "fa3"), ("hog.2pass", "fa3.fused")):
                for mask in ("none", "causal_tl", "causal_br"):
                    with self.subTest(dtype=dtype, double_backward_kernel=hog, kernel=kernel, mask=mask):
                        q, k, v = random_qkv(b=2, hq=4, hkv=2, nq=70, nk=131, d=64, dv=64, dtype=dtype)
                        # [B, N, H, D] memory seen as [B, H, N, D]: the kernels read these strides in place
                        q, k, v = (x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for x in (q, k, v))
                        do = torch.randn(2, 4, 70, 64, dtype=dtype)
                        dd = [torch.randn_like(x) for x in (q, k, v)]

                        def hvp(q, k, v, do, dd):
                            do = do.detach().requires_grad_()
                            o = flashcheck.attention(q, k, v, **MASKS[mask], kernel=kernel, double_backward_kernel=hog)
                            grads = torch.autograd.grad(o, (q, k, v), do, create_graph=True)
                            return torch.autograd.grad(grads, (q, k, v, do), dd)

                        on_cpu = hvp(q, k, v, do, dd)
                        on_gpu = hvp(*(x.detach().cuda().requires_grad_() for x in (q, k, v)), do.cuda(), [x.cuda() for x in dd])
                        for name, a, b in zip(("dq'", "dk'", "dv'", "ddo"), on_cpu, on_gpu):
                            self.assertTrue(b.is_cuda)
                            scale = a.double().abs().max().item()
                            diff = (a.double() - b.cpu().double()).abs().max().item()
                            self.assertLessEqual(diff, 16 * u * scale, f"{name}: {diff} > 16u * {scale}")

    def test_functional_hvp_on_cuda_matches_the_cpu_op(self):
        # torch.autograd.functional.hvp differentiates the double backward once more with respect to its
        # cotangents (the "double backward trick"): the Hog kernel runs again with new cotangents.
        q, k, v = random_qkv(b=1, hq=2, hkv=2, nq=40, nk=40, d=64, dv=64, dtype=torch.float32)
        q, k, v = (x.detach().to(torch.bfloat16) for x in (q, k, v))
        u = tuple(torch.randn_like(x) for x in (q, k, v))

        def loss(q, k, v):
            return flashcheck.attention(q, k, v, causal=True).float().pow(2).sum()

        _, on_cpu = torch.autograd.functional.hvp(loss, (q, k, v), u)
        _, on_gpu = torch.autograd.functional.hvp(loss, tuple(x.cuda() for x in (q, k, v)), tuple(x.cuda() for x in u))
        for a, b in zip(on_cpu, on_gpu):
            scale = a.double().abs().max().item()
            self.assertLessEqual((a.double() - b.cpu().double()).abs().max().item(), 16 * 2.0 ** -8 * scale)


def attnres_reference(values, partial, queries, eps=1e-6):
    r = torch.rsqrt(values.pow(2).mean(-1) + eps)
    logits = torch.einsum("sd,nbtd->sbtn", queries, values) * r.permute(1, 2, 0).unsqueeze(0)
    o = torch.einsum("sbtn,nbtd->sbtd", torch.softmax(logits, -1), values)
    lse = torch.logsumexp(logits, -1)
    su = torch.rsqrt(partial.pow(2).mean(-1) + eps) * torch.einsum("sd,sbtd->sbt", queries, partial)
    beta = torch.sigmoid(su - lse).unsqueeze(-1)
    return o + beta * (partial - o)


def attnres_inputs(n=3, b=2, t=3, d=4, s=2, dtype=F64):
    values = torch.randn(n, b, t, d, dtype=dtype, requires_grad=True)
    partial = torch.randn(s, b, t, d, dtype=dtype, requires_grad=True)
    queries = torch.randn(s, d, dtype=dtype, requires_grad=True)
    return values, partial, queries


def check_block_is_composition(test, device, dtype):
    """flashcheck.attnres (one op, one input check per pass on CUDA) against attnres_phase1 then
    attnres_phase2 (two ops): the same kernels on the same inputs, so h and every gradient equal to the bit."""
    values, partial, queries = (x.detach().to(device, dtype) for x in attnres_inputs(n=3, b=2, t=70, d=64, s=4, dtype=torch.float32))
    dh = torch.randn(4, 2, 70, 64).to(device, dtype)

    def run(f):
        xs = [x.clone().requires_grad_() for x in (values, partial, queries)]
        h = f(*xs)
        return (h,) + torch.autograd.grad(h, xs, dh)

    def composed(v, u, w):
        o, lse = flashcheck.attnres_phase1(v, w)
        return flashcheck.attnres_phase2(o, lse, u, w)

    for name, a, b in zip(("h", "d_values", "d_partial", "d_queries"), run(flashcheck.attnres), run(composed)):
        test.assertTrue(torch.equal(a, b), f"{device} {dtype} {name}: the block op differs from the phase ops")
    # A second backward through a retained graph gives the same gradients.
    xs = [x.clone().requires_grad_() for x in (values, partial, queries)]
    h = flashcheck.attnres(*xs)
    first = torch.autograd.grad(h, xs, dh, retain_graph=True)
    for name, a, b in zip(("d_values", "d_partial", "d_queries"), first, torch.autograd.grad(h, xs, dh)):
        test.assertTrue(torch.equal(a, b), f"{device} {dtype} {name}: the second backward differs from the first")


class AttnResAutograd(unittest.TestCase):
    def test_gradcheck_and_gradgradcheck_in_float64(self):
        values, partial, queries = attnres_inputs()
        self.assertTrue(torch.autograd.gradcheck(flashcheck.attnres, (values, partial, queries)))
        self.assertTrue(torch.autograd.gradgradcheck(flashcheck.attnres, (values, partial, queries)))

    def test_matches_the_eager_formula_to_second_order(self):
        values, partial, queries = attnres_inputs(n=4, b=1, t=5, d=8, s=3)
        dh = torch.randn(3, 1, 5, 8, dtype=F64)
        u = [torch.randn_like(x) for x in (values, partial, queries)]

        def hvp(f):
            h = f(values, partial, queries)
            grads = torch.autograd.grad(h, (values, partial, queries), dh, create_graph=True)
            return (h,) + grads + torch.autograd.grad(grads, (values, partial, queries), u)

        for a, b in zip(hvp(flashcheck.attnres), hvp(attnres_reference)):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)

    def test_functional_hvp_and_refused_third_derivative(self):
        values, partial, queries = attnres_inputs()
        u = tuple(torch.randn_like(x) for x in (values, partial, queries))

        def loss(f):
            return lambda *xs: f(*xs).pow(2).sum()

        _, ours = torch.autograd.functional.hvp(loss(flashcheck.attnres), (values, partial, queries), u)
        _, reference = torch.autograd.functional.hvp(loss(attnres_reference), (values, partial, queries), u)
        for a, b in zip(ours, reference):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        (g,) = torch.autograd.grad(flashcheck.attnres(values, partial, queries).sum(), queries, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), queries, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "third derivatives are not implemented"):
            torch.autograd.grad(gg.sum(), queries)

    def test_the_block_op_is_the_composition_of_the_phase_ops_to_the_bit(self):
        check_block_is_composition(self, "cpu", torch.float32)

    def test_phase_ops_by_hand(self):
        values, partial, queries = attnres_inputs(dtype=torch.float32)
        o, lse = torch.ops.flashcheck.attnres_phase1_forward(values.detach(), queries.detach(), 1e-6)
        self.assertEqual((o.dtype, lse.dtype, lse.shape), (torch.float32, torch.float32, torch.Size([2, 2, 3])))
        h = torch.ops.flashcheck.attnres_phase2_forward(o, lse, partial.detach(), queries.detach(), 1e-6)
        torch.testing.assert_close(h, attnres_reference(values, partial, queries).detach(), rtol=1e-5, atol=1e-6)
        d_o, d_lse, d_partial, d_queries = torch.ops.flashcheck.attnres_phase2_backward(
            o, lse, partial.detach(), queries.detach(), torch.ones_like(h), 1e-6)
        self.assertEqual(d_lse.shape, lse.shape)
        d_values, d_queries1 = torch.ops.flashcheck.attnres_phase1_backward(values.detach(), queries.detach(), lse, d_o, d_lse, 1e-6)
        self.assertEqual(d_values.shape, values.shape)

    def test_bad_input_raises_clear_errors(self):
        values, partial, queries = (x.detach() for x in attnres_inputs(dtype=torch.float32))
        with self.assertRaisesRegex(RuntimeError, "queries are \\[S, D\\]"):
            flashcheck.attnres(values, partial, queries[:, :3])
        with self.assertRaisesRegex(RuntimeError, "queries has dtype"):
            flashcheck.attnres(values, partial, queries.double())
        with self.assertRaisesRegex(RuntimeError, "partial has shape"):
            flashcheck.attnres(values, partial[:, :, :2], queries)
        with self.assertRaisesRegex(RuntimeError, "NaN or Inf"):
            flashcheck.attnres(values.clone().fill_(float("inf")), partial, queries)
        with self.assertRaisesRegex(RuntimeError, "eps must be finite and > 0"):
            flashcheck.attnres(values, partial, queries, eps=0.0)
        with self.assertRaisesRegex(RuntimeError, "is empty"):
            flashcheck.attnres(values[:, :, :0], partial[:, :, :0], queries)


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the CUDA dispatch (cuda.attnres) cannot be exercised here")
class AttnResCuda(unittest.TestCase):
    """CUDA tensors run cuda.attnres; its results are cpu.attnres's up to the order of fp32 sums (dot
    products over D by a tree on the GPU, in sequence on the CPU) and expf against exp. A D-long dot
    product in another order differs by up to D u_fp32 of its terms' magnitude (gamma_D), which can
    move a storage rounding to the neighbouring value (2u of the element). Here within 4 max(u, D u_fp32)
    of each tensor's largest entry: the factor 4 for the two terms of each gradient and the
    cancellation in a_i - abar (the harness, kernels/cuda/tests, judges each output against the oracle)."""

    def test_block_attnres_and_its_gradients_match_the_cpu_op(self):
        d = 200
        for dtype, u in ((torch.float32, d * 2.0 ** -24), (torch.bfloat16, 2.0 ** -8), (torch.float16, 2.0 ** -11)):
            with self.subTest(dtype=dtype):
                # T = 70 (a tail of the 64-token chunks), D = 200 (not a multiple of the block's threads)
                values, partial, queries = (x.detach().to(dtype) for x in attnres_inputs(n=4, b=2, t=70, d=d, s=3, dtype=torch.float32))
                dh = torch.randn(3, 2, 70, d).to(dtype)

                def run(device):
                    xs = [x.to(device).requires_grad_() for x in (values, partial, queries)]
                    h = flashcheck.attnres(*xs)
                    return (h,) + torch.autograd.grad(h, xs, dh.to(device))

                for name, a, b in zip(("h", "d_values", "d_partial", "d_queries"), run("cpu"), run("cuda")):
                    self.assertTrue(b.is_cuda)
                    scale = a.double().abs().max().item()
                    diff = (a.double() - b.cpu().double()).abs().max().item()
                    self.assertLessEqual(diff, 4 * u * scale, f"{dtype} {name}: {diff} > 4u * {scale}")

    def test_second_derivative_on_cuda_matches_the_cpu_op(self):
        values, partial, queries = (x.detach() for x in attnres_inputs(n=3, b=1, t=9, d=16, s=2, dtype=torch.float32))
        dh = torch.randn(2, 1, 9, 16)
        v = [torch.randn_like(x) for x in (values, partial, queries)]

        def hvp(device):
            xs = [x.to(device).requires_grad_() for x in (values, partial, queries)]
            grads = torch.autograd.grad(flashcheck.attnres(*xs), xs, dh.to(device), create_graph=True)
            return torch.autograd.grad(grads, xs, [x.to(device) for x in v])

        for a, b in zip(hvp("cpu"), hvp("cuda")):
            scale = a.double().abs().max().item()
            self.assertLessEqual((a.double() - b.cpu().double()).abs().max().item(), 2.0 ** -16 * scale)

    def test_bad_input_raises_clear_errors(self):
        values, partial, queries = (x.detach().cuda() for x in attnres_inputs(dtype=torch.float32))
        with self.assertRaisesRegex(RuntimeError, "cuda.attnres computes in float32, bfloat16 or float16"):
            flashcheck.attnres(values.double(), partial.double(), queries.double())
        with self.assertRaisesRegex(RuntimeError, "values contains NaN or Inf"):
            flashcheck.attnres(values.clone().fill_(float("nan")), partial, queries)
        with self.assertRaisesRegex(RuntimeError, "partial has shape"):
            flashcheck.attnres(values, partial[:, :, :2], queries)

    def test_the_block_op_is_the_composition_of_the_phase_ops_to_the_bit(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            with self.subTest(dtype=dtype):
                check_block_is_composition(self, "cuda", dtype)

    def test_the_block_op_names_the_input_that_holds_nan_or_inf(self):
        # one check for both phases (forward) and one for both backwards: the name is still the input's.
        # D = 64: the lane kernels (their own reports); D = 12: the block kernels (a pass of the op's own);
        # N = 9 sources at D = 64: phase 1 on the block kernels, phase 2 on the lane kernels (the lane
        # report of dh must be read before phase 1's pass finds dh's NaN in d_o).
        for n, d in ((3, 64), (3, 12), (9, 64)):
            values, partial, queries = (x.detach().cuda() for x in attnres_inputs(n=n, b=2, t=9, d=d, dtype=torch.float32))
            for which, name in ((0, "values"), (1, "partial"), (2, "queries")):
                xs = [values, partial, queries]
                xs[which] = xs[which].clone()
                xs[which].view(-1)[5] = float("inf")
                with self.subTest(n=n, d=d, input=name), self.assertRaisesRegex(RuntimeError, f"flashcheck.attnres.*: {name} contains NaN or Inf"):
                    flashcheck.attnres(*xs)
            xs = [x.clone().requires_grad_() for x in (values, partial, queries)]
            h = flashcheck.attnres(*xs)
            dh = torch.randn_like(h)
            dh[1, 0, 3, 2] = float("nan")
            with self.subTest(n=n, d=d, input="dh"), self.assertRaisesRegex(RuntimeError, "flashcheck.attnres.*: dh contains NaN or Inf"):
                torch.autograd.grad(h, xs, dh)

    def test_input_checks_can_be_turned_off_and_back_on(self):
        values, partial, queries = (x.detach().cuda() for x in attnres_inputs(n=3, b=2, t=70, d=64, dtype=torch.float32))
        bad = values.clone()
        bad[1, 0, 5, 7] = float("nan")
        with flashcheck.input_checks(False):
            h = flashcheck.attnres(bad, partial, queries)  # no error: the NaN flows into h unreported
            self.assertTrue(torch.isnan(h).any().item())
            self.assertTrue(torch.isfinite(flashcheck.attnres(values, partial, queries)).all().item())
        with self.assertRaisesRegex(RuntimeError, "values contains NaN or Inf"):  # restored on exit
            flashcheck.attnres(bad, partial, queries)

    def test_every_phase_names_the_input_that_holds_nan_or_inf(self):
        # D = 64: the lane kernels, which find NaN and Inf as they read; D = 12: the block kernels, whose
        # inputs the op checks in a pass of its own. One bad entry, anywhere, in any input of any phase.
        ops = torch.ops.flashcheck
        gen = torch.Generator().manual_seed(3)
        for d in (64, 12):
            values, partial, queries = (x.detach().cuda().bfloat16() for x in attnres_inputs(n=3, b=2, t=70, d=d, dtype=torch.float32))
            o, lse = ops.attnres_phase1_forward(values, queries, 1e-6)
            dh = torch.randn_like(o)
            d_o, d_lse, _, _ = ops.attnres_phase2_backward(o, lse, partial, queries, dh, 1e-6)
            calls = {
                "attnres_phase1_forward": (lambda a: ops.attnres_phase1_forward(*a, 1e-6), [("values", values), ("queries", queries)]),
                "attnres_phase2_forward": (lambda a: ops.attnres_phase2_forward(*a, 1e-6),
                                           [("o", o), ("lse", lse), ("partial", partial), ("queries", queries)]),
                "attnres_phase2_backward": (lambda a: ops.attnres_phase2_backward(*a, 1e-6),
                                            [("o", o), ("lse", lse), ("partial", partial), ("queries", queries), ("dh", dh)]),
                "attnres_phase1_backward": (lambda a: ops.attnres_phase1_backward(*a, 1e-6),
                                            [("values", values), ("queries", queries), ("lse", lse), ("d_o", d_o), ("d_lse", d_lse)]),
            }
            for op, (call, args) in calls.items():
                call([x for _, x in args])  # all finite: no error
                for k, (name, x) in enumerate(args):
                    for bad in (float("nan"), float("inf"), float("-inf")):
                        y = x.clone()
                        y.view(-1)[torch.randint(y.numel(), (1,), generator=gen).item()] = bad
                        with self.subTest(d=d, op=op, input=name, bad=bad):
                            with self.assertRaisesRegex(RuntimeError, f"{op}: {name} contains NaN or Inf"):
                                call([y if j == k else a for j, (_, a) in enumerate(args)])

if __name__ == "__main__":
    unittest.main()
