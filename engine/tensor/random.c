/* Seeded generator (xoshiro256** seeded through splitmix64) and random
 * tensor creation. Not cryptographic: CKKS randomness has its own CSPRNG. */
#include <math.h>
#include <stdlib.h>
#include <sys/random.h>

#include "fh/tensor.h"

struct fh_generator {
  uint64_t seed;
  uint64_t s[4];
  int has_spare;
  double spare;
};

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static void gen_seed(fh_generator *g, uint64_t seed) {
  uint64_t x = seed;
  g->seed = seed;
  for (int i = 0; i < 4; ++i) g->s[i] = splitmix64(&x);
  g->has_spare = 0;
}

fh_status fh_generator_new(uint64_t seed, fh_generator **out) {
  fh_generator *g = fh_malloc(sizeof *g);
  if (g == NULL) return fh_error_set(FH_ERR_MEMORY, "out of memory creating a generator");
  gen_seed(g, seed);
  *out = g;
  return FH_OK;
}

void fh_generator_free(fh_generator *g) { fh_free(g); }
uint64_t fh_generator_seed(const fh_generator *g) { return g->seed; }

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t fh_generator_next(fh_generator *g) {
  uint64_t *s = g->s;
  uint64_t r = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

double fh_generator_uniform(fh_generator *g) { return (double)(fh_generator_next(g) >> 11) * 0x1.0p-53; }

double fh_generator_normal(fh_generator *g) {
  if (g->has_spare) {
    g->has_spare = 0;
    return g->spare;
  }
  double u1, u2;
  do u1 = fh_generator_uniform(g);
  while (u1 <= 0);
  u2 = fh_generator_uniform(g);
  double r = sqrt(-2.0 * log(u1));
  g->spare = r * sin(2 * M_PI * u2);
  g->has_spare = 1;
  return r * cos(2 * M_PI * u2);
}

static _Thread_local fh_generator *default_gen;

static fh_status get_default(fh_generator **g) {
  if (default_gen == NULL) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
      return fh_error_set(FH_ERR_GENERIC, "could not seed the default generator from the OS");
    fh_status st = fh_generator_new(seed, &default_gen);
    if (st != FH_OK) return st;
  }
  *g = default_gen;
  return FH_OK;
}

static fh_status random_tensor(int ndim, const int64_t *shape, fh_generator *g, const fh_tensor_options *o,
                               fh_tensor **out, bool normal) {
  const char *what = normal ? "randn" : "rand";
  if (!fh_dtype_is_floating(o->dtype) && !fh_dtype_is_complex(o->dtype))
    return fh_error_set(FH_ERR_TYPE, "%s: dtype must be float32, float64 or complex128, got %s", what,
                        fh_dtype_name(o->dtype));
  fh_status st;
  if (g == NULL && (st = get_default(&g)) != FH_OK) return st;
  fh_tensor_options host = *o;
  host.device = fh_cpu();
  fh_tensor *t = NULL;
  if ((st = fh_tensor_empty(ndim, shape, &host, &t)) != FH_OK) return st;
  int64_t n = fh_tensor_numel(t) * (o->dtype == FH_COMPLEX128 ? 2 : 1);
  for (int64_t i = 0; i < n; ++i) {
    if (o->dtype == FH_FLOAT32) {
      /* uniform float32 from 24 random bits: rounding a 53-bit double in
       * [0, 1) to float could give 1.0f */
      float x = normal ? (float)fh_generator_normal(g) : (float)(fh_generator_next(g) >> 40) * 0x1.0p-24f;
      ((float *)t->storage->data)[i] = x;
    } else {
      ((double *)t->storage->data)[i] = normal ? fh_generator_normal(g) : fh_generator_uniform(g);
    }
  }
  if (o->device.type == FH_DEVICE_CPU) {
    *out = t;
    return FH_OK;
  }
  st = fh_tensor_to(t, o->device, false, NULL, false, out);
  fh_tensor_release(t);
  return st;
}

fh_status fh_tensor_rand(int ndim, const int64_t *shape, fh_generator *g, const fh_tensor_options *o, fh_tensor **out) {
  return random_tensor(ndim, shape, g, o, out, false);
}
fh_status fh_tensor_randn(int ndim, const int64_t *shape, fh_generator *g, const fh_tensor_options *o,
                          fh_tensor **out) {
  return random_tensor(ndim, shape, g, o, out, true);
}
