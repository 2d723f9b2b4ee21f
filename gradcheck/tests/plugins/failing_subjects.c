/* A plugin whose subject list fails with an error code and a message. */
#include <stdio.h>

#include "gradcheck/plugin/flashcheck_plugin.h"

int32_t flashcheck_plugin_abi_version(void) { return FLASHCHECK_PLUGIN_ABI_VERSION; }
int32_t flashcheck_plugin_subjects(const fc_subject** subjects, int32_t* count, char* message, size_t size) {
  (void)subjects, (void)count;
  snprintf(message, size, "license server unreachable");
  return 7;
}
