/* The CUDA graph back end of programs in a build without CUDA
 * (engine/exec/graph.cu otherwise): every function fails with CudaError.
 * CUDA graph programs cannot be created there anyway (their inputs need a
 * CUDA device), so these are never reached through the public API. */
#ifndef FH_WITH_CUDA
#include "fh/program.h"

static fh_status no_cuda(void) {
  return fh_error_set(FH_ERR_CUDA, "no CUDA device is present (fhelium was built without CUDA)");
}

fh_status fh__graph_begin(fh_stream *s) { (void)s; return no_cuda(); }
fh_status fh__graph_end(fh_stream *s, fh_stream *const *forks, int nforks, bool keep, fh__graph **out) {
  (void)s; (void)forks; (void)nforks; (void)keep;
  *out = NULL;
  return no_cuda();
}
fh_status fh__graph_instantiate(fh__graph *g, uint64_t *nodes) { (void)g; (void)nodes; return no_cuda(); }
fh_status fh__graph_launch(fh__graph *g, fh_stream *s) { (void)g; (void)s; return no_cuda(); }
void fh__graph_free(fh__graph *g) { (void)g; }
#else
typedef int fh__graph_none_unused; /* ISO C: a translation unit is not empty */
#endif
