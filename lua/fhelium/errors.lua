-- fh.errors: error objects and the kind hierarchy of docs/api.md ("Errors").
-- Every error fhelium raises is a table {kind=, message=, path=?, stage=?}
-- with a shared metatable; tostring(err) == "<kind>: <message>".
local core = require "fhelium.core"

local M = {}

M.parents = {
  FHEliumError = nil,
  ValueError = "FHEliumError",
  TypeError = "FHEliumError",
  StateError = "FHEliumError",
  CudaError = "FHEliumError",
  MemoryError = "FHEliumError",
  ExecutionError = "FHEliumError",
  ExecutionInputError = "ExecutionError",
  CudaGraphInputError = "ExecutionInputError",
  CudaGraphCaptureError = "ExecutionError",
  IOError = "FHEliumError",
}
M.kinds = { "FHEliumError" }
for _, k in ipairs(core.error_kinds()) do
  if k ~= "FHEliumError" then M.kinds[#M.kinds + 1] = k end
end

local mt = core.error_metatable

--- True when `err` is an fhelium error object.
function M.is_error(err)
  return type(err) == "table" and getmetatable(err) == mt
end

--- fh.errors.is(err, kind): true for the kind and its ancestors.
function M.is(err, kind)
  if not M.is_error(err) then return false end
  local k = err.kind
  while k do
    if k == kind then return true end
    k = M.parents[k]
  end
  return false
end

local known = {}
for _, k in ipairs(M.kinds) do known[k] = true end

local function check(fn, kind, message, opts)
  if not known[kind] then
    error(core.error_new("ValueError", ("%s: argument 1 (kind) expected one of %s, got %s"):format(fn,
      table.concat(M.kinds, ", "), type(kind) == "string" and ("'" .. kind .. "'") or type(kind))), 3)
  end
  if type(message) ~= "string" then
    error(core.error_new("TypeError", ("%s: argument 2 (message) expected a string, got %s"):format(fn,
      type(message))), 3)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(core.error_new("TypeError", ("%s: argument 3 (opts) expected a table, got %s"):format(fn, type(opts))), 3)
  end
end

--- A new error object (not raised). opts: {path=, stage=}
function M.new(kind, message, opts)
  check("fh.errors.new", kind, message, opts)
  return core.error_new(kind, message, opts)
end

--- Raise an error object of `kind`; `level` as in error().
function M.raise(kind, message, opts, level)
  check("fh.errors.raise", kind, message, opts)
  error(core.error_new(kind, message, opts), level or 2)
end

return M
