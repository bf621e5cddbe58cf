/* The launch boundary and host capture tapes. */
#include "fh/launch.h"
#include "fh/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t launches;
uint64_t fh_launch_count(void) { return atomic_load(&launches); }

/* The kernel tables, filled by fh_launch_register (each layer's own
 * pthread_once orders its writes before that layer's first submit). */
static const char *kernel_names[FH_K_MAX];
static fh_cpu_kernel_fn cpu_kernels[FH_K_MAX];
static fh_cuda_kernel_fn cuda_kernels[FH_K_MAX];

void fh_launch_register(int first, int count, const char *const *names, const fh_cpu_kernel_fn *cpu,
                        const fh_cuda_kernel_fn *cuda) {
  for (int i = 0; i < count; ++i) {
    int id = first + i;
    if (id < 0 || id >= FH_K_MAX) continue;
    kernel_names[id] = names ? names[i] : NULL;
    cpu_kernels[id] = cpu ? cpu[i] : NULL;
    cuda_kernels[id] = cuda ? cuda[i] : NULL;
  }
}

const char *fh_kernel_name(int kernel) {
  static _Thread_local char unnamed[24];
  if (kernel >= 0 && kernel < FH_K_MAX && kernel_names[kernel]) return kernel_names[kernel];
  snprintf(unnamed, sizeof unnamed, "kernel %d", kernel);
  return unnamed;
}

typedef struct tape_entry {
  int32_t kernel;
  void *args;
} tape_entry;

struct fh_tape {
  tape_entry *entries;
  size_t n, cap;
  fh_storage **kept; /* one reference each */
  size_t nkept, capkept;
};

static _Thread_local fh_tape *active_tape;

fh_status fh_tape_new(fh_tape **out) {
  fh_tape *t = fh_calloc(1, sizeof *t);
  if (t == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a host tape");
  *out = t;
  return FH_OK;
}

void fh_tape_free(fh_tape *t) {
  if (t == NULL) return;
  if (active_tape == t) active_tape = NULL;
  for (size_t i = 0; i < t->n; ++i) fh_free(t->entries[i].args);
  for (size_t i = 0; i < t->nkept; ++i) fh_storage_release(t->kept[i]);
  fh_free(t->entries);
  fh_free(t->kept);
  fh_free(t);
}

fh_status fh_tape_begin(fh_tape *t) {
  if (active_tape != NULL) return fh_error_set(FH_ERR_EXECUTION, "a host capture is already active on this thread");
  active_tape = t;
  return FH_OK;
}

void fh_tape_end(fh_tape *t) {
  if (active_tape == t) active_tape = NULL;
}

fh_tape *fh_tape_active(void) { return active_tape; }
size_t fh_tape_length(const fh_tape *t) { return t->n; }

size_t fh_tape_kept_bytes(const fh_tape *t) {
  size_t n = 0;
  for (size_t i = 0; i < t->nkept; ++i) n += t->kept[i]->nbytes;
  return n;
}

static bool tape_keeps(const fh_tape *t, const fh_storage *s) {
  for (size_t i = t->nkept; i-- > 0;)
    if (t->kept[i] == s) return true;
  return false;
}

static fh_status tape_append(fh_tape *t, const fh_launch *l) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    tape_entry *e = fh_realloc(t->entries, cap * sizeof *e);
    if (e == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory recording a launch");
    t->entries = e;
    t->cap = cap;
  }
  if (t->nkept + (size_t)l->nuses > t->capkept) {
    size_t cap = t->capkept ? t->capkept * 2 : 16;
    while (cap < t->nkept + (size_t)l->nuses) cap *= 2;
    fh_storage **k = fh_realloc(t->kept, cap * sizeof *k);
    if (k == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory recording a launch");
    t->kept = k;
    t->capkept = cap;
  }
  void *args = fh_malloc(l->args_size ? l->args_size : 1);
  if (args == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory recording a launch");
  memcpy(args, l->args, l->args_size);
  t->entries[t->n].kernel = l->kernel;
  t->entries[t->n].args = args;
  t->n++;
  for (int i = 0; i < l->nuses; ++i) {
    fh_storage *s = l->uses[i];
    if (s != NULL && !tape_keeps(t, s)) {
      fh_storage_retain(s);
      t->kept[t->nkept++] = s;
    }
  }
  return FH_OK;
}

fh_status fh_tape_replay(fh_tape *t) {
  for (size_t i = 0; i < t->n; ++i) {
    fh_status st = cpu_kernels[t->entries[i].kernel](t->entries[i].args);
    if (st != FH_OK) return st;
  }
  atomic_fetch_add(&launches, t->n);
  return FH_OK;
}

static fh_status submit(const fh_launch *l);

fh_status fh_launch_submit(const fh_launch *l) {
  /* tracing off: this branch is the whole cost (fh/trace.h) */
  if (fh__trace_on) return fh__trace_submit(l, submit);
  return submit(l);
}

static fh_status submit(const fh_launch *l) {
  if (l->kernel < 0 || l->kernel >= FH_K_MAX)
    return fh_error_set(FH_ERR_EXECUTION, "invalid kernel id %d", (int)l->kernel);
  if (l->device.type == FH_DEVICE_CPU) {
    fh_cpu_kernel_fn fn = cpu_kernels[l->kernel];
    if (fn == NULL)
      return fh_error_set(FH_ERR_EXECUTION, "kernel '%s' has no CPU implementation", fh_kernel_name(l->kernel));
    if (active_tape != NULL) return tape_append(active_tape, l);
    atomic_fetch_add(&launches, 1);
    return fn(l->args);
  }
  fh_cuda_kernel_fn fn = cuda_kernels[l->kernel];
  if (fn == NULL) {
    fh_status st = fh_device_check(l->device);
    if (st != FH_OK) return st;
    return fh_error_set(FH_ERR_EXECUTION, "kernel '%s' has no CUDA implementation", fh_kernel_name(l->kernel));
  }
  for (int i = 0; i < l->nuses; ++i) {
    if (l->uses[i] == NULL) continue;
    fh_status st = fh_storage_record_stream(l->uses[i], l->stream);
    if (st != FH_OK) return st;
  }
  atomic_fetch_add(&launches, 1);
  return fn(l->args, fh_stream_handle(l->stream));
}

bool fh_launch_capturing(fh_device dev) {
  return dev.type == FH_DEVICE_CPU ? active_tape != NULL : fh__cuda_is_capturing(dev);
}

fh_status fh_check_host_read(fh_device dev, const char *what) {
  if (!fh_launch_capturing(dev)) return FH_OK;
  fh_error_set(FH_ERR_CAPTURE,
               "%s reads device data on the host, which is not possible during capture (the captured work has "
               "not run); return the tensor from the captured function instead",
               what);
  fh_error_set_stage("capture");
  return FH_ERR_CAPTURE;
}
