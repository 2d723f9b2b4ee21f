/*
 * flashcheck plugin ABI, version 1: how a shared library makes its own attention kernels subjects
 * of the harness (`flashcheck check --plugin ./libmine.so --subject plugin.NAME`).
 *
 * Plain C: fixed-width integers, plain structs, one function pointer per subject; no C++ types
 * cross the boundary. A plugin exports two functions with C linkage:
 *
 *   int32_t flashcheck_plugin_abi_version(void);
 *       returns FLASHCHECK_PLUGIN_ABI_VERSION as the plugin was compiled with it; the harness refuses
 *       a plugin whose version differs from its own.
 *
 *   int32_t flashcheck_plugin_subjects(const fc_subject** subjects, int32_t* count,
 *                                      char* message, size_t message_size);
 *       on success returns 0 and points *subjects at *count subjects that stay valid while the
 *       library is loaded; on failure returns nonzero and writes a NUL-terminated reason into message.
 *
 * A subject's run() receives one call (fc_attention_call: shapes, mask, scale, precision policy and
 * strided typed tensors, as kernels/attention_call.hpp describes) and returns 0 on success, or a
 * nonzero code with a NUL-terminated message (unsupported shapes, non-finite inputs, out of memory).
 * The harness reports that message; it never takes a nonzero code for a result.
 *
 * Tensors are logical [B, H, N, D] (L: [B, H, N, 1]) with element strides; `format` is an fc_format.
 * Which tensors each op reads and writes:
 *   FC_OP_FWD:    q, k, v                            -> out_o, out_lse (if FC_SUBJECT_RETURNS_LSE)
 *   FC_OP_BWD:    q, k, v, o, lse, dout               -> dq, dk, dv
 *   FC_OP_BWDBWD: q, k, v, o, lse, dout, ddq, ddk, ddv -> dq2, dk2, dv2, ddo
 * Tensors an op does not use have data == NULL. dK, dV (dK', dV') sum over each kv head's group.
 */
#ifndef FLASHCHECK_PLUGIN_H
#define FLASHCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHCHECK_PLUGIN_ABI_VERSION 1

enum fc_format { FC_FORMAT_FP64 = 0, FC_FORMAT_FP32 = 1, FC_FORMAT_FP16 = 2, FC_FORMAT_BF16 = 3 };
enum fc_op { FC_OP_FWD = 0, FC_OP_BWD = 1, FC_OP_BWDBWD = 2 };
/* top-left: (i, j) visible iff j <= i; bottom-right: iff j <= i + (Nk - Nq) */
enum fc_mask { FC_MASK_NONE = 0, FC_MASK_CAUSAL_TOP_LEFT = 1, FC_MASK_CAUSAL_BOTTOM_RIGHT = 2 };
enum fc_rounding { FC_ROUNDING_NEAREST_EVEN = 0, FC_ROUNDING_TOWARD_ZERO = 1, FC_ROUNDING_STOCHASTIC = 2 };
/* Indices into fc_attention_call.formats: the storage format of each tensor role. */
enum fc_role { FC_ROLE_Q = 0, FC_ROLE_K = 1, FC_ROLE_V = 2, FC_ROLE_O = 3, FC_ROLE_DOUT = 4, FC_ROLE_GRAD = 5, FC_ROLE_STATS = 6 };

typedef struct fc_tensor {
  void* data;          /* NULL when the op does not use this tensor */
  int32_t format;      /* enum fc_format */
  int64_t shape[4];
  int64_t strides[4];  /* in elements */
} fc_tensor;

typedef struct fc_attention_call {
  int32_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v;
  int32_t mask;        /* enum fc_mask */
  double scale;        /* softmax scale */
  int32_t formats[7];  /* indexed by enum fc_role */
  int32_t accumulate;  /* enum fc_format */
  int32_t rounding;    /* enum fc_rounding, for outputs */
  uint64_t seed;       /* stochastic rounding seed */
  fc_tensor q, k, v, o, lse, dout, ddq, ddk, ddv;       /* inputs */
  fc_tensor out_o, out_lse, dq, dk, dv, dq2, dk2, dv2, ddo;  /* outputs */
} fc_attention_call;

enum fc_subject_flags {
  FC_SUBJECT_GQA = 1,                  /* Hq may be a multiple of Hkv > 1 */
  FC_SUBJECT_SEPARATE_DV = 2,          /* dv may differ from d */
  FC_SUBJECT_RETURNS_LSE = 4,          /* fwd writes out_lse; bwd and bwdbwd read lse */
  FC_SUBJECT_DETERMINISTIC = 8,        /* identical calls give bitwise identical outputs */
  FC_SUBJECT_STOCHASTIC_ROUNDING = 16  /* honours FC_ROUNDING_STOCHASTIC */
};

typedef int32_t (*fc_run_fn)(void* context, int32_t op, const fc_attention_call* call, char* message, size_t message_size);

/* The loader refuses (with a message naming the field) a subject whose declaration is inconsistent:
   no ops, formats or masks; bwd or bwdbwd without fwd; bits that name no op, format or mask; a head
   dim outside [1, max_head_dim]; max_head_dim outside 0..1024; max_seq < 0; more than 256 subjects.
   Accumulation: the subject is asked for fp32 (fp16/bf16/fp32 policies) or fp64 (fp64 policies),
   or whatever a user's policy names; it returns a nonzero code for one it does not honour. */
typedef struct fc_subject {
  const char* name;         /* registered as "plugin.<name>": letters, digits, '_', '-', '.' */
  const char* description;
  uint32_t ops;             /* bit (1u << op) for each supported enum fc_op */
  uint32_t formats;         /* bit (1u << format) for each supported storage format */
  uint32_t masks;           /* bit (1u << mask) for each supported enum fc_mask */
  int32_t head_dims[16];    /* the supported head dims, or head_dim_count = 0 for any up to max_head_dim */
  int32_t head_dim_count;
  int32_t max_head_dim;
  int32_t max_seq;          /* 0: no limit */
  int32_t flags;            /* enum fc_subject_flags */
  fc_run_fn run;
  void* context;            /* passed back to run */
} fc_subject;

#ifdef __cplusplus
}
#endif

#endif /* FLASHCHECK_PLUGIN_H */
