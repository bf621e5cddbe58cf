-- scripts/bench/lib.lua: what the benchmark scripts share (a monotonic clock,
-- medians, running a C baseline program). Not a module on package.path: each
-- script loads it relative to itself,
--   local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
-- so the scripts run the same from `luajit` and from `scripts/run`.
local ffi = require "ffi"

local M = {}

-- pcall: the declaration may already exist when several scripts run in one
-- state (ffi.cdef rejects a second definition of the same struct)
pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } fh_bench_timespec;
int clock_gettime(int clk, fh_bench_timespec *t);
]])
local ts = ffi.new("fh_bench_timespec")

-- CLOCK_MONOTONIC in microseconds
function M.now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) * 1e-3
end

-- CLOCK_MONOTONIC in seconds
function M.now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- the median of a list of numbers (sorts the list in place)
function M.median(v)
  table.sort(v)
  local n = #v
  return n % 2 == 1 and v[(n + 1) / 2] or 0.5 * (v[n / 2] + v[n / 2 + 1])
end

-- exits with a message when no CUDA device is usable
function M.require_cuda(fh)
  if not fh.cuda.is_available() then
    io.stderr:write("bench: no CUDA device: ", fh.cuda.unavailable_reason(), "\n")
    os.exit(1)
  end
end

-- runs a baseline program (the path, then `args` if given) and returns its
-- "key value" lines as a table of numbers; other lines go to stderr
function M.run_baseline(bin, args)
  local out = {}
  local p = assert(io.popen(bin .. (args and (" " .. args) or "") .. " 2>&1"))
  for line in p:lines() do
    local k, v = line:match("^(%S+)%s+(%S+)$")
    if k and tonumber(v) then out[k] = tonumber(v) else io.stderr:write("baseline: ", line, "\n") end
  end
  assert(p:close(), "the baseline program failed")
  return out
end

-- the path of a baseline program: the script's first argument, else
-- $FHELIUM_BUILD/<name> (FHELIUM_BUILD defaults to build)
function M.baseline_path(name)
  return arg[1] or ((os.getenv("FHELIUM_BUILD") or "build") .. "/" .. name)
end

return M
