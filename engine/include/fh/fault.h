/* Fault injection (test builds only) and the engine's allocation and I/O
 * wrappers.
 *
 * Every allocation of the engine (host heap, pinned host memory, CUDA device
 * memory) and every file operation of its value files and traces goes through
 * the wrappers below. In a normal build (FH_FAULTS undefined: CMake option
 * FHELIUM_FAULTS, off by default and never on in a Release build unless asked)
 * they are static inline calls of the C library and cost nothing.
 *
 * In a fault build (-DFHELIUM_FAULTS=ON defines FH_FAULTS) each wrapper counts
 * its call at one of two sites, "alloc" and "io", and fails the one call whose
 * ordinal (1-based, per site, since the process started or since the last
 * fh_fault_arm) was armed: FHELIUM_FAULT_ALLOC=N makes the N-th allocation
 * return NULL (a CUDA allocation returns cudaErrorMemoryAllocation),
 * FHELIUM_FAULT_IO=N makes the N-th open/read/write/fsync/rename/link/close
 * of a written file fail with errno EIO. A fault fires once; the calls after
 * it succeed again. Jansson's own allocations (inside json_loads, json_dumps,
 * json_object...) are not counted: Jansson 2.14's json_loads frees a pointer it
 * never allocated when one of them fails (the sweep found it; docs/faults.md).
 *
 * Ownership: the allocation wrappers return memory the caller owns and frees
 * with fh_free (it is the C library's heap: free() is the same); fh_fopen and
 * fh_mkstemp return a stream / descriptor the caller closes. Nothing here
 * keeps a reference. */
#ifndef FH_FAULT_H
#define FH_FAULT_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The two sites. */
typedef enum fh_fault_site { FH_FAULT_ALLOC = 0, FH_FAULT_IO = 1 } fh_fault_site;

/* Counters of a fault build: calls counted at each site since the process
 * started (or the last fh_fault_arm), the armed ordinal (0: none) and the
 * number of faults injected so far (a copy). */
typedef struct fh_fault_counts {
  uint64_t alloc, io;
  uint64_t alloc_at, io_at;
  uint64_t alloc_injected, io_injected;
} fh_fault_counts;

#ifdef FH_FAULTS
#define FH_FAULTS_ENABLED 1
/* Count one call at `site`; true when this call must fail (errno is then EIO
 * for the io site, ENOMEM for the alloc site). Thread-safe. */
bool fh__fault_hit(fh_fault_site site);
/* Reset the site's counter to 0 and arm its `at`-th call from now (0 disarms).
 * The environment variables are read once, at the first count. */
void fh_fault_arm(fh_fault_site site, uint64_t at);
void fh_fault_counts_get(fh_fault_counts *out);
#else
#define FH_FAULTS_ENABLED 0
static inline bool fh__fault_hit(fh_fault_site site) {
  (void)site;
  return false;
}
#endif

/* ---- allocation (the C library's heap) ---------------------------------- */
static inline void *fh_malloc(size_t n) { return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : malloc(n); }
static inline void *fh_calloc(size_t n, size_t size) {
  return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : calloc(n, size);
}
/* On failure p is untouched (still owned by the caller), as with realloc. */
static inline void *fh_realloc(void *p, size_t n) { return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : realloc(p, n); }
static inline void *fh_aligned_alloc(size_t align, size_t n) {
  return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : aligned_alloc(align, n);
}
static inline char *fh_strdup(const char *s) { return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : strdup(s); }
static inline char *fh_strndup(const char *s, size_t n) {
  return fh__fault_hit(FH_FAULT_ALLOC) ? NULL : strndup(s, n);
}
static inline void fh_free(void *p) { free(p); }

/* ---- file operations (POSIX); a fault gives -1 (NULL) with errno EIO ----- */
static inline FILE *fh_fopen(const char *path, const char *mode) {
  return fh__fault_hit(FH_FAULT_IO) ? NULL : fopen(path, mode);
}
/* fh_fclose always closes the stream; a fault only changes the result. */
static inline int fh_fclose(FILE *f) {
  int r = fclose(f);
  if (fh__fault_hit(FH_FAULT_IO)) {
    errno = EIO;
    return EOF;
  }
  return r;
}
/* open without O_CREAT (no mode) */
static inline int fh_open(const char *path, int flags) { return fh__fault_hit(FH_FAULT_IO) ? -1 : open(path, flags); }
static inline int fh_mkstemp(char *tmpl) { return fh__fault_hit(FH_FAULT_IO) ? -1 : mkstemp(tmpl); }
static inline ssize_t fh_write(int fd, const void *p, size_t n) {
  return fh__fault_hit(FH_FAULT_IO) ? -1 : write(fd, p, n);
}
static inline ssize_t fh_pread(int fd, void *p, size_t n, off_t off) {
  return fh__fault_hit(FH_FAULT_IO) ? -1 : pread(fd, p, n, off);
}
static inline int fh_fsync(int fd) { return fh__fault_hit(FH_FAULT_IO) ? -1 : fsync(fd); }
/* fh_close_written: close a descriptor that was written (its result reports
 * a late write error); always closes. */
static inline int fh_close_written(int fd) {
  int r = close(fd);
  if (fh__fault_hit(FH_FAULT_IO)) {
    errno = EIO;
    return -1;
  }
  return r;
}
static inline int fh_rename(const char *from, const char *to) {
  return fh__fault_hit(FH_FAULT_IO) ? -1 : rename(from, to);
}
static inline int fh_link(const char *from, const char *to) { return fh__fault_hit(FH_FAULT_IO) ? -1 : link(from, to); }
/* A file operation that is not one call (a library writing a stream): count
 * it first, and fail it when this is true (errno is EIO). */
static inline bool fh_fault_io_now(void) { return fh__fault_hit(FH_FAULT_IO); }

#ifdef __cplusplus
}
#endif
#endif
