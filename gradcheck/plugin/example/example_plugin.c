/*
 * An example flashcheck plugin: a user's own attention kernel, in plain C, made a subject of the
 * harness through gradcheck/plugin/flashcheck_plugin.h. It computes plain attention (forward and
 * backward) in double for fp32 or fp64 storage, honouring strides, both causal masks and GQA.
 *
 *   cc -shared -fPIC -I<flashcheck> example_plugin.c -o libmine.so -lm
 *   flashcheck check --plugin ./libmine.so --subject plugin.example --op all --dtype fp32
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck/plugin/flashcheck_plugin.h"

/* Built a second time with FLASHCHECK_EXAMPLE_WRONG_SCALE for the harness's own tests: a subject
   "wrong" whose softmax scale is 1% off, which the harness must catch. */
#ifdef FLASHCHECK_EXAMPLE_WRONG_SCALE
#define SUBJECT_NAME "wrong"
#define SCALE_ERROR 1.01
#else
#define SUBJECT_NAME "example"
#define SCALE_ERROR 1.0
#endif

static double get(const fc_tensor* t, int64_t b, int64_t h, int64_t n, int64_t c) {
  const int64_t i = b * t->strides[0] + h * t->strides[1] + n * t->strides[2] + c * t->strides[3];
  return t->format == FC_FORMAT_FP64 ? ((const double*)t->data)[i] : (double)((const float*)t->data)[i];
}

static void set(const fc_tensor* t, int64_t b, int64_t h, int64_t n, int64_t c, double x) {
  const int64_t i = b * t->strides[0] + h * t->strides[1] + n * t->strides[2] + c * t->strides[3];
  if (t->format == FC_FORMAT_FP64) {
    ((double*)t->data)[i] = x;
  } else {
    ((float*)t->data)[i] = (float)x;
  }
}

static int visible(int mask, int i, int j, int nq, int nk) {
  if (mask == FC_MASK_CAUSAL_TOP_LEFT) return j <= i;
  if (mask == FC_MASK_CAUSAL_BOTTOM_RIGHT) return j <= i + (nk - nq);
  return 1;
}

static int all_finite(const fc_tensor* t) {
  for (int64_t b = 0; b < t->shape[0]; ++b)
    for (int64_t h = 0; h < t->shape[1]; ++h)
      for (int64_t n = 0; n < t->shape[2]; ++n)
        for (int64_t c = 0; c < t->shape[3]; ++c)
          if (!isfinite(get(t, b, h, n, c))) return 0;
  return 1;
}

/* P (nq x nk) of one head into p; returns L of each row in lse_row. */
static void softmax_rows(const fc_attention_call* a, int64_t b, int64_t h, int64_t kh, double* p, double* lse_row) {
  const int nq = a->seq_q, nk = a->seq_k, d = a->head_dim;
  for (int i = 0; i < nq; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < nk; ++j) {
      double s = -INFINITY;
      if (visible(a->mask, i, j, nq, nk)) {
        s = 0;
        for (int c = 0; c < d; ++c) s += get(&a->q, b, h, i, c) * get(&a->k, b, kh, j, c);
        s *= a->scale * SCALE_ERROR;
      }
      p[i * nk + j] = s;
      if (s > m) m = s;
    }
    if (m == -INFINITY) { /* no visible key: O = 0, L = -inf */
      for (int j = 0; j < nk; ++j) p[i * nk + j] = 0;
      lse_row[i] = -INFINITY;
      continue;
    }
    double sum = 0;
    for (int j = 0; j < nk; ++j) {
      p[i * nk + j] = p[i * nk + j] == -INFINITY ? 0 : exp(p[i * nk + j] - m);
      sum += p[i * nk + j];
    }
    for (int j = 0; j < nk; ++j) p[i * nk + j] /= sum;
    lse_row[i] = m + log(sum);
  }
}

static int32_t run(void* context, int32_t op, const fc_attention_call* a, char* message, size_t size) {
  (void)context;
  if (op != FC_OP_FWD && op != FC_OP_BWD) {
    snprintf(message, size, "op %d is not implemented", (int)op);
    return 1;
  }
  if (a->formats[FC_ROLE_Q] != FC_FORMAT_FP32 && a->formats[FC_ROLE_Q] != FC_FORMAT_FP64) {
    snprintf(message, size, "only fp32 and fp64 storage are supported");
    return 2;
  }
  if (!all_finite(&a->q) || !all_finite(&a->k) || !all_finite(&a->v) || (op == FC_OP_BWD && !all_finite(&a->dout))) {
    snprintf(message, size, "non-finite input");
    return 3;
  }
  const int nq = a->seq_q, nk = a->seq_k, d = a->head_dim, dv = a->head_dim_v, group = a->heads_q / a->heads_kv;
  double* p = malloc(sizeof(double) * (size_t)nq * (size_t)nk);
  double* lse = malloc(sizeof(double) * (size_t)nq);
  double* dk = calloc((size_t)a->batch * a->heads_kv * nk * d, sizeof(double));
  double* dvv = calloc((size_t)a->batch * a->heads_kv * nk * dv, sizeof(double));
  if (!p || !lse || !dk || !dvv) {
    free(p), free(lse), free(dk), free(dvv);
    snprintf(message, size, "out of memory");
    return 4;
  }
  for (int b = 0; b < a->batch; ++b) {
    for (int h = 0; h < a->heads_q; ++h) {
      const int kh = h / group;
      softmax_rows(a, b, h, kh, p, lse);
      if (op == FC_OP_FWD) {
        for (int i = 0; i < nq; ++i) {
          for (int c = 0; c < dv; ++c) {
            double o = 0;
            for (int j = 0; j < nk; ++j) o += p[i * nk + j] * get(&a->v, b, kh, j, c);
            set(&a->out_o, b, h, i, c, o);
          }
          if (a->out_lse.data) set(&a->out_lse, b, h, i, 0, lse[i]);
        }
        continue;
      }
      /* dP = dO V^T, D = rowsum(P o dP), dS = s P o (dP - D); dQ = dS K, dK += dS^T Q, dV += P^T dO */
      for (int i = 0; i < nq; ++i) {
        double D = 0;
        for (int j = 0; j < nk; ++j) {
          double dp = 0;
          for (int c = 0; c < dv; ++c) dp += get(&a->dout, b, h, i, c) * get(&a->v, b, kh, j, c);
          D += p[i * nk + j] * dp;
        }
        double dq[512] = {0};
        for (int j = 0; j < nk; ++j) {
          double dp = 0;
          for (int c = 0; c < dv; ++c) dp += get(&a->dout, b, h, i, c) * get(&a->v, b, kh, j, c);
          const double ds = a->scale * SCALE_ERROR * p[i * nk + j] * (dp - D);
          for (int c = 0; c < d; ++c) {
            dq[c] += ds * get(&a->k, b, kh, j, c);
            dk[(((size_t)b * a->heads_kv + kh) * nk + j) * d + c] += ds * get(&a->q, b, h, i, c);
          }
          for (int c = 0; c < dv; ++c) dvv[(((size_t)b * a->heads_kv + kh) * nk + j) * dv + c] += p[i * nk + j] * get(&a->dout, b, h, i, c);
        }
        for (int c = 0; c < d; ++c) set(&a->dq, b, h, i, c, dq[c]);
      }
    }
  }
  if (op == FC_OP_BWD) {
    for (int b = 0; b < a->batch; ++b)
      for (int kh = 0; kh < a->heads_kv; ++kh)
        for (int j = 0; j < nk; ++j) {
          for (int c = 0; c < d; ++c) set(&a->dk, b, kh, j, c, dk[(((size_t)b * a->heads_kv + kh) * nk + j) * d + c]);
          for (int c = 0; c < dv; ++c) set(&a->dv, b, kh, j, c, dvv[(((size_t)b * a->heads_kv + kh) * nk + j) * dv + c]);
        }
  }
  free(p), free(lse), free(dk), free(dvv);
  return 0;
}

static const fc_subject kSubjects[] = {{
    .name = SUBJECT_NAME,
    .description = "plain attention in double, in C, through the plugin ABI (fp32, fp64; d <= 512)",
    .ops = (1u << FC_OP_FWD) | (1u << FC_OP_BWD),
    .formats = (1u << FC_FORMAT_FP32) | (1u << FC_FORMAT_FP64),
    .masks = (1u << FC_MASK_NONE) | (1u << FC_MASK_CAUSAL_TOP_LEFT) | (1u << FC_MASK_CAUSAL_BOTTOM_RIGHT),
    .head_dim_count = 0,
    .max_head_dim = 512,
    .max_seq = 0,
    .flags = FC_SUBJECT_GQA | FC_SUBJECT_SEPARATE_DV | FC_SUBJECT_RETURNS_LSE | FC_SUBJECT_DETERMINISTIC,
    .run = run,
    .context = NULL,
}};

int32_t flashcheck_plugin_abi_version(void) { return FLASHCHECK_PLUGIN_ABI_VERSION; }

int32_t flashcheck_plugin_subjects(const fc_subject** subjects, int32_t* count, char* message, size_t size) {
  (void)message, (void)size;
  *subjects = kSubjects;
  *count = 1;
  return 0;
}
