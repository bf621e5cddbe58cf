-- fh.cuda: devices, streams, events and memory. Queries work without a GPU
-- (is_available() is false); everything else raises CudaError then.
--
-- Test aids (not API): fh.cuda._spin(ms, stream) enqueues a kernel that runs
-- for `ms` milliseconds on `stream` (default: the current stream), to open
-- race windows on purpose; fh.cuda._capture(fn, replays) runs fn while a
-- fresh stream captures a CUDA graph into a capture-private pool, replays
-- it and returns ok, fn's first result or error. Benchmark aid (not API):
-- fh.cuda._raw_graph_bench(K, random, reps) replays the raw CUDA graph of
-- scripts/bench/exec_baseline.cu inside this process (us per replay).
-- Profiling aid (not API): fh.cuda._profiler(true / false) starts and stops
-- a profiler's range (cudaProfilerStart / Stop; ncu --profile-from-start off,
-- scripts/bench/ckks_profile.lua).
local core = require "fhelium.core"
local errors = require "fhelium.errors"
local M = {}
for k, v in pairs(core.cuda) do M[k] = v end

local function pack(...) return { n = select("#", ...), ... } end

--- Run fn(...) with stream `s` current on its device; the previous current
--- stream is restored when fn returns or raises. Returns fn's results.
function M.with_stream(s, fn, ...)
  if type(fn) ~= "function" then
    errors.raise("TypeError", "fh.cuda.with_stream: argument 2 (fn) expected a function, got " .. type(fn), nil, 2)
  end
  local prev = core.cuda._exchange_stream(s) -- checks s; makes it current; returns the old one
  local res = pack(pcall(fn, ...))
  core.cuda.set_stream(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

return M
