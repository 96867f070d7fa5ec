/* Loads a Node addon DLL the way node.exe's process.dlopen does (LoadLibrary:
 * every import resolved, DllMain and TLS callbacks run) and looks up its
 * Node-API entry point. Prints one line; exit status 0 when both worked. */
#include <stdio.h>
#include <windows.h>

int wmain(int argc, wchar_t **argv) {
  if (argc != 2) {
    fputs("usage: loader ADDON.node\n", stderr);
    return 2;
  }
  HMODULE addon = LoadLibraryExW(argv[1], NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
  if (addon == NULL) {
    printf("LoadLibrary failed: error %lu\n", GetLastError());
    return 1;
  }
  FARPROC entry = GetProcAddress(addon, "napi_register_module_v1");
  printf("loaded; napi_register_module_v1 %s\n", entry != NULL ? "exported" : "missing");
  return entry != NULL ? 0 : 1;
}
