-- Encrypted matrix-vector product by cyclic diagonals (FHElium's example 11).
--
--   scripts/run examples/matrix_vector.lua [--size 8] [--device auto] [--seed 1]
--                                          [--preset slots8192-scale40-levels7-int64]
--
-- y = M v for a public size x size matrix M and an encrypted vector v, by
-- cyclic diagonals (examples/matvec.lua builds the program: one linear
-- transform, the `size - 1` rotations and `size` plaintext products summed
-- with one mod-up and one mod-down that also rescales).
--
-- The computation is `program(ct_v)`: a function of its one dynamic input
-- (the encrypted vector) whose static state (engine, keys, diagonals) is
-- bound by closure, so the execution layer can capture it and replay it
-- with new inputs (HostGraphProgram on the CPU, CudaGraphProgram on a GPU).
-- --device auto (the default) takes cuda:0 when a CUDA device is usable, else
-- the CPU; --device cpu / cuda / cuda:N choose.
-- Here it is captured once, then run eagerly and replayed for three
-- different inputs, printing a correctness table against the plaintext
-- product and eager vs replay latency.
--
-- The tolerance is an error bound derived from the parameters (docs/ckks.md,
-- "Noise and tolerances"): 6 standard deviations of the decoded error of
-- this program, from the fresh encryption noise, the key switching of the
-- size - 1 rotations, the rounding of the size encoded diagonals and of the
-- rescale, given N, the scale and the primes. The exit status is 1 when any
-- result is outside it (or a replay differs from its eager run), 0 otherwise.
-- `--inject-error E` (for spec/examples_spec.lua) adds E to the expected
-- y[1], so that the check sees an error of E.
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
local opts = { size = 8, device = "auto", seed = 1, preset = fh.Preset.slots8192_scale40_levels7_int64,
  inject_error = 0 }
do
  local i = 1
  while arg and i <= #arg do
    local k, v = arg[i]:match("^%-%-([%w%-]+)$"), arg[i + 1]
    k = k and k:gsub("%-", "_")
    if k == nil or opts[k] == nil or v == nil or (k ~= "device" and k ~= "preset" and tonumber(v) == nil) then
      io.stderr:write("usage: matrix_vector.lua [--size N] [--device auto|cpu|cuda|cuda:N] [--seed S] [--preset NAME]\n")
      os.exit(2)
    end
    opts[k] = (k == "device" or k == "preset") and v or tonumber(v)
    i = i + 2
  end
end
local size = opts.size
assert(size and size >= 1 and size == math.floor(size), "--size must be a positive integer")

if opts.device == "auto" then opts.device = fh.cuda.is_available() and "cuda:0" or "cpu" end

-- ---- setup: engine, keys, matrix, the program (examples/matvec.lua) -------------
local matvec = dofile((arg and arg[0] and arg[0]:match("^(.*)/") or ".") .. "/matvec.lua")
local engine = fh.CkksEngine(opts.preset, { device = opts.device, seed = opts.seed })
local function sync() -- eager latency counts until the device has finished
  if engine.device ~= "cpu" then fh.cuda.synchronize() end
end
local slots = engine.context.num_slots
assert(2 * size <= slots, ("--size %d needs %d slots, the preset has %d"):format(size, 2 * size, slots))
local sk = engine:create_secret_key()
local pk = engine:create_public_key(sk)
matvec.create_keys(engine, sk, size)

local gen = fh.Generator(opts.seed)
local function uniform(n) return matvec.uniform(gen, n) end
local M = matvec.matrix(gen, size)

-- the program: one dynamic input (the encrypted vector), the diagonals (prepared
-- plaintexts) and the engine bound by closure
local program = matvec.program(engine, M, size)
local function encrypt_vector(v) return matvec.encrypt_vector(engine, pk, v, size) end
local function reference(v) return matvec.reference(M, v, size) end

-- ---- capture once, then eager vs replay for three changing inputs ------------------
-- HostGraphProgram records the evaluator's launches into a tape (nothing
-- runs during capture) and replays them over fixed buffers; with a CUDA
-- engine the same script uses CudaGraphProgram.
local ex = fh.execution
local Program = engine.device == "cpu" and ex.HostGraphProgram or ex.CudaGraphProgram
local prog = Program.capture(program, { example_inputs = { encrypt_vector(uniform(size)) }, warmup = 1 })
local st = prog.stats
print(("CKKS matrix-vector product by cyclic diagonals: size %d, %s, device %s, dnum %d"):format(size,
  engine.context.preset or "custom context", engine.device, engine.dnum))
print(("%s: %d launches captured in %.1f ms (warmup %.1f ms, first replay %.1f ms)"):format(
  engine.device == "cpu" and "HostGraphProgram" or "CudaGraphProgram", st.node_count, st.capture_seconds * 1e3,
  st.warmup_seconds * 1e3, st.first_replay_seconds * 1e3))

-- ---- the error bound (docs/ckks.md, "Noise and tolerances"; examples/matvec.lua) ----
local BOUND, SIGMA = matvec.error_bound(engine.context, size)
print(("error bound %.3e: 6 sigma of the decoded error (sigma %.3e) for N %d, scale 2^%g, %d rotation%s, %d product%s")
  :format(BOUND, SIGMA, engine.context.ring_degree, math.log(engine.context.default_scale) / math.log(2), size - 1,
    size == 2 and "" or "s", size, size == 1 and "" or "s"))
print(("%-6s %-10s %-14s %-14s %-10s %-10s %-9s %s"):format("input", "max |y|", "eager error", "replay error",
  "eager ms", "replay ms", "bitwise", "status"))
local worst, all_same = 0, true
local function max_error(ct, want) return matvec.max_error(engine, sk, ct, want, size) end
for run = 1, 3 do
  local v = uniform(size)
  local ct_v = encrypt_vector(v)
  local want = reference(v)
  want[1] = want[1] + opts.inject_error
  local mag = 0
  for j = 1, size do mag = math.max(mag, math.abs(want[j])) end
  local t0 = now()
  local eager = program(ct_v)
  sync()
  local eager_ms = (now() - t0) * 1e3
  t0 = now()
  local replayed = prog:replay({ ct_v }, { synchronize = true }) -- borrowed: overwritten by the next replay
  local replay_ms = (now() - t0) * 1e3
  local same = fh.equal(replayed.data, eager.data) -- the same launches on the same data
  local e_err, r_err = max_error(eager, want), max_error(replayed, want)
  worst = math.max(worst, e_err, r_err)
  all_same = all_same and same
  print(("%-6d %-10.6f %-14.3e %-14.3e %-10.2f %-10.2f %-9s %s"):format(run, mag, e_err, r_err, eager_ms, replay_ms,
    same and "equal" or "DIFFERENT", (e_err <= BOUND and r_err <= BOUND and same) and "ok" or "FAILED"))
end
prog:close()
local ok = worst <= BOUND and all_same
print(("worst error %.3e (bound %.3e), replay bit-identical to eager: %s: %s"):format(worst, BOUND,
  all_same and "yes" or "no", ok and "PASS" or "FAIL"))
-- exit 1 after closing the Lua state (true), so every engine object is
-- released as on a normal end
if not ok then
  io.stdout:flush()
  os.exit(1, true)
end
