-- Lua-side tensor methods: tolist, item and printing. The engine returns raw
-- element bytes; 64-bit integers become LuaJIT int64_t/uint64_t cdata (exact)
-- and complex128 elements {re, im} pairs.
local ffi = require "ffi"
local core = require "fhelium.core"

local M = {}
local methods = core.Tensor_methods
local meta = core.Tensor_metatable

local readers = {
  bool = function(p, i) return ffi.cast("const uint8_t*", p)[i] ~= 0 end,
  uint8 = function(p, i) return tonumber(ffi.cast("const uint8_t*", p)[i]) end,
  int32 = function(p, i) return tonumber(ffi.cast("const int32_t*", p)[i]) end,
  uint32 = function(p, i) return tonumber(ffi.cast("const uint32_t*", p)[i]) end,
  int64 = function(p, i) return ffi.cast("const int64_t*", p)[i] end,
  uint64 = function(p, i) return ffi.cast("const uint64_t*", p)[i] end,
  float32 = function(p, i) return tonumber(ffi.cast("const float*", p)[i]) end,
  float64 = function(p, i) return tonumber(ffi.cast("const double*", p)[i]) end,
  complex128 = function(p, i)
    local d = ffi.cast("const double*", p)
    return { tonumber(d[2 * i]), tonumber(d[2 * i + 1]) }
  end,
}
M.readers = readers

--- Elements as nested Lua tables (a 0-dim tensor gives its one value).
function methods.tolist(t)
  local bytes = t:_bytes()
  local read = readers[t.dtype]
  local shape = t.shape
  local pos = 0
  local function build(d)
    if d > #shape then
      local v = read(bytes, pos)
      pos = pos + 1
      return v
    end
    local r = {}
    for i = 1, shape[d] do r[i] = build(d + 1) end
    return r
  end
  return build(1)
end

--- The one element of a tensor with numel() == 1, as a Lua value.
function methods.item(t)
  local v, bytes = t:_item()
  if v ~= nil then return v end
  return readers[t.dtype](bytes, 0)
end

meta.__tostring = function(t) return require("fhelium.pretty").tensor(t) end
meta.__len = function(t) return t.shape[1] or 0 end

M.Tensor = { methods = methods, metatable = meta }
return M
