-- scripts/bench/graph.lua: CudaGraphProgram replays against eager Lua and
-- against raw cudaGraphLaunch of the same kernels (fhelium_bench_exec_baseline,
-- built by CMake when CUDA is on), in one run, printing ratios. On a GPU
-- machine after building:
--   source scripts/env.sh && luajit scripts/bench/graph.lua [path/to/fhelium_bench_exec_baseline]
-- The work: a chain of K = 10, 100, 1000 adds over 4096 float32
-- (x = x + w, K times). Measures (medians, host wall clock, R back-to-back
-- calls then one synchronize, divided by R):
--   eager        the chain run eagerly from Lua (us per op)
--   prepared     prog:replay_prepared() (us per replay, and per kernel)
--   raw graph    cudaGraphLaunch of a graph of the same K kernels, captured
--                in C (us per replay), in the baseline process twice: in its
--                first, single-stream state, and after eager launches on two
--                streams (the state this process is in once a program has
--                warmed up on its side stream: on the H200 every graph
--                launched in that state, raw or fhelium's, pays ~175 ns more
--                between consecutive kernels; scripts/bench/README.md, "The
--                two-stream state"). Target for K = 100: prepared / raw in the
--                same (two-stream) state <= 1.05; the single-stream ratio is
--                reported beside it.
--   replay       prog:replay({x}) with a 4 KiB pinned input (a chain of 100
--                adds over 1024 float32) against replay_prepared() of the same
--                program; target: at most 5 us more per call
--   in-process  for K = 100: the baseline's raw graph run inside this process
--                (fh.cuda._raw_graph_bench, engine/exec/bench_aid.cu), in
--                the same device state as the program (reported)
--   capture      CudaGraphProgram.capture of the K = 1000 chain: capture +
--                instantiate (stats.capture_seconds) against stream capture +
--                cudaGraphInstantiate in C (reported)
local fh = require "fhelium"
local ex = require "fhelium.execution"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
local now_us, median = lib.now_us, lib.median

lib.require_cuda(fh)

-- Run on a non-blocking stream, as the C baseline does: graph launches on
-- the legacy default stream pay for its implicit synchronization.
fh.cuda.set_stream(fh.cuda.Stream())

local base = lib.run_baseline(lib.baseline_path("fhelium_bench_exec_baseline"))

local sync = fh.cuda.synchronize
local rows = {}
local function row(name, value, unit, baseline, ratio, target, ok)
  rows[#rows + 1] = { name, value, unit, baseline or 0 / 0, ratio or 0 / 0, target or "report", ok }
end

local function chain(K)
  return function(x, w)
    for _ = 1, K do x = x + w end
    return x
  end
end

-- time `reps` rounds of `calls` calls of f, one synchronize per round: us per call
local function time_calls(f, calls, rounds)
  local t = {}
  for r = -3, rounds do
    sync()
    local t0 = now_us()
    for _ = 1, calls do f() end
    sync()
    if r >= 1 then t[r] = (now_us() - t0) / calls end
  end
  return median(t)
end

for _, K in ipairs({ 10, 100, 1000 }) do
  local x = fh.rand({ 4096 }, { device = "cuda" })
  local w = fh.rand({ 4096 }, { device = "cuda" })
  local fn = chain(K)
  local reps = math.max(4, math.floor(2000 / K))
  local eager_us = time_calls(function() fn(x, w) end, reps, 9) / K
  local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { x, w } })
  assert(fh.allclose(prog.output, fn(x, w), { rtol = 1e-5, atol = 1e-5 }), "the replay differs from eager evaluation")
  local prep_us = time_calls(function() prog:replay_prepared() end, 200, 15)
  local raw, raw2 = base["graph_K" .. K .. "_us"], base["graph_K" .. K .. "_2stream_us"]
  row(("K=%4d eager Lua, per op"):format(K), eager_us, "us", raw / K, eager_us / (raw / K), "report", true)
  row(("K=%4d replay_prepared vs raw graph, same state"):format(K), prep_us, "us", raw2, prep_us / raw2,
    K == 100 and "<= 1.05" or "report", K ~= 100 or prep_us / raw2 <= 1.05)
  row(("K=%4d replay_prepared vs raw graph, single-stream process"):format(K), prep_us, "us", raw, prep_us / raw,
    "report", true)
  row(("K=%4d replay_prepared, per kernel (same state)"):format(K), prep_us / K, "us", raw2 / K, prep_us / raw2,
    "report", true)
  if K == 100 and base.graph_K100_scattered_us then
    row("K= 100 raw graph over 101 separate cudaMallocs, per replay", base.graph_K100_scattered_us, "us", raw,
      base.graph_K100_scattered_us / raw, "report", true)
  end
  if K == 100 then
    -- the baseline's own code run in this process (the same device state)
    local in_rand = fh.cuda._raw_graph_bench(100, true)
    row("K= 100 replay_prepared vs raw graph in this process", prep_us, "us", in_rand, prep_us / in_rand, "report",
      true)
  end
  if K == 1000 then
    local s = prog.stats
    local c_ms = base.capture_K1000_ms + base.instantiate_K1000_ms
    row("K=1000 capture + instantiate", s.capture_seconds * 1e3, "ms", c_ms, s.capture_seconds * 1e3 / c_ms, "report",
      true)
    row("K=1000 warmup (3 eager calls)", s.warmup_seconds * 1e3, "ms", nil, nil, "report", true)
    row("K=1000 first replay (synchronized)", s.first_replay_seconds * 1e3, "ms", nil, nil, "report", true)
    row(("K=1000 graph nodes %d, private pool %.1f MiB"):format(s.node_count, s.memory_reserved_bytes / 2 ^ 20), 0,
      "", nil, nil, "report", s.node_count == 1000)
  end
  prog:close()
end

-- replay() with a 4 KiB input against replay_prepared() -------------------------------
do
  local w = fh.rand({ 1024 }, { device = "cuda" })
  local fn = fh.partial(function(wt, x)
    for _ = 1, 100 do x = x + wt end
    return x
  end, w)
  local x = fh.rand({ 1024 }, { pin_memory = true })
  local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { x:cuda() } })
  local inputs = { x }
  local replay_us = time_calls(function() prog:replay(inputs) end, 200, 15)
  local prep_us = time_calls(function() prog:replay_prepared() end, 200, 15)
  assert(fh.allclose(prog:replay(inputs, { synchronize = true }), fn(x:cuda()), { rtol = 1e-5, atol = 1e-5 }))
  row("replay() with a 4 KiB input, per call", replay_us, "us", prep_us, replay_us / prep_us, "<= +5 us",
    replay_us - prep_us <= 5)
  -- the copy engine's way (what replay() did before small pinned inputs
  -- moved by a kernel): cudaMemcpyAsync on the replay stream, then the launch
  local cur = fh.cuda.current_stream()
  local ce_us = time_calls(function()
    prog:replay_prepared({ copy_handle = prog:copy_inputs_from(inputs, { stream = cur }) })
  end, 200, 15)
  row("copy_inputs_from (copy engine, same stream) + replay_prepared", ce_us, "us", prep_us, ce_us / prep_us, "report",
    true)
  -- host time only: enqueue cost of each path, GPU not waited for
  local h = {}
  for r = -3, 15 do
    sync()
    local t0 = now_us()
    for _ = 1, 20 do prog:replay(inputs) end
    local t1 = now_us()
    for _ = 1, 20 do prog:replay_prepared() end
    local t2 = now_us()
    if r >= 1 then h[r] = { (t1 - t0) / 20, (t2 - t1) / 20 } end
  end
  local hr, hp = {}, {}
  for i, v in ipairs(h) do hr[i], hp[i] = v[1], v[2] end
  row("host time per call: replay() 4 KiB vs replay_prepared()", median(hr), "us", median(hp), median(hr) / median(hp),
    "report", true)
  prog:close()
end

print()
print(("%-64s %12s %12s %8s %10s  %s"):format("measure", "fhelium", "baseline", "ratio", "target", "ok"))
for _, r in ipairs(rows) do
  print(("%-64s %9.3f %-2s %12.3f %8.3f %10s  %s"):format(r[1], r[2], r[3], r[4], r[5], r[6], r[7] and "yes" or "NO"))
end
