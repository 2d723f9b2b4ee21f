/* A plugin whose one subject's declaration is inconsistent in the way FC_TEST_BAD_DECLARATION names
   (read on every flashcheck_plugin_subjects call, so one library serves every loader test). */
#include <stdlib.h>
#include <string.h>

#include "gradcheck/plugin/flashcheck_plugin.h"

static int32_t run(void* context, int32_t op, const fc_attention_call* call, char* message, size_t size) {
  (void)context, (void)op, (void)call, (void)message, (void)size;
  return 1;
}

static fc_subject subject;

int32_t flashcheck_plugin_abi_version(void) { return FLASHCHECK_PLUGIN_ABI_VERSION; }

int32_t flashcheck_plugin_subjects(const fc_subject** subjects, int32_t* count, char* message, size_t size) {
  (void)message, (void)size;
  const char* what = getenv("FC_TEST_BAD_DECLARATION");
  memset(&subject, 0, sizeof subject);
  subject.name = "bad";
  subject.ops = 1u << FC_OP_FWD;
  subject.formats = 1u << FC_FORMAT_FP32;
  subject.masks = 1u << FC_MASK_NONE;
  subject.run = run;
  *count = 1;
  if (what == NULL) {
  } else if (strcmp(what, "bwd_without_fwd") == 0) {
    subject.ops = 1u << FC_OP_BWD;
  } else if (strcmp(what, "head_dim_zero") == 0) {
    subject.head_dims[0] = 0, subject.head_dim_count = 1;
  } else if (strcmp(what, "head_dim_above_max") == 0) {
    subject.head_dims[0] = 512, subject.head_dim_count = 1, subject.max_head_dim = 256;
  } else if (strcmp(what, "negative_max_seq") == 0) {
    subject.max_seq = -1;
  } else if (strcmp(what, "unknown_format_bit") == 0) {
    subject.formats |= 1u << 9;
  } else if (strcmp(what, "huge_count") == 0) {
    *count = 100000;
  }
  *subjects = &subject;
  return 0;
}
