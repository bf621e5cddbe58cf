-- fh.partial(fn, ...): fn with its first arguments bound, as a callable
-- table (partial(fn, a, b)(x) == fn(a, b, x)). This is how a captured
-- program gets static state without upvalues: only the arguments given at
-- call time are dynamic, so
--   ex.CudaGraphProgram.capture(fh.partial(step, weights), {example_inputs = {x}})
-- captures step(weights, x) with `weights` fixed. nil arguments are kept.
local errors = require "fhelium.errors"

local Partial = {}
Partial.__index = Partial

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

Partial.__call = function(self, ...)
  local bound, n = self.args, self.nargs
  local m = select("#", ...)
  if m == 0 then return self.fn(unpack(bound, 1, n)) end
  local all = {}
  for i = 1, n do all[i] = bound[i] end
  for i = 1, m do all[n + i] = (select(i, ...)) end
  return self.fn(unpack(all, 1, n + m))
end

Partial.__tostring = function(self)
  return ("fh.partial(%s, %d bound argument%s)"):format(tostring(self.fn), self.nargs, self.nargs == 1 and "" or "s")
end

local function partial(fn, ...)
  if not callable(fn) then
    errors.raise("TypeError", ("fh.partial: argument 1 (fn) expected a function or callable table, got %s"):format(type(fn)))
  end
  return setmetatable({ fn = fn, args = { ... }, nargs = select("#", ...) }, Partial)
end

return partial
