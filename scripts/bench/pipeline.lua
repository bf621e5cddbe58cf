-- scripts/bench/pipeline.lua: encrypted requests through fh.pipeline
-- (docs/pipeline.md). For each matrix size, M requests of the matrix-vector
-- program of examples/matrix_vector.lua (examples/matvec.lua) at N = 2^14,
-- encrypted ahead on the host and held in pinned memory:
--   serial      each request alone (push, then wait for its result);
--   per compute-stream count S (slots K = 2 S; --depth D for K = D S), in the same run:
--     copy in, compute, copy out   each stage alone over the M requests
--                                  (Pipeline:measure; compute with S streams);
--     bound                        max(copy in + copy out, compute);
--     pipelined                    the M requests pushed, then every result
--                                  waited for;
--   each configuration runs --passes rounds (default 3 on a GPU, 1 on the
--   cpu) of the stages alone and the pipelined pass (after an untimed pass,
--   a collection and 2 K untimed requests that bring the idle GPU back to
--   speed, as the stages alone follow their own work); the table has their
--   medians (bound from the stages' medians), and a line below it each
--   round's pipelined and bound times;
--   and prints requests/s, the host's time per push (pipe.stats.push_seconds:
--   a pipeline cannot go faster than the host pushes), pipelined / bound
--   (target <= 1.10), the speed-up
--   over serial and over one compute stream (target >= 2 with 4 streams at
--   size 8). Every result of the 1-stream run is decrypted and checked;
--   the other runs must give the same ciphertexts bit for bit.
-- Requests are encrypted at each of --levels: "r" is the level the program
-- needs (matvec.request_level: max_level - 1, three Q primes), 0 every Q
-- prime (8: 2.7 times the limbs to copy and 6 times the key bytes to read).
--
--   source scripts/env.sh && luajit scripts/bench/pipeline.lua [--device cuda|cpu] [--requests M]
--                                   [--sizes 8,64] [--streams 1,2,4] [--levels r,0] [--depth 2] [--passes 3]
-- Defaults: on a GPU M = 256, sizes 8 and 64, streams 1, 2 and 4, levels r
-- and 0; on the cpu (no overlap to find: every step runs on the host, in
-- order) M = 4, sizes 8 and 64, one stream, level r. Numbers:
-- scripts/bench/README.md.
local fh = require "fhelium"
local ex = fh.execution
local here = (arg[0]:match("^(.*)/") or ".")
local lib = dofile(here .. "/lib.lua")
local matvec = dofile(here .. "/../../examples/matvec.lua")
local now = lib.now
local median = lib.median

local function list(s)
  local r = {}
  for v in s:gmatch("[^,]+") do r[#r + 1] = assert(tonumber(v), "not a number: " .. v) end
  return r
end

local opts = { device = fh.cuda.is_available() and "cuda" or "cpu" }
do
  local i = 1
  while i <= #arg do
    local k, v = arg[i]:match("^%-%-(%w+)$"), arg[i + 1]
    if not k or not v or not ({ device = 1, requests = 1, sizes = 1, streams = 1, levels = 1, depth = 1, passes = 1 })[k] then
      io.stderr:write("usage: pipeline.lua [--device cuda|cpu] [--requests M] [--sizes 8,64] [--streams 1,2,4] "
        .. "[--levels r,0] [--depth 2] [--passes 3]\n")
      os.exit(2)
    end
    opts[k] = v
    i = i + 2
  end
end
local device = opts.device == "cuda" and "cuda:" .. fh.cuda.current_device() or opts.device
local on_gpu = device ~= "cpu"
if on_gpu then lib.require_cuda(fh) end
-- a positive integer option, or its default when not given; anything else exits with usage
local function count(name, what, default)
  local v = opts[name]
  if v == nil then return default end
  local n = tonumber(v)
  if n == nil or n < 1 or n ~= math.floor(n) then
    io.stderr:write(("pipeline.lua: --%s must be a positive integer (%s), not %s\n"):format(name, what, v))
    os.exit(2)
  end
  return n
end
local M = count("requests", "requests per run", on_gpu and 256 or 4)
local sizes = opts.sizes and list(opts.sizes) or { 8, 64 }
local streams = opts.streams and list(opts.streams) or (on_gpu and { 1, 2, 4 } or { 1 })
-- slots per compute stream (K = depth S): one in compute while the next is copied in
local depth = count("depth", "slots per compute stream", 2)
-- rounds of (stages alone, pipelined) per configuration; the figures are their medians
local passes = count("passes", "rounds per configuration", on_gpu and 3 or 1)

local PRESET = fh.Preset.slots8192_scale40_levels7_int64
local host = fh.CkksEngine(PRESET, { device = "cpu", seed = 11 })
local engine = on_gpu and fh.CkksEngine(PRESET, { device = device, seed = 12 }) or host
local sk = host:create_secret_key()
local pk = host:create_public_key(sk)
local maxsize = 0
for _, s in ipairs(sizes) do maxsize = math.max(maxsize, s) end
matvec.create_keys(engine, sk, maxsize)
local levels = {}
for v in (opts.levels or (on_gpu and "r,0" or "r")):gmatch("[^,]+") do
  local l = v == "r" and matvec.request_level(engine.context) or tonumber(v)
  if l == nil or l < 0 or l >= engine.context.max_level or l ~= math.floor(l) then
    io.stderr:write(("pipeline.lua: --levels takes r or integers 0..%d, not %s\n"):format(engine.context.max_level
      - 1, v))
    os.exit(2)
  end
  levels[#levels + 1] = l
end

local where = on_gpu and fh.cuda.get_device_properties(tonumber(device:match("%d+"))).name or "the cpu"
print(("fh.pipeline: %d encrypted matrix-vector requests per run, N = %d, on %s (%s)"):format(M,
  engine.context.ring_degree, device, where))
print(("%-5s %-5s %-7s %-5s %9s %9s %9s %9s %10s %9s %7s %8s %8s %8s  %s"):format("size", "level", "streams", "slots",
  "copy in", "compute", "copy out", "bound", "pipelined", "req/s", "push us", "vs bound", "x serial", "x 1 str",
  "<= 1.10x bound"))

local summary = {}
for _, level in ipairs(levels) do
for _, size in ipairs(sizes) do
  local gen = fh.Generator(size)
  local matrix = matvec.matrix(gen, size)
  local program = matvec.program(engine, matrix, size, { level = level })
  local vectors, requests = {}, {}
  for i = 1, M do
    vectors[i] = matvec.uniform(gen, size)
    local ct = matvec.encrypt_vector(host, pk, vectors[i], size, level)
    requests[i] = on_gpu and ex.pin_value_tree({ ct }) or { ct }
  end
  -- serial: one slot's worth of work at a time
  local pipe = fh.pipeline(program, { example_inputs = requests[1], slots = 2, device = device, warmup = 1 })
  -- warm: an untimed pass (the pinned memory of the results), then collect
  for i = 1, M do pipe:push(requests[i]):result() end
  collectgarbage("collect")
  local t0 = now()
  for i = 1, M do pipe:push(requests[i]):result() end
  local serial = now() - t0
  pipe:close()
  local first, one_stream
  for _, S in ipairs(streams) do
    local K = depth * S
    pipe = fh.pipeline(program, { example_inputs = requests[1], slots = K, compute_streams = S, device = device,
      warmup = 1 })
    -- --passes P rounds, each: the stages alone (Pipeline:measure), an untimed pass
    -- (the pinned host memory of M results, dropped and collected: the steady
    -- state), then the timed pass; the figures are the medians of the rounds
    local ms, times, pushes = {}, {}, {}
    for pass = 1, passes do
      local mp = pipe:measure(requests)
      local warm = {}
      for i = 1, M do warm[i] = pipe:push(requests[i]) end
      for i = 1, M do warm[i]:wait() end
      warm = nil
      collectgarbage("collect")
      -- the collection leaves the GPU idle, and a pass after an idle GPU measured
      -- 0.2-0.6 ms slower (scripts/bench/README.md, eleventh session): 2 K requests,
      -- untimed, right before the timed pass, as the stages alone follow their own work
      if on_gpu then
        local ramp = {}
        for i = 1, math.min(M, 2 * K) do ramp[i] = pipe:push(requests[i]) end
        ramp[#ramp]:wait()
      end
      t0 = now()
      local pushed0 = pipe.stats.push_seconds
      local pending = {}
      for i = 1, M do pending[i] = pipe:push(requests[i]) end
      pushes[pass] = (pipe.stats.push_seconds - pushed0) / M * 1e6 -- the host's time in push, per request
      local results = {}
      for i = 1, M do results[i] = pending[i]:result() end
      times[pass] = now() - t0
      ms[pass] = mp
      if pass == 1 then
        -- correctness: decrypted once, then bit for bit across stream counts
        if not first then
          for i = 1, M do
            local err = matvec.max_error(host, sk, results[i], matvec.reference(matrix, vectors[i], size), size)
            local bound = matvec.error_bound(engine.context, size, level)
            assert(err <= bound, ("size %d request %d: error %g above the bound %g"):format(size, i, err, bound))
          end
          first = results
        else
          for i = 1, M do
            assert(fh.equal(first[i].data, results[i].data), ("size %d, %d streams: request %d differs"):format(size,
              S, i))
          end
        end
      end
      results, pending = nil, nil -- (first keeps the first run's)
      collectgarbage("collect")
    end
    pipe:close()
    -- (lib.median sorts its list: medians of copies, so that each pass's line stays in order)
    local function med(list) return median({ unpack(list) }) end
    local t, push_us = med(times), med(pushes)
    local function stage(k)
      local v = {}
      for pass = 1, passes do v[pass] = ms[pass][k] end
      return median(v)
    end
    local m = { copy_in = stage("copy_in"), compute = stage("compute"), copy_out = stage("copy_out") }
    m.bound = math.max(m.copy_in + m.copy_out, m.compute)
    one_stream = one_stream or t
    local ratio = t / m.bound
    print(("%-5d %-5d %-7d %-5d %9.1f %9.1f %9.1f %9.1f %10.1f %9.1f %7.1f %8.2f %8.2f %8.2f  %s"):format(size, level,
      S, K, m.copy_in * 1e3, m.compute * 1e3, m.copy_out * 1e3, m.bound * 1e3, t * 1e3, M / t, push_us, ratio, serial / t,
      one_stream / t, ratio <= 1.10 and "yes" or "no"))
    if passes > 1 then
      local each = {}
      for pass = 1, passes do
        each[pass] = ("%.2f / %.2f"):format(times[pass] * 1e3, ms[pass].bound * 1e3)
      end
      print(("%-5s %-5s %-7s each pass, pipelined / bound: %s"):format("", "", "", table.concat(each, ", ")))
    end
    summary[#summary + 1] = { size = size, level = level, S = S, vs_one = one_stream / t }
  end
  print(("%-5d %-5d serial (each request alone): %.1f ms, %.1f requests/s (times in ms)"):format(size, level,
    serial * 1e3, M / serial))
end
end
local function level_name(l)
  local n = #engine.context:prime_ids(l, "Q")
  return ("level %d (%d Q prime%s%s)"):format(l, n, n == 1 and "" or "s",
    l == matvec.request_level(engine.context) and ", what the program needs" or "")
end
for _, r in ipairs(summary) do
  if r.size == 8 and r.S == 4 then
    print(("size 8, %s, 4 compute streams: %.2fx the requests/s of one stream (target >= 2x): %s"):format(
      level_name(r.level), r.vs_one, r.vs_one >= 2 and "yes" or "no"))
  end
end
