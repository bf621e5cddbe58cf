/* Fault injection (fh/fault.h): the counters of a fault build. Compiled to
 * nothing without FH_FAULTS. */
#include "fh/fault.h"

#ifdef FH_FAULTS
#include <execinfo.h>
#include <stdatomic.h>

static atomic_uint_fast64_t counts[2], armed[2], injected[2];
static atomic_int initialised; /* 0: not yet, 1: in progress, 2: done */

static uint64_t env_ordinal(const char *name) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') return 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    fprintf(stderr, "fhelium: %s=%s is not a count (expected a positive integer); no fault is armed\n", name, s);
    return 0;
  }
  return (uint64_t)v;
}

static void init_once(void) {
  int expected = 0;
  if (atomic_load(&initialised) == 2) return;
  if (!atomic_compare_exchange_strong(&initialised, &expected, 1)) {
    while (atomic_load(&initialised) != 2) {
    }
    return;
  }
  atomic_store(&armed[FH_FAULT_ALLOC], env_ordinal("FHELIUM_FAULT_ALLOC"));
  atomic_store(&armed[FH_FAULT_IO], env_ordinal("FHELIUM_FAULT_IO"));
  atomic_store(&initialised, 2);
}

bool fh__fault_hit(fh_fault_site site) {
  init_once();
  uint64_t n = atomic_fetch_add(&counts[site], 1) + 1;
  uint64_t at = atomic_load(&armed[site]);
  if (at == 0 || n != at) return false;
  atomic_fetch_add(&injected[site], 1);
  /* FHELIUM_FAULT_TRACE=1: where the fault was injected, on stderr (resolve the
   * library offsets with addr2line -f -e <library> <offset>) */
  const char *tr = getenv("FHELIUM_FAULT_TRACE");
  if (tr != NULL && *tr != '\0' && *tr != '0') {
    void *frames[32];
    int k = backtrace(frames, 32);
    fprintf(stderr, "fhelium: injected %s fault #%llu at:\n", site == FH_FAULT_IO ? "io" : "alloc", (unsigned long long)n);
    backtrace_symbols_fd(frames, k, 2);
  }
  errno = site == FH_FAULT_IO ? EIO : ENOMEM;
  return true;
}

void fh_fault_arm(fh_fault_site site, uint64_t at) {
  init_once();
  atomic_store(&armed[site], 0);
  atomic_store(&counts[site], 0);
  atomic_store(&armed[site], at);
}

void fh_fault_counts_get(fh_fault_counts *out) {
  init_once();
  out->alloc = atomic_load(&counts[FH_FAULT_ALLOC]);
  out->io = atomic_load(&counts[FH_FAULT_IO]);
  out->alloc_at = atomic_load(&armed[FH_FAULT_ALLOC]);
  out->io_at = atomic_load(&armed[FH_FAULT_IO]);
  out->alloc_injected = atomic_load(&injected[FH_FAULT_ALLOC]);
  out->io_injected = atomic_load(&injected[FH_FAULT_IO]);
}
#else
typedef int fh__fault_unused; /* ISO C: a translation unit is not empty */
#endif
