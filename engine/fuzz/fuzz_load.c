/* libFuzzer target: the value-file loader (safetensors header parser,
 * fhelium metadata, contexts, value reconstruction) on arbitrary bytes.
 * Every input must either load or fail with an error; a loaded tree must
 * serialize again and load back to an equal signature. Built with
 * -DFHELIUM_FUZZ=ON and clang (scripts/fuzz). */
#include <stdlib.h>
#include <string.h>

#include "fh/value_io.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  fh_tree_sig *sig = NULL;
  fh_tensor **leaves = NULL;
  if (fh_tree_deserialize(data, size, fh_cpu(), &sig, &leaves) == FH_OK) {
    unsigned char *bytes = NULL;
    size_t n = 0;
    if (fh_tree_serialize(sig, leaves, true, &bytes, &n) != FH_OK) abort(); /* what loads must save */
    fh_tree_sig *sig2 = NULL;
    fh_tensor **leaves2 = NULL;
    if (fh_tree_deserialize(bytes, n, fh_cpu(), &sig2, &leaves2) != FH_OK) abort(); /* and load back */
    /* strides may differ (saved copies are contiguous); the structure,
     * shapes, dtypes and exact state may not */
    if (sig2->nleaves != sig->nleaves || sig2->kind != sig->kind) abort();
    for (int64_t i = 0; i < sig->nleaves; ++i) {
      size_t nb = fh_tensor_nbytes(leaves[i]);
      if (nb != fh_tensor_nbytes(leaves2[i]) || leaves[i]->dtype != leaves2[i]->dtype) abort();
      unsigned char *a = malloc(nb + 1), *b = malloc(nb + 1);
      if (a == NULL || b == NULL) abort();
      if (fh_tensor_read(leaves[i], a) != FH_OK || fh_tensor_read(leaves2[i], b) != FH_OK) abort();
      if (memcmp(a, b, nb) != 0) abort(); /* bytes, so NaN payloads compare too */
      free(a);
      free(b);
    }
    free(bytes);
    fh_value_io_free_leaves(leaves2, sig2->nleaves);
    fh_tree_sig_release(sig2);
    fh_value_io_free_leaves(leaves, sig->nleaves);
    fh_tree_sig_release(sig);
  }
  fh_error_clear();
  return 0;
}
