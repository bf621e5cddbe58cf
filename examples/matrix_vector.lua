-- Encrypted matrix-vector product by cyclic diagonals (FHElium's example 11).
--
--   scripts/run examples/matrix_vector.lua [--size 8] [--device cpu] [--seed 1]
--
-- y = M v for a public size x size matrix M and an encrypted vector v:
--   y[j] = sum_i d_i[j] * v[(j + i) mod size],   d_i[j] = M[j][(j + i) mod size]
-- The vector is encrypted as [v, v, 0, ...] so that a left rotation by i
-- (rotate_by_step(ct, -i): slot j <- slot j + i) wraps modulo `size` in the
-- first `size` slots; each diagonal is a prepared plaintext. One program
-- run is `size` rotations, `size` plaintext products, `size - 1` additions
-- and one rescale.
--
-- The computation is `program(ct_v)`: a function of its one dynamic input
-- (the encrypted vector) whose static state (engine, keys, diagonals) is
-- bound by closure, so the execution layer can capture it and replay it
-- with new inputs (HostGraphProgram on the CPU, CudaGraphProgram on a GPU).
-- Here it runs eagerly, for three different inputs, and prints a
-- correctness table against the plaintext product.
local fh = require "fhelium"
local ffi = require "ffi"

pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } fh_example_timespec;
int clock_gettime(int clk, fh_example_timespec *ts);
]])
local tspec = ffi.new("fh_example_timespec")
local function now()
  ffi.C.clock_gettime(1, tspec)
  return tonumber(tspec.tv_sec) + tonumber(tspec.tv_nsec) * 1e-9
end

-- ---- options -----------------------------------------------------------------
local opts = { size = 8, device = "cpu", seed = 1, preset = fh.Preset.slots8192_scale40_levels7_int64 }
do
  local i = 1
  while arg and i <= #arg do
    local k, v = arg[i]:match("^%-%-(%w+)$"), arg[i + 1]
    if k == nil or opts[k] == nil or v == nil then
      io.stderr:write("usage: matrix_vector.lua [--size N] [--device cpu|cuda] [--seed S] [--preset NAME]\n")
      os.exit(2)
    end
    opts[k] = (k == "device" or k == "preset") and v or tonumber(v)
    i = i + 2
  end
end
local size = opts.size
assert(size and size >= 1 and size == math.floor(size), "--size must be a positive integer")

-- ---- setup: engine, keys, matrix ------------------------------------------------
local engine = fh.CkksEngine(opts.preset, { device = opts.device, seed = opts.seed })
local slots = engine.context.num_slots
assert(2 * size <= slots, ("--size %d needs %d slots, the preset has %d"):format(size, 2 * size, slots))
local sk = engine:create_secret_key()
local pk = engine:create_public_key(sk)
for i = 1, size - 1 do engine:create_rotation_key(sk, -i) end

local gen = fh.Generator(opts.seed)
local function uniform(n) -- n values in [-1, 1)
  return (fh.rand({ n }, { generator = gen, dtype = "float64" }) * 2 - 1):tolist()
end
local M = {}
for j = 1, size do M[j] = uniform(size) end

-- diagonal i (0-based) as a prepared plaintext: first `size` slots, rest zero
local diagonals = {}
for i = 0, size - 1 do
  local d = {}
  for j = 0, size - 1 do d[j + 1] = M[j + 1][(j + i) % size + 1] end
  diagonals[i] = engine:prepare_plaintext_for_multiplication(engine:encode(d))
end

-- ---- the program: one dynamic input, everything else bound by closure ----------
local function program(ct_v)
  local acc
  for i = 0, size - 1 do
    local rotated = i == 0 and ct_v or engine:rotate_by_step(ct_v, -i)
    local term = engine:multiply_plaintext(rotated, diagonals[i])
    acc = acc and engine:add(acc, term) or term
  end
  return engine:rescale_to_next_level(acc)
end

-- ---- inputs and the reference --------------------------------------------------------
local function encrypt_vector(v)
  local slots_v = {}
  for j = 1, size do
    slots_v[j] = v[j]
    slots_v[size + j] = v[j]
  end
  return engine:coefficient_domain_to_ntt_domain(engine:encrypt_message(slots_v, pk))
end

local function reference(v)
  local y = {}
  for j = 1, size do
    local s = 0
    for k = 1, size do s = s + M[j][k] * v[k] end
    y[j] = s
  end
  return y
end

-- ---- eager runs -----------------------------------------------------------------------
local TOL = 1e-5
print(("CKKS matrix-vector product by cyclic diagonals: size %d, %s, device %s, dnum %d"):format(size,
  engine.context.preset or "custom context", engine.device, engine.dnum))
print(("%-6s %-12s %-14s %-12s %s"):format("input", "max |y|", "max abs error", "eager ms", "status"))
local worst = 0
for run = 1, 3 do
  local v = uniform(size)
  local ct_v = encrypt_vector(v)
  local t0 = now()
  local ct_y = program(ct_v)
  local ms = (now() - t0) * 1e3
  local got = engine:decrypt_message(ct_y, sk, { is_real = true }):tolist()
  local want = reference(v)
  local err, mag = 0, 0
  for j = 1, size do
    err = math.max(err, math.abs(got[j] - want[j]))
    mag = math.max(mag, math.abs(want[j]))
  end
  worst = math.max(worst, err)
  print(("%-6d %-12.6f %-14.3e %-12.2f %s"):format(run, mag, err, ms, err < TOL and "ok" or "FAILED"))
end
print(("worst error %.3e (tolerance %.0e): %s"):format(worst, TOL, worst < TOL and "PASS" or "FAIL"))
if worst >= TOL then os.exit(1) end
