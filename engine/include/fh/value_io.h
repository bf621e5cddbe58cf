/* fhelium value files: trees of tensors and CKKS values in one safetensors
 * file (fh/safetensors.h), with the envelope of every value in the
 * header's "__metadata__" (whose values are strings, per safetensors):
 *
 *   "format":                 "fhelium"
 *   "fhelium.schema_version": "1"
 *   "fhelium.tree":           JSON of the tree, see below
 *   "fhelium.contexts":       JSON {context_id: {"ring_degree": N,
 *                             "default_scale": s, "q_primes": [...],
 *                             "p_primes": [...]}} for every context used
 *
 * Tree JSON nodes:
 *   {"kind": "tensor", "tensor": NAME, "dtype": D, "requires_grad": B}
 *   {"kind": "value", "value_type": T, "schema_version": 1,
 *    "context_id": ID, "metadata": {...}, "tensors": {"data": {"tensor":
 *    NAME, "dtype": D, "requires_grad": B}}}
 *   {"kind": "list" | "tuple", "items": [node, ...]}
 *   {"kind": "dict", "keys": [k, ...], "items": [node, ...]}  (keys sorted)
 * NAME is the safetensors entry holding the bytes: the node's tree path
 * (e.g. `[2]["w"].data`; "data"/"message" for a single value, "tensor"
 * for a single tensor). complex128 tensors are stored as F64 with a
 * trailing dimension of 2 (re, im); D records the real dtype. Entries are
 * contiguous copies in leaf order (fh/signature.h), so any strided tensor
 * round-trips to a contiguous one with the same shape and values.
 *
 * Loading rebuilds every context from its parameters (its id must match,
 * else the file is corrupt) or reuses the live one, and every value through
 * fh_value_from_metadata with all fields required, so a loaded value passes
 * the same validation as a constructed one. A safetensors file without
 * fhelium metadata loads as a dict of its tensors. Every malformed input is
 * a ValueError naming the problem (and the tree path where there is one).
 *
 * Writing a file is atomic: a temporary file in the target's directory
 * (mode 0600), written, fsync'ed, then renamed over the target
 * (overwrite=true) or hard-linked to it (overwrite=false: fails with a
 * ValueError if the target exists, without replacing it), then the
 * directory fsync'ed. A target that is a directory, FIFO, socket or device
 * is refused before anything is written. A tree containing a SecretKey is
 * refused (ValueError naming its path) unless allow_secret.
 *
 * Reading a file opens it with O_NONBLOCK (a FIFO must not wait for a
 * writer) and refuses anything but a regular file before the first read.
 * Every failure of the operating system (open, stat, read, write, fsync,
 * close, rename, link) is an IOError (FH_ERR_IO) naming the path and
 * giving strerror; callers put their own name in front.
 *
 * Ownership: serialize returns malloc'd bytes (free); the readers return a
 * new signature reference and a malloc'd array of new tensor references
 * (fh_value_io_free_leaves). */
#ifndef FH_VALUE_IO_H
#define FH_VALUE_IO_H

#include "fh/signature.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FH_FILE_SCHEMA_VERSION 1

/* What a save writes: fhelium's own files (above), or FHElium 0.30's
 * ("fhelium-value", file schema 2 / value schema 4: one value per file,
 * engine/exec/value_io_030.h), which FHElium 0.30 loads. Loading reads
 * both, telling them apart by their metadata. */
typedef enum fh_file_format { FH_FORMAT_FHELIUM = 0, FH_FORMAT_FHELIUM_030 } fh_file_format;

/* `leaves` are the tree's tensors in leaf order (sig->nleaves of them). */
fh_status fh_tree_serialize(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret, unsigned char **bytes,
                            size_t *nbytes);
fh_status fh_tree_save(const fh_tree_sig *sig, fh_tensor *const *leaves, const char *path, bool overwrite,
                       bool allow_secret);
/* The same in `format`; FH_FORMAT_FHELIUM_030 needs a tree that is one
 * value (ValueError otherwise) whose context FHElium 0.30 can have:
 * galois_generator 3, max_level #Q - 1, key_digits below_p, primes below
 * 2^60 (2^30 for its int32 presets); a slots plaintext needs none. */
fh_status fh_tree_serialize_as(const fh_tree_sig *sig, fh_tensor *const *leaves, bool allow_secret,
                               fh_file_format format, unsigned char **bytes, size_t *nbytes);
fh_status fh_tree_save_as(const fh_tree_sig *sig, fh_tensor *const *leaves, const char *path, bool overwrite,
                          bool allow_secret, fh_file_format format);

/* Tensors are created on `dev`. */
fh_status fh_tree_deserialize(const void *bytes, size_t nbytes, fh_device dev, fh_tree_sig **sig, fh_tensor ***leaves);
fh_status fh_tree_load(const char *path, fh_device dev, fh_tree_sig **sig, fh_tensor ***leaves);
/* The same with the context of an FHElium 0.30 file's value (its files carry
 * none; without one, the value's FHElium 0.30 preset is found from its
 * ring degree, residue dtype and prime ids, see value_io_030.h). NULL: none
 * given; given for an fhelium file it is a ValueError. */
fh_status fh_tree_deserialize_with(const void *bytes, size_t nbytes, fh_device dev, fh_ckks_context *context,
                                   fh_tree_sig **sig, fh_tensor ***leaves);
fh_status fh_tree_load_with(const char *path, fh_device dev, fh_ckks_context *context, fh_tree_sig **sig,
                            fh_tensor ***leaves);
void fh_value_io_free_leaves(fh_tensor **leaves, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
