-- fh.cuda: devices, streams and events. Queries work without a GPU
-- (is_available() is false); everything else raises CudaError then.
local core = require "fhelium.core"
local M = {}
for k, v in pairs(core.cuda) do M[k] = v end

local function pack(...) return { n = select("#", ...), ... } end

--- Run fn(...) with stream `s` current on its device; the previous current
--- stream is restored when fn returns or raises. Returns fn's results.
function M.with_stream(s, fn, ...)
  local dev = s.device
  local prev = core.cuda.current_stream(dev)
  core.cuda.set_stream(s)
  local res = pack(pcall(fn, ...))
  core.cuda.set_stream(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end

return M
