/* A plugin built against another ABI version: the loader must refuse it. */
#include <stdint.h>
int32_t flashcheck_plugin_abi_version(void) { return 999; }
int32_t flashcheck_plugin_subjects(const void** subjects, int32_t* count, char* message, unsigned long size) {
  (void)subjects, (void)count, (void)message, (void)size;
  return 0;
}
