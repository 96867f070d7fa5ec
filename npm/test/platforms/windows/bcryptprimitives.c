/* Wine 8.0 (Debian 12) lacks bcryptprimitives.dll, which every Windows since
 * 8 has and Rust's standard library imports (ProcessPrng, its randomness):
 * the test gives Wine this stand-in, over advapi32's RtlGenRandom. Never
 * shipped: only the loader test under Wine uses it. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
  while (length > 0) {
    ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
    if (!SystemFunction036(data, chunk)) return FALSE;
    data += chunk;
    length -= chunk;
  }
  return TRUE;
}
