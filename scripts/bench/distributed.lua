-- scripts/bench/distributed.lua: fh.distributed against plain C, in one run.
-- It starts its own jobs (scripts/launch), so run it as one process:
--   scripts/run scripts/bench/distributed.lua [--ranks N] [--iters I] [--size S] [--device cpu|cuda]
-- Default: --device cuda when this build has NCCL and a GPU is usable (ranks:
-- min(2, GPUs) for the all-reduce), else CPU ranks (2); --iters 20.
--
--   all-reduce   64 MiB of uint64 limbs ([8, 2^20]), out of place: a loop of
--                fh.distributed.all_reduce (the plain uint64 sum; and the
--                modular sum with the preset's 8 Q primes, reported) against
--                fhelium_bench_dist_baseline (scripts/bench/dist_baseline.c:
--                a C loop over ncclAllReduce, or MPI_Allreduce on CPU ranks)
--                in the same run, same ranks and bytes. Bus bandwidth as
--                NCCL's tests define it: bytes / time * 2 (n - 1) / n (the
--                algorithm bandwidth, bytes / time, with one rank). Median of
--                5 rounds of `iters` calls then a synchronize, the slowest
--                rank's time. Target (GPU ranks): fhelium / NCCL >= 0.95 for
--                the plain sum; the modular sum adds one pass over the result
--                (the reduction mod q) and is reported with its ratio.
--   scaling      examples/distributed_matrix_vector.lua on 1, 2 and 4 ranks
--                (as many as there are GPUs), size 256 on GPUs: the step time
--                (slowest rank's replay + all-reduce, best of the runs) of
--                the 1-rank job divided by the n-rank job's. Targets (GPU):
--                >= 1.7x on 2, >= 3x on 4. On CPU ranks (no GPU) the same with
--                size 16 on 1 and 2 ranks, reported.
local fh = require "fhelium"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")

local BYTES = 64 * 1024 * 1024

-- ---- the ranks' side (under scripts/launch): --worker allreduce ITERS ---------------------
if arg[1] == "--worker" then
  local dist = fh.distributed.init()
  local iters = tonumber(arg[3])
  local ctx = fh.CkksContext(fh.Preset.slots8192_scale40_levels7_int64)
  local q = {}
  for i = 1, 8 do q[i] = ctx.q_primes[i] end
  -- residues below the smallest of the primes, [8, 2^20] = 64 MiB
  local n = BYTES / 8 / 8
  local x = (fh.rand({ 8, n }, { generator = fh.Generator(dist.rank + 1), dtype = "float64" }) * 2 ^ 39):to("uint64")
  if dist.device ~= "cpu" then x = x:to(dist.device) end
  local sync = dist.device ~= "cpu" and fh.cuda.synchronize or function() end
  local function time(opts)
    local rounds = {}
    for r = -1, 5 do
      sync()
      dist.barrier()
      local t0 = lib.now_us()
      for _ = 1, iters do dist.all_reduce(x, opts) end
      sync()
      local us = (lib.now_us() - t0) / iters
      if r >= 1 then rounds[#rounds + 1] = us end
    end
    -- the slowest rank's rounds
    local all = dist.all_gather(fh.tensor(rounds, { dtype = "float64" }))
    local worst = {}
    for i = 1, #rounds do
      worst[i] = 0
      for r = 1, #all do worst[i] = math.max(worst[i], all[r]:tolist()[i]) end
    end
    return lib.median(worst)
  end
  local sum_us = time(nil)
  local mod_us = time({ moduli = q })
  if dist.rank == 0 then
    print(("sum_us %.3f"):format(sum_us))
    print(("modsum_us %.3f"):format(mod_us))
  end
  return
end

-- ---- the driver ------------------------------------------------------------------------------
local opts = { iters = 20 }
do
  local known = { ranks = true, iters = true, size = true, device = true }
  local i = 1
  while i <= #arg do
    local k, v = arg[i]:match("^%-%-(%w+)$"), arg[i + 1]
    if not known[k] or v == nil or (k ~= "device" and not tonumber(v)) then
      io.stderr:write("usage: distributed.lua [--ranks N] [--iters I] [--size S] [--device cpu|cuda]\n")
      os.exit(2)
    end
    opts[k] = k == "device" and v or tonumber(v)
    i = i + 2
  end
end
local info = fh.distributed.info()
if not info.built_with_mpi then
  io.stderr:write("bench: this build has no MPI (libopenmpi-dev)\n")
  os.exit(1)
end
local gpus = fh.cuda.device_count()
local device = opts.device or ((info.built_with_nccl and gpus > 0) and "cuda" or "cpu")
local ranks = opts.ranks or (device == "cuda" and math.min(2, gpus) or 2)
local root = (arg[0]:match("^(.*)/scripts/bench/") or ".")
local launch = root .. "/scripts/launch"
local build = os.getenv("FHELIUM_BUILD") or "build"
if build:sub(1, 1) ~= "/" then build = root .. "/" .. build end

local function run(cmd)
  local out = {}
  local p = assert(io.popen(cmd .. " 2>&1"))
  local text = p:read("*a")
  local ok = p:close()
  for k, v in text:gmatch("(%S+) ([%d.]+)\n") do out[k] = tonumber(v) end
  return out, text, ok
end

local rows = {}
local function row(name, value, base, ratio, target, ok)
  rows[#rows + 1] = { name, value, base, ratio, target or "reported", ok }
end

local function busbw(us, n)
  local alg = BYTES / (us * 1e-6) / 1e9
  return n > 1 and alg * 2 * (n - 1) / n or alg
end

-- 1. all-reduce
local base, btext = run(("%s -n %d --device %s --exec %s/fhelium_bench_dist_baseline -- %s %d %d"):format(launch,
  ranks, device, build, device, BYTES, opts.iters))
local mine, mtext = run(("%s -n %d --device %s %s --worker allreduce %d"):format(launch, ranks, device, arg[0],
  opts.iters))
if not base.baseline_us or not mine.sum_us then
  io.stderr:write("bench: a job failed:\n", btext, mtext)
  os.exit(1)
end
local unit = ranks > 1 and "bus GB/s" or "alg GB/s"
local b_bw = busbw(base.baseline_us, ranks)
local s_bw, m_bw = busbw(mine.sum_us, ranks), busbw(mine.modsum_us, ranks)
local what = device == "cuda" and "ncclAllReduce" or "MPI_Allreduce"
row(("all_reduce 64 MiB uint64 sum, %d %s ranks (%.0f us)"):format(ranks, device, mine.sum_us),
  ("%.1f %s"):format(s_bw, unit), ("%.1f (%s, %.0f us)"):format(b_bw, what, base.baseline_us), s_bw / b_bw,
  device == "cuda" and ">= 0.95" or nil, device == "cuda" and s_bw / b_bw >= 0.95 or nil)
row(("all_reduce 64 MiB uint64 modular sum (8 primes), %d %s ranks (%.0f us)"):format(ranks, device, mine.modsum_us),
  ("%.1f %s"):format(m_bw, unit), ("%.1f (%s)"):format(b_bw, what), m_bw / b_bw)

-- 2. strong scaling of the example
local size = opts.size or (device == "cuda" and 256 or 16)
local counts = device == "cuda" and { 1, 2, 4 } or { 1, 2 }
local step = {}
for _, n in ipairs(counts) do
  if device == "cpu" or n <= gpus then
    local _, text, ok = run(("%s -n %d --device %s %s/examples/distributed_matrix_vector.lua --size %d --runs 3"):format(
      launch, n, device, root, size))
    local ms = text:match("scaling: one rank [%d.]+ ms, %d+ ranks? ([%d.]+) ms")
    if not ok or not ms then
      io.stderr:write(("bench: the example failed on %d ranks:\n%s"):format(n, text))
      os.exit(1)
    end
    step[n] = tonumber(ms)
    if n > 1 then
      local target = device == "cuda" and (n == 2 and 1.7 or 3) or nil
      local sp = step[1] / step[n]
      row(("matrix_vector size %d, %d %s ranks: step"):format(size, n, device), ("%.2f ms"):format(step[n]),
        ("%.2f ms (1 rank)"):format(step[1]), sp, target and (">= " .. target .. "x") or nil, target and sp >= target or nil)
    else
      row(("matrix_vector size %d, 1 %s rank: step"):format(size, device), ("%.2f ms"):format(step[1]), "", 0 / 0)
    end
  end
end

print(("fh.distributed benchmark: %s, %d GPU(s) here, %s%s"):format(device == "cuda" and "GPU ranks (NCCL)" or
  "CPU ranks (MPI)", gpus, info.mpi_version, info.nccl_version ~= "" and (", " .. info.nccl_version) or ""))
print(("| %-62s | %-22s | %-30s | %-6s | %-8s |"):format("measure", "fhelium", "baseline", "ratio", "target"))
print(("|%s|%s|%s|%s|%s|"):format(("-"):rep(64), ("-"):rep(24), ("-"):rep(32), ("-"):rep(8), ("-"):rep(10)))
local failed = false
for _, r in ipairs(rows) do
  local ratio = r[4] == r[4] and ("%.2f"):format(r[4]) or ""
  local target = r[5] .. (r[6] == nil and "" or (r[6] and " ok" or " MISSED"))
  if r[6] == false then failed = true end
  print(("| %-62s | %-22s | %-30s | %-6s | %-8s |"):format(r[1], r[2], r[3], ratio, target))
end
if device == "cpu" then
  print("(CPU ranks: no GPU here, so the GPU rows and their targets were not measured)")
end
os.exit(failed and 1 or 0)
