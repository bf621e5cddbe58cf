-- scripts/bench/bench.lua: fhelium's CUDA runtime against plain CUDA C, in one
-- run, printing ratios. Run on a GPU machine after building:
--   source scripts/env.sh && luajit scripts/bench/bench.lua [path/to/fhelium_bench_baseline]
-- (FHELIUM_BUILD names the build folder; the baseline defaults to
-- $FHELIUM_BUILD/fhelium_bench_baseline). See scripts/bench/README.md.
local fh = require "fhelium"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
local now_us, median = lib.now_us, lib.median

lib.require_cuda(fh)

local baseline_bin = lib.baseline_path("fhelium_bench_baseline")
local results, base = {}, {}
local function run_baseline(args) return lib.run_baseline(baseline_bin, args) end

local sync = fh.cuda.synchronize

-- ---- eager dispatch: 100 adds of 4096 float32 into a preallocated out ----------
-- Host timings on a shared machine drift, so the C baseline and the Lua loop
-- run in alternating rounds and each side reports the median of its rounds.
local K, REPS, ROUNDS = 100, 200, 3
local a = fh.rand({ 4096 }, { device = "cuda" })
local b = fh.rand({ 4096 }, { device = "cuda" })
local out = fh.empty({ 4096 }, { device = "cuda" })
local add = fh.add

local function lua_round()
  local opts = { out = out }
  local tot, enq = {}, {}
  for r = -20, REPS do
    sync()
    local t0 = now_us()
    for _ = 1, K do add(a, b, opts) end
    local t1 = now_us()
    sync()
    local t2 = now_us()
    if r >= 1 then
      tot[r], enq[r] = t2 - t0, t1 - t0
    end
  end
  return median(tot), median(enq)
end

do
  local ctot, cenq, craw, cbnd, ceng, ltot, lenq = {}, {}, {}, {}, {}, {}, {}
  for i = 1, ROUNDS do
    local b0 = run_baseline("eager")
    ctot[i], cenq[i], craw[i], cbnd[i], ceng[i] = b0.eager_c_us, b0.eager_c_enqueue_us, b0.eager_raw_us,
      b0.eager_boundary_us, b0.eager_engine_us
    ltot[i], lenq[i] = lua_round()
  end
  base.eager_c_us, base.eager_c_enqueue_us, base.eager_raw_us = median(ctot), median(cenq), median(craw)
  base.eager_boundary_us, base.eager_engine_us = median(cbnd), median(ceng)
  results.eager_lua_us, results.eager_lua_enqueue_us = median(ltot), median(lenq)
  results.eager_rounds = {}
  for i = 1, ROUNDS do results.eager_rounds[i] = ("%.2f"):format(ltot[i] / ctot[i]) end
  -- the same loop with fh.trace on (off, each launch pays one branch: the rows above)
  fh.trace.start()
  results.eager_traced_us = lua_round()
  fh.trace.stop()
  assert(fh.allclose(out, a + b), "the benchmark's adds computed a wrong result")
  local inplace = {}
  for r = -20, REPS do
    sync()
    local t0 = now_us()
    for _ = 1, K do out:add_(b) end
    sync()
    if r >= 1 then inplace[r] = now_us() - t0 end
  end
  results.eager_inplace_us = median(inplace)
  local ca, cb, cc = fh.ones({ 2 }), fh.ones({ 2 }), fh.empty({ 2 })
  local copts, cpu = { out = cc }, {}
  for r = -20, REPS do
    local t0 = now_us()
    for _ = 1, K do add(ca, cb, copts) end
    if r >= 1 then cpu[r] = now_us() - t0 end
  end
  results.eager_cpu_us = median(cpu)
end
for k, v in pairs(run_baseline()) do
  if not k:match("^eager") then base[k] = v end
end

-- ---- copies of 256 MiB ------------------------------------------------------------
local N = 2 ^ 26 -- float32 elements: 256 MiB
local bytes = N * 4
local function time_copy(dst, src, reps)
  local t = {}
  for r = -2, reps do
    sync()
    local t0 = now_us()
    dst:copy_(src, { non_blocking = true })
    sync()
    if r >= 1 then t[r] = now_us() - t0 end
  end
  return bytes / median(t) / 1e3 -- GB/s
end
do
  local d = fh.empty({ N }, { device = "cuda" })
  local pinned = fh.full({ N }, 1.5, { pin_memory = true })
  local pageable = fh.full({ N }, 2.5)
  results.h2d_pinned_gbs = time_copy(d, pinned, 9)
  results.d2h_pinned_gbs = time_copy(pinned, d, 9)
  results.h2d_pageable_gbs = time_copy(d, pageable, 9)
  assert(fh.equal(d, pageable), "the staged copy is wrong")
  results.d2h_pageable_gbs = time_copy(pageable, d, 9)
  local d2 = fh.empty({ N }, { device = "cuda" })
  results.d2d_gbs = time_copy(d2, d, 9)
end

-- ---- modular multiply over 2^21 uint64 --------------------------------------------
-- GPU time by events, with the launches queued behind a spin kernel so the
-- device runs them back to back; bytes counted read + written.
do
  local L, n = 8, 2 ^ 18
  local q = { 4611686018427387847ULL, 4611686018427387817ULL, 4611686018427387761ULL, 4611686018427387733ULL,
    4611686018427387709ULL, 4611686018427387631ULL, 4611686018427387613ULL, 4611686018427387607ULL }
  local moduli = fh.tensor(q, { dtype = "uint64" })
  local g = fh.Generator(1)
  local a = (fh.rand({ L, n }, { dtype = "float64", generator = g }) * 2 ^ 52):to("uint64"):cuda()
  local b = (fh.rand({ L, n }, { dtype = "float64", generator = g }) * 2 ^ 52):to("uint64"):cuda()
  local c = fh.empty({ L, n }, { dtype = "uint64", device = "cuda" })
  local opts = { out = c }
  local function gpu_ms(f, reps)
    local e0, e1 = fh.cuda.Event { timing = true }, fh.cuda.Event { timing = true }
    f()
    sync()
    fh.cuda._spin(20)
    e0:record()
    for _ = 1, reps do f() end
    e1:record()
    return e0:elapsed_ms(e1) / reps
  end
  local REPS = 50
  local elems = L * n
  local ms_mul = gpu_ms(function() fh.rns.mul(a, b, moduli, opts) end, REPS)
  local ms_add = gpu_ms(function() fh.rns.add(a, b, moduli, opts) end, REPS)
  local src = fh.empty({ elems }, { dtype = "uint64", device = "cuda" })
  local dst = fh.empty({ elems }, { dtype = "uint64", device = "cuda" })
  local ms_copy = gpu_ms(function() dst:copy_(src, { non_blocking = true }) end, REPS)
  results.modmul_us = ms_mul * 1e3
  results.modadd_us = ms_add * 1e3
  results.d2d_16mib_us = ms_copy * 1e3
  results.modmul_gbs = 3 * 8 * elems / (ms_mul * 1e-3) / 1e9
  results.modadd_gbs = 3 * 8 * elems / (ms_add * 1e-3) / 1e9
  results.d2d_16mib_gbs = 2 * 8 * elems / (ms_copy * 1e-3) / 1e9
end

-- ---- report ------------------------------------------------------------------------------
local props = fh.cuda.get_device_properties(0)
print(("fhelium CUDA benchmarks on %s (%d SMs)"):format(props.name, props.multi_processor_count))
print(("%-44s %12s %12s %9s  %s"):format("measure", "fhelium", "baseline", "ratio", "target"))
local function row(name, ours, theirs, unit, target, ratio_of)
  local ratio = ratio_of and ratio_of(ours, theirs) or (theirs and ours / theirs)
  print(("%-44s %9.2f %-2s %9s %-2s %9s  %s"):format(name, ours, unit, theirs and ("%.2f"):format(theirs) or "-",
    theirs and unit or "", ratio and ("%.3f"):format(ratio) or "-", target or ""))
end
row("eager: 100 adds + sync (per loop)", results.eager_lua_us, base.eager_c_us, "us", "Lua/C <= 1.3")
row("eager: enqueue 100 adds (host only)", results.eager_lua_enqueue_us, base.eager_c_enqueue_us, "us", "(info)")
row("eager: 100 adds + sync with fh.trace on", results.eager_traced_us, results.eager_lua_us, "us",
  "(cost of tracing; vs off)")
row("eager: raw <<<>>> loop, for reference", base.eager_raw_us, nil, "us")
row("eager: C loop through the launch boundary", base.eager_boundary_us, base.eager_c_us, "us", "(breakdown)")
row("eager: C loop of fh_binary (engine, no Lua)", base.eager_engine_us, base.eager_c_us, "us", "(breakdown)")
row("eager: Lua loop of t:add_(b) (no options)", results.eager_inplace_us, base.eager_c_us, "us", "(breakdown)")
row("eager: Lua fh.add out= on 2-element CPU tensors", results.eager_cpu_us, nil, "us", "(host cost only)")
row("copy 256 MiB H2D pinned", results.h2d_pinned_gbs, base.h2d_pinned_gbs, "GB/s", ">= 0.95")
row("copy 256 MiB D2H pinned", results.d2h_pinned_gbs, base.d2h_pinned_gbs, "GB/s", ">= 0.95")
row("copy 256 MiB H2D pageable (staged)", results.h2d_pageable_gbs, base.h2d_pageable_gbs, "GB/s", ">= 2")
row("copy 256 MiB D2H pageable (staged)", results.d2h_pageable_gbs, base.d2h_pageable_gbs, "GB/s", "(info)")
row("copy 256 MiB D2D", results.d2d_gbs, base.d2d_gbs, "GB/s", "(info)")
row("rns.mul 2^21 uint64 vs 16 MiB D2D copy (r+w)", results.modmul_gbs, results.d2d_16mib_gbs, "GB/s", "(report)")
row("rns.mul 2^21 uint64 vs 256 MiB D2D copy (r+w)", results.modmul_gbs, 2 * results.d2d_gbs, "GB/s", "(report)")
row("rns.add 2^21 uint64 vs 16 MiB D2D copy (r+w)", results.modadd_gbs, results.d2d_16mib_gbs, "GB/s", "(info)")
print(("eager Lua/C ratio per round: %s"):format(table.concat(results.eager_rounds, ", ")))
print(("rns.mul 2^21 uint64: %.2f us per launch; rns.add %.2f us; 16 MiB D2D copy %.2f us"):format(
  results.modmul_us, results.modadd_us, results.d2d_16mib_us))
