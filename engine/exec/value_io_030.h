/* FHElium 0.30's value files (file schema 2, value schema 4), internal to
 * the value-file module (engine/exec/value_io.c). The format, as FHElium
 * 0.30.0 writes it (its fixtures: spec/fixtures/fhelium-0.30/):
 *
 *   one value per safetensors file; "__metadata__" holds exactly
 *     "fhelium.format":         "fhelium-value"
 *     "fhelium.schema_version": "2"
 *     "fhelium.manifest":       JSON (sorted keys, no spaces) of
 *        {"file_schema_version": 2, "value_schema_version": 4,
 *         "value_type": T, "nbytes": logical bytes,
 *         "tensor_metadata": {name: {"shape", "dtype" ("torch.int64", ...),
 *                             "encoding" ("direct" | "complex_split"),
 *                             "payloads": [entry names]}},
 *         "value_metadata": {...}}
 *   value_metadata, per type (every field required, no other allowed):
 *     Plaintext   depth, scale, representation ("slots", "rns",
 *                 "integer_coefficients", "approximate_coefficients"),
 *                 polynomial_domain, modulus_basis, residue_representation
 *                 (null where they do not apply), prime_ids, has_message,
 *                 has_data
 *     Ciphertext  depth, scale, prime_ids, polynomial_domain, modulus_basis,
 *                 residue_representation
 *     keys        prime_ids, polynomial_domain, modulus_basis,
 *                 residue_representation (+ rotation_step for RotationKey,
 *                 normalized into [-S/2, S/2))
 *   residues are int64 (int32 for the int32 presets), lazy in [0, 2q);
 *   Montgomery residues are x * 2^62 mod q (2^30 for int32); NTT-domain rows
 *   are in FHElium's evaluation order (fh_ckks_fhelium_ntt_order); complex
 *   tensors are split into NAME.real and NAME.imag entries.
 *
 * Files carry no context: the reader takes the caller's (`hint`) or finds
 * the one FHElium 0.30 preset the value fits (ring degree, residue dtype,
 * prime_ids of its depth and basis; at depth 0 a plaintext's or
 * ciphertext's scale must then be the preset's default scale when several
 * fit). Loading converts exactly: residues reduced into [0, q), Montgomery
 * radix 2^62 (2^30) -> 2^64, FHElium's NTT order -> ours; writing converts
 * back (residues in [0, q)). */
#ifndef FH_VALUE_IO_030_H
#define FH_VALUE_IO_030_H

#include "fh/safetensors.h"
#include "fh/values.h"

/* Read n bytes at absolute offset off of the input (file or memory). */
typedef fh_status (*fh__v030_read_fn)(const void *rctx, uint64_t off, void *dst, size_t n);

/* True when the header's metadata is FHElium's (it has "fhelium.format"). */
bool fh__v030_is(const fh_st_header *h);

/* The value of an FHElium 0.30 file whose header is h, on `dev`. hint may
 * be NULL. New reference. ValueError ("unsupported ..." for another version
 * or anything this reader does not know, "corrupt ..." for inconsistencies)
 * or StateError naming the field; nothing is returned on failure. */
fh_status fh__v030_decode(const fh_st_header *h, fh__v030_read_fn rd, const void *rctx, fh_device dev,
                          fh_ckks_context *hint, fh_value **out);

/* The file FHElium 0.30 loads for v: `header` (8-byte prefix included),
 * then the payloads in order. */
typedef struct fh__v030_file {
  char *header;
  size_t hlen;
  int npayloads;
  unsigned char *payload[2];
  size_t nbytes[2];
} fh__v030_file;
fh_status fh__v030_encode(const fh_value *v, bool allow_secret, fh__v030_file *out);
void fh__v030_file_free(fh__v030_file *f);

#endif
