-- The encrypted matrix-vector product of examples/matrix_vector.lua, on many
-- ranks: the matrix's diagonals are split across the ranks.
--
--   scripts/launch -n 2 --device cpu examples/distributed_matrix_vector.lua [--size 8]
--   scripts/launch examples/distributed_matrix_vector.lua --device cuda --size 256   (one rank per GPU)
--   options: --size N (8), --device auto|cpu|cuda (auto), --seed S (1), --runs R (3),
--            --preset NAME (slots8192-scale40-levels7-int64)
--
-- y = M v for a public size x size matrix M and an encrypted vector v, by
-- cyclic diagonals: y = sum_i d_i * rot(v, i). Rank r of W owns a contiguous
-- block of the diagonals. Rank 0 makes the keys and sends every rank the
-- rotation keys of its block (as value files: fh.distributed.send / recv
-- without a template); every rank builds the public matrix from the seed.
-- Per run, rank 0 encrypts a new vector and broadcasts the ciphertext; every
-- rank replays its captured program (HostGraphProgram on CPU ranks,
-- CudaGraphProgram on GPU ranks), the partial sum of its diagonals' products
-- (no rescale); one modular all-reduce of the ciphertext adds the partial
-- sums (homomorphic addition, exact); every rank rescales, and rank 0
-- decrypts and checks:
--   - the error against the plaintext product, within the bound of
--     examples/matrix_vector.lua (docs/ckks.md, "Noise and tolerances");
--   - that the result is bit-identical to the one-rank program (the whole sum
--     on rank 0, eagerly): the residues add exactly, in any order.
-- It prints every rank's replay and all-reduce times, and the scaling: the
-- one-rank program (captured and replayed on rank 0 alone) against the
-- distributed step (the slowest rank's replay plus the all-reduce). The exit
-- status is 1 when a check fails (rank 0), 0 otherwise. `--inject-error E`
-- (for the specs) adds E to the expected y[1].
local fh = require "fhelium"
local ffi = require "ffi"
local ex = fh.execution

pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } fh_example_timespec;
int clock_gettime(int clk, fh_example_timespec *ts);
]])
local tspec = ffi.new("fh_example_timespec")
local function now()
  ffi.C.clock_gettime(1, tspec)
  return tonumber(tspec.tv_sec) + tonumber(tspec.tv_nsec) * 1e-9
end

-- ---- options -----------------------------------------------------------------------
local opts = { size = 8, device = "auto", seed = 1, runs = 3, preset = fh.Preset.slots8192_scale40_levels7_int64,
  inject_error = 0 }
do
  local i = 1
  while arg and i <= #arg do
    local k, v = arg[i]:match("^%-%-([%w%-]+)$"), arg[i + 1]
    k = k and k:gsub("%-", "_")
    if k == nil or opts[k] == nil or v == nil or (k ~= "device" and k ~= "preset" and tonumber(v) == nil) then
      io.stderr:write("usage: distributed_matrix_vector.lua [--size N] [--device auto|cpu|cuda] [--seed S] [--runs R] "
        .. "[--preset NAME]\n")
      os.exit(2)
    end
    opts[k] = (k == "device" or k == "preset") and v or tonumber(v)
    i = i + 2
  end
end
local size = opts.size
assert(size >= 1 and size == math.floor(size), "--size must be a positive integer")

local dist = fh.distributed.init { device = opts.device }
local R, W = dist.rank, dist.world_size
if size < W then
  error(("--size %d: every one of the %d ranks needs at least one diagonal"):format(size, W))
end
local function say(...) if R == 0 then print(string.format(...)) io.stdout:flush() end end

-- ---- setup: engine and public matrix on every rank, keys from rank 0 ---------------------
local engine = fh.CkksEngine(opts.preset, { device = dist.device, seed = opts.seed })
local function sync() if dist.device ~= "cpu" then fh.cuda.synchronize() end end
local slots = engine.context.num_slots
assert(2 * size <= slots, ("--size %d needs %d slots, the preset has %d"):format(size, 2 * size, slots))

-- rank r's block of diagonals: first .. last (0-based, contiguous, balanced)
local function block(r) return math.floor(r * size / W), math.floor((r + 1) * size / W) - 1 end
local first, last = block(R)

local sk, pk, rks
local t_keys = now()
if R == 0 then
  sk = engine:create_secret_key()
  pk = engine:create_public_key(sk)
  rks = {}
  for i = 1, size - 1 do rks[i] = engine:create_rotation_key(sk, -i) end
end
pk = dist.broadcast(pk, 0) -- the value-file path: only rank 0 has it
if R == 0 then
  for r = 1, W - 1 do
    local a, b, mine = block(r)
    mine = {}
    for i = math.max(a, 1), b do mine[#mine + 1] = rks[i] end
    dist.send(mine, r)
  end
else
  rks = {}
  for k, key in ipairs(dist.recv(nil, 0)) do rks[math.max(first, 1) + k - 1] = key end
end
t_keys = now() - t_keys

-- the matrix, vectors, encryption, reference and error bound of the main job
-- (examples/matvec.lua; docs/ckks.md, "Noise and tolerances")
local matvec = dofile((arg and arg[0] and arg[0]:match("^(.*)/") or ".") .. "/matvec.lua")
local gen = fh.Generator(opts.seed)
local function uniform(n) return matvec.uniform(gen, n) end
local M = matvec.matrix(gen, size)
local function diagonal(i) -- prepared plaintext of diagonal i (0-based)
  local d = {}
  for j = 0, size - 1 do d[j + 1] = M[j + 1][(j + i) % size + 1] end
  return engine:prepare_plaintext_for_multiplication(engine:encode(d))
end
local diagonals = {}
for i = first, last do diagonals[i] = diagonal(i) end

-- the partial sum of diagonals a..b (no rescale: the rescale follows the sum)
local function partial(a, b, ct_v)
  local acc
  for i = a, b do
    local rotated = i == 0 and ct_v or engine:rotate_by_step(ct_v, -i, rks[i])
    local term = engine:multiply_plaintext(rotated, diagonals[i])
    acc = acc and engine:add(acc, term) or term
  end
  return acc
end

local function encrypt_vector(v) return matvec.encrypt_vector(engine, pk, v, size) end

-- ---- capture: the rank's partial sum ----------------------------------------------------------
local Program = dist.device == "cpu" and ex.HostGraphProgram or ex.CudaGraphProgram
local template = encrypt_vector(uniform(size)) -- a ciphertext of the vector's signature on every rank
local prog = Program.capture(function(ct_v) return partial(first, last, ct_v) end,
  { example_inputs = { template }, warmup = 1 })

-- rank 0 alone: the one-rank program (every diagonal), for the check and the scaling
local full_prog
if R == 0 then
  for i = 0, size - 1 do diagonals[i] = diagonals[i] or diagonal(i) end
  full_prog = Program.capture(function(ct_v) return partial(0, size - 1, ct_v) end,
    { example_inputs = { template }, warmup = 1 })
end

say("distributed CKKS matrix-vector product by cyclic diagonals: size %d, %d rank%s, device %s, %s, %s", size, W,
  W == 1 and "" or "s", dist.device == "cpu" and "cpu" or "cuda (one GPU per rank)", engine.context.preset or "custom",
  Program == ex.HostGraphProgram and "HostGraphProgram" or "CudaGraphProgram")
say("keys: rank 0 made them and sent every rank its block's rotation keys (%.1f ms)", t_keys * 1e3)

local BOUND = matvec.error_bound(engine.context, size)

-- ---- runs ---------------------------------------------------------------------------------------------
local ok_all, worst = true, 0
local times = {} -- per run: {replay, all_reduce} of every rank
for run = 1, opts.runs do
  local v = uniform(size) -- every rank draws the same vectors (the generator is shared by seed)
  local ct_v = dist.broadcast(R == 0 and encrypt_vector(v) or template, 0)
  dist.barrier()
  local t0 = now()
  local mine = prog:replay({ ct_v }, { synchronize = true })
  local t1 = now()
  local total = dist.all_reduce(mine)
  sync()
  local t2 = now()
  local y = engine:rescale_to_next_level(total)
  local t = dist.all_gather(fh.tensor({ t1 - t0, t2 - t1 }, { dtype = "float64" }))
  times[run] = t
  if R == 0 then
    local want = matvec.reference(M, v, size)
    want[1] = want[1] + opts.inject_error
    local got = engine:decrypt_message(y, sk, { is_real = true }):cpu():tolist()
    local err = 0
    for j = 1, size do err = math.max(err, math.abs(got[j] - want[j])) end
    local one = engine:rescale_to_next_level(partial(0, size - 1, ct_v)) -- the one-rank program, eagerly
    local same = fh.value_equal(one, y)
    worst = math.max(worst, err)
    local ok = err <= BOUND and same
    ok_all = ok_all and ok
    say("run %d: error %.3e (bound %.3e), bit-identical to the one-rank program: %s: %s", run, err, BOUND,
      same and "yes" or "NO", ok and "ok" or "FAILED")
  end
end

-- ---- times and scaling ----------------------------------------------------------------------------------
if R == 0 then
  local one_ms = math.huge
  for _ = 1, opts.runs do
    local t0 = now()
    full_prog:replay({ template }, { synchronize = true })
    one_ms = math.min(one_ms, (now() - t0) * 1e3)
  end
  print(("%-6s %-12s %-12s %-14s"):format("rank", "diagonals", "replay ms", "all_reduce ms"))
  local step_ms = math.huge
  for run = 1, opts.runs do
    local slowest = 0
    for r = 1, W do
      local rr = times[run][r]:tolist()
      slowest = math.max(slowest, (rr[1] + rr[2]) * 1e3)
    end
    step_ms = math.min(step_ms, slowest)
  end
  for r = 0, W - 1 do
    local best_rep, best_ar = math.huge, math.huge
    for run = 1, opts.runs do
      local rr = times[run][r + 1]:tolist()
      best_rep, best_ar = math.min(best_rep, rr[1] * 1e3), math.min(best_ar, rr[2] * 1e3)
    end
    local a, b = block(r)
    print(("%-6d %-12s %-12.2f %-14.2f"):format(r, ("%d..%d"):format(a, b), best_rep, best_ar))
  end
  print(("scaling: one rank %.2f ms, %d rank%s %.2f ms (slowest replay + all_reduce, best of %d): speedup %.2fx, "
    .. "efficiency %.0f%%"):format(one_ms, W, W == 1 and "" or "s", step_ms, opts.runs, one_ms / step_ms, 100 * one_ms / step_ms / W))
  print(("worst error %.3e (bound %.3e): %s"):format(worst, BOUND, ok_all and "PASS" or "FAIL"))
  io.stdout:flush()
  full_prog:close()
end
prog:close()
dist.barrier()
if not ok_all then os.exit(1, true) end
