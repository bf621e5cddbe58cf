/* fhelium distributed: one process per GPU (or per CPU rank), on one host or
 * many, started by mpirun (scripts/launch). Built on MPI (Open MPI) for
 * process startup, host data and CPU tensors, and on NCCL for CUDA tensors,
 * bootstrapped from MPI in the usual way (rank 0's ncclUniqueId broadcast
 * over MPI_COMM_WORLD).
 *
 * The job. fh_dist_init joins the job: under a launcher (mpirun sets
 * OMPI_COMM_WORLD_SIZE / PMIX_RANK / PMI_SIZE) it initialises MPI; without one
 * the process is a job of one rank and no MPI call is made. It chooses the
 * rank's device: "cuda" (GPU number local_rank of its host, with an NCCL
 * communicator over every rank) or "cpu" (no NCCL). Every rank of a job must
 * choose the same kind; fh_dist_init fails on every rank otherwise. Exit:
 * fh_dist_finalize (registered with atexit by fh_dist_init) destroys the
 * communicator and finalizes MPI; fh_dist_abort ends every rank of the job at
 * once (MPI_Abort), which the fhelium executable does when a rank's script
 * fails, so that no rank waits forever for one that stopped.
 *
 * Collectives. Every collective below works on a list of tensors (the leaves
 * of a tree, fh/signature.h) of one device: CPU tensors through MPI, CUDA
 * tensors (on the rank's GPU) through NCCL, ordered on the current stream of
 * that device like any launch. Each is a launch (fh/launch.h: kernel
 * FH_K_DIST_COLLECTIVE, CPU = MPI, CUDA = NCCL), so a host tape records it and
 * a CUDA stream capture records the NCCL call: a HostGraphProgram or a
 * CudaGraphProgram may contain collectives; every rank must then replay its
 * program the same number of times, in the same order relative to its other
 * collectives. Inputs are read, never written; outputs are new contiguous
 * tensors (new references).
 *
 * Agreement. A collective whose ranks disagree (shapes, dtypes, exact CKKS
 * state, root, operation) would hang or corrupt memory. The callers (the
 * binding) therefore validate locally, then call fh_dist_agree with a
 * canonical description of what this rank is about to do (its tree
 * signature without strides, the operation and its parameters, the device
 * kind) and its local status: every rank learns whether every rank is OK and
 * every description is equal, and fails with the same error otherwise, so
 * the error is raised on every rank and no rank enters the collective.
 *
 * Modular sums. With moduli (one per row of the limb dimension, the
 * second-to-last, as fh_rns), all_reduce and reduce_scatter compute the sum
 * modulo q of residues below q: for ciphertexts and RNS plaintexts with equal
 * state, exactly homomorphic addition. With W ranks and largest modulus q, when
 * W (q - 1) < 2^64 the residues are summed as uint64 (MPI_SUM / ncclSum, no
 * wrap possible) and reduced once; otherwise each residue is split into its
 * low 32 bits and the rest, both halves are summed (each sum stays below
 * W 2^32 < 2^64 for W < 2^32) and recombined modulo q: exact for any number of
 * ranks, never an overflow.
 *
 * Thread use: MPI and NCCL are called from the thread that called
 * fh_dist_init only (MPI_THREAD_FUNNELED).
 *
 * Ownership: every fh_tensor ** output receives new references; on failure
 * nothing is written. */
#ifndef FH_DIST_H
#define FH_DIST_H

#include "fh/ckks_kernels.h" /* FH_K_CKKS_END */
#include "fh/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the job ----------------------------------------------------------------- */
typedef enum fh_dist_kind { FH_DIST_AUTO = 0, FH_DIST_CPU, FH_DIST_CUDA } fh_dist_kind;

typedef struct fh_dist_info {
  int32_t rank, world_size;   /* this process's rank in the job, the number of ranks */
  int32_t local_rank, local_size; /* among the ranks of this host */
  int32_t kind;               /* FH_DIST_CPU or FH_DIST_CUDA */
  fh_device device;           /* cpu, or cuda:<local_rank> */
  bool launched;              /* started by a launcher (MPI initialised) */
  char host[64];              /* this host's name */
} fh_dist_info;

/* Join the job. `kind` AUTO takes "cuda" when this build has NCCL and the rank
 * has a GPU of its own, else "cpu"; the environment variable
 * FHELIUM_DIST_DEVICE ("cpu" / "cuda", set by scripts/launch) replaces AUTO.
 * A second call with the same kind (or AUTO) is a no-op; another kind is a
 * StateError. Errors (on every rank): StateError for a launcher without MPI
 * in this build, CudaError when a rank has no GPU of its own (local_rank >=
 * the host's device count) or the build has no NCCL, ExecutionError when the
 * ranks chose different kinds. */
fh_status fh_dist_init(fh_dist_kind kind);
bool fh_dist_initialized(void);
/* The job (borrowed; zeros before fh_dist_init). */
const fh_dist_info *fh_dist_info_get(void);
/* True when the environment says a launcher started this process. */
bool fh_dist_launched_env(void);
bool fh_dist_built_with_mpi(void);
bool fh_dist_built_with_nccl(void);
/* "Open MPI v4.1.4, ..." / "" without MPI; "NCCL 2.28.9" / "". Borrowed. */
const char *fh_dist_mpi_version(void);
const char *fh_dist_nccl_version(void);

/* Wait until every rank has called it. */
fh_status fh_dist_barrier(void);
/* End every rank of the job now with exit status `code` (MPI_Abort when
 * launched, else exit). Never returns. */
void fh_dist_abort(int code);
/* Destroy the NCCL communicator and finalize MPI (idempotent). */
void fh_dist_finalize(void);

/* ---- agreement ------------------------------------------------------------------ */
/* Every rank (peer < 0) or this rank and `peer` (point-to-point) exchange
 * (local, desc): FH_OK on every one of them when every local status is FH_OK
 * and every description equals the others (byte for byte). Otherwise every
 * one of them fails: a rank whose own status failed keeps its own error
 * (kind and message, as recorded when it failed); the others fail with the
 * first failing rank's kind and "rank R failed: <its message>". When every
 * status is OK but descriptions differ, every rank fails with
 * ExecutionInputError "the ranks' arguments differ (compared before anything
 * moves): rank 0 has ..., rank R has ..." (both shortened around the first
 * difference). `what` (e.g. "all_reduce") names the collective in messages.
 * In a job of one rank without a peer, returns `local`. */
fh_status fh_dist_agree(const char *what, fh_status local, const char *desc, size_t desc_len, int peer);

/* Small host exchanges (flags, modes): every rank's `n` bytes into `recv`
 * (world_size * n bytes, in rank order) / this rank's bytes for the peer's. */
fh_status fh_dist_allgather_bytes(const void *send, size_t n, void *recv);
fh_status fh_dist_exchange_bytes(int peer, const void *send, size_t n, void *recv);

/* ---- collectives on lists of tensors ------------------------------------------- */
/* One modulus list per tensor (limb rows = the second-to-last dimension), or
 * nmoduli == 0 for a plain sum. */
typedef struct fh_dist_moduli {
  const uint64_t *moduli;
  int32_t nmoduli;
} fh_dist_moduli;

/* What every rank must agree on besides its tensors' signatures: checks the
 * tensors (one device: the cpu, or the rank's GPU with kind cuda; dtypes the
 * operation supports; at most 2^31 - 1 elements per tensor on the CPU; for
 * a sum: no bool; for a modular sum: uint64 tensors of rank >= 2 whose limb
 * rows match their moduli, 2 <= q < 2^62) and the root or peer (0 <=
 * r < world_size, a peer != rank). Communicates nothing. `what` names the
 * function for messages ("fh.distributed.all_reduce"). */
typedef enum fh_dist_op {
  FH_DIST_ALL_REDUCE = 0,
  FH_DIST_ALL_GATHER,
  FH_DIST_BROADCAST,
  FH_DIST_REDUCE_SCATTER,
  FH_DIST_SEND,
  FH_DIST_RECV,
  FH_DIST_OP_COUNT
} fh_dist_op;
const char *fh_dist_op_name(fh_dist_op op); /* "all_reduce", ... */
fh_status fh_dist_check(const char *what, fh_dist_op op, int n, fh_tensor *const *t, const fh_dist_moduli *mods,
                        int root_or_peer);

/* The collectives. They expect fh_dist_check and fh_dist_agree to have
 * passed on every rank (same n, shapes, dtypes, moduli, root) and
 * communicate at once:
 *   all_reduce:     out[i] = sum over ranks of t[i] (modular with mods[i])
 *   all_gather:     out[i] of shape [world_size, *t[i].shape]: rank r's t[i] at r
 *   broadcast:      out[i] = the root's t[i] (t[i] on other ranks gives the shape)
 *   reduce_scatter: t holds world_size * k tensors, chunk j (tensors j*k ..
 *                   j*k + k - 1) destined for rank j; out[i] (k of them) = sum
 *                   over ranks of their chunk `rank`, tensor i (mods: k entries)
 *   send / recv:    t[i] to rank `peer` / out[i] shaped like t[i] from `peer`
 * `mods` may be NULL (plain sums). */
fh_status fh_dist_all_reduce(int n, fh_tensor *const *t, const fh_dist_moduli *mods, fh_tensor **out);
fh_status fh_dist_all_gather(int n, fh_tensor *const *t, fh_tensor **out);
fh_status fh_dist_broadcast(int n, fh_tensor *const *t, int root, fh_tensor **out);
fh_status fh_dist_reduce_scatter(int k, fh_tensor *const *t, const fh_dist_moduli *mods, fh_tensor **out);
fh_status fh_dist_send(int n, fh_tensor *const *t, int peer);
fh_status fh_dist_recv(int n, fh_tensor *const *like, int peer, fh_tensor **out);

/* Host bytes (serialized trees): the root's `len` bytes to every rank. On
 * the root `*data` / `*len` are its bytes (kept); elsewhere they receive a
 * malloc'd copy (fh_free() it). */
fh_status fh_dist_broadcast_bytes(int root, void **data, size_t *len);
fh_status fh_dist_send_bytes(int peer, const void *data, size_t len);
fh_status fh_dist_recv_bytes(int peer, void **data, size_t *len);

/* Test aid (not API): with `on`, every modular sum takes the split path,
 * as it does when W (q - 1) >= 2^64, so that specs check it with few ranks. */
void fh__dist_force_split(bool on);

/* ---- kernels (the launch boundary) --------------------------------------------- */
typedef enum fh_dist_kernel_id {
  FH_K_DIST_COLLECTIVE = FH_K_CKKS_END, /* fh_dist_coll_args: CPU MPI, CUDA NCCL */
  FH_K_DIST_MOD_SPLIT,                  /* fh_dist_mod_args: residues -> (low 32 bits, high bits) */
  FH_K_DIST_MOD_JOIN,                   /* fh_dist_mod_args: summed halves or sums -> residues mod q */
  FH_K_DIST_END
} fh_dist_kernel_id;
#define FH_K_DIST_COUNT (FH_K_DIST_END - FH_K_DIST_COLLECTIVE)

/* Element types a collective moves or sums (the tensor dtype mapped onto
 * what MPI and NCCL know: complex128 sums as pairs of float64, bool moves as
 * bytes). */
typedef enum fh_dist_type {
  FH_DIST_T_BYTE = 0,
  FH_DIST_T_INT32,
  FH_DIST_T_UINT32,
  FH_DIST_T_INT64,
  FH_DIST_T_UINT64,
  FH_DIST_T_FLOAT32,
  FH_DIST_T_FLOAT64,
  FH_DIST_T_COUNT
} fh_dist_type;

#define FH_DIST_MAX_PARTS 64 /* tensors in one launch (grouped NCCL calls); more go in several launches */
typedef struct fh_dist_part {
  void *send;      /* this rank's input (or chunk array for reduce_scatter) */
  void *recv;      /* output */
  uint64_t count;  /* elements per rank of `type` (all_gather, reduce_scatter: of one rank's chunk) */
  int32_t type;    /* fh_dist_type */
  int32_t sum;     /* reduce with a sum (all_reduce, reduce_scatter) */
} fh_dist_part;
typedef struct fh_dist_coll_args {
  int32_t op;          /* fh_dist_op */
  int32_t peer;        /* root (broadcast) or peer (send, recv) */
  int32_t nparts;
  int32_t device;      /* CUDA ordinal (NCCL) */
  void *comm;          /* ncclComm_t (CUDA) */
  fh_dist_part part[FH_DIST_MAX_PARTS];
} fh_dist_coll_args;

typedef struct fh_dist_mod_args {
  uint64_t *out;        /* split: [chunks, 2, chunk]; join: [numel] */
  const uint64_t *in;   /* split: [chunks * chunk]; join: [2, numel] (split) or [numel] (sums) */
  uint64_t numel;       /* elements of one chunk (join: of the output) */
  uint64_t chunks;      /* split only */
  uint64_t ncols;       /* the last dimension's size: limb row of element i = (i / ncols) % nmoduli */
  int32_t split;        /* join: the input holds halves */
  int32_t nmoduli;
  fh_modulus mod[FH_RNS_MAX_LIMBS];
} fh_dist_mod_args;

#ifdef __cplusplus
}
#endif
#endif
