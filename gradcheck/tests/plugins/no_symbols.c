/* A shared library that is not a flashcheck plugin: the loader must say so, not crash. */
int unrelated_function(void) { return 42; }
