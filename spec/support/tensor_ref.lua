-- Reference helpers for the tensor specs: values computed in Lua (LuaJIT
-- 64-bit cdata integers for exact integer and modular arithmetic), nested
-- list <-> flat conversions and broadcasting. `local R = require "spec.support.tensor_ref"`.
local ffi = require "ffi"

local R = {}

function R.is_u64(v) return type(v) == "cdata" and ffi.istype("uint64_t", v) end
function R.is_i64(v) return type(v) == "cdata" and ffi.istype("int64_t", v) end

--- float32 rounding of a Lua number (what a float32 element holds).
function R.f32(x) return tonumber(ffi.new("float", x)) end

--- Wrap an exact integer (number or 64-bit cdata) to an integer dtype, the
--- way C stores it (modulo 2^bits, two's complement).
local ctypes = { uint8 = "uint8_t", int32 = "int32_t", uint32 = "uint32_t", int64 = "int64_t", uint64 = "uint64_t" }
function R.wrap(x, dtype)
  local ct = ctypes[dtype]
  if type(x) == "number" then x = ffi.new("int64_t", x) end
  local v = ffi.cast(ct, x)
  if dtype == "int64" or dtype == "uint64" then return ffi.new(ct, v) end
  return tonumber(v)
end

--- A uniformly random uint64 (from math.random, so math.randomseed makes it
--- reproducible).
function R.rand_u64()
  local hi = math.random(0, 4294967295)
  local lo = math.random(0, 4294967295)
  return ffi.new("uint64_t", hi) * 4294967296ULL + lo
end

--- The int64 with the bits of a uint64 (two's complement).
function R.i64(u) return ffi.cast("int64_t", u) + 0LL end

--- A random uint64 in [0, q).
function R.rand_below(q) return R.rand_u64() % q end

--- Reference modular arithmetic on uint64 cdata (q < 2^62, so no sum below
--- overflows 64 bits). mulmod is double-and-add: independent of the
--- engine's Barrett reduction.
function R.mulmod(a, b, q)
  a, b = a % q, b % q
  local r = 0ULL
  while b ~= 0ULL do
    if b % 2ULL == 1ULL then
      r = r + a
      if r >= q then r = r - q end
    end
    a = a + a
    if a >= q then a = a - q end
    b = b / 2ULL
  end
  return r
end
function R.addmod(a, b, q)
  local s = a + b
  if s >= q then s = s - q end
  return s
end
function R.submod(a, b, q)
  if a >= b then return a - b end
  return a + (q - b)
end
function R.negmod(a, q)
  if a == 0ULL then return 0ULL end
  return q - a
end

function R.numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

--- Row-major flat array of a nested list of `shape`.
function R.flatten(list, shape)
  local out = {}
  local function walk(v, d)
    if d > #shape then out[#out + 1] = v return end
    for i = 1, shape[d] do walk(v[i], d + 1) end
  end
  walk(list, 1)
  return out
end

--- Nested list of `shape` from a row-major flat array.
function R.unflatten(flat, shape)
  local pos = 0
  local function build(d)
    if d > #shape then
      pos = pos + 1
      return flat[pos]
    end
    local r = {}
    for i = 1, shape[d] do r[i] = build(d + 1) end
    return r
  end
  return build(1)
end

--- A nested list of `shape` filled by f(i) for the row-major position i (1-based).
function R.fill(shape, f)
  local flat = {}
  for i = 1, R.numel(shape) do flat[i] = f(i) end
  return R.unflatten(flat, shape)
end

--- Broadcast shape of two shapes (nil when they do not broadcast).
function R.broadcast_shape(sa, sb)
  local n = math.max(#sa, #sb)
  local r = {}
  for i = 1, n do
    local x = sa[#sa - n + i] or 1
    local y = sb[#sb - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    r[i] = x == 1 and y or x
  end
  return r
end

--- Element-wise f over two flat arrays with broadcasting; returns the flat
--- result and its shape.
function R.broadcast_map(fa, sa, fb, sb, f)
  local shape = assert(R.broadcast_shape(sa, sb), "shapes do not broadcast")
  local n = #shape
  local function index_in(s, idx)
    -- row-major flat index (1-based) in an operand of shape s for the
    -- broadcast multi-index idx
    local k, lead = 0, n - #s
    for d = 1, #s do
      local i = s[d] == 1 and 0 or idx[lead + d]
      k = k * s[d] + i
    end
    return k + 1
  end
  local out, idx = {}, {}
  for d = 1, n do idx[d] = 0 end
  for p = 1, R.numel(shape) do
    out[p] = f(fa[index_in(sa, idx)], fb[index_in(sb, idx)])
    for d = n, 1, -1 do
      idx[d] = idx[d] + 1
      if idx[d] < shape[d] then break end
      idx[d] = 0
    end
  end
  return out, shape
end

--- Deep equality that also requires equal Lua types (so 3ULL ~= 3) and
--- treats NaN as equal to NaN. Returns ok, message.
function R.same(expected, actual, path)
  path = path or "value"
  local te, ta = type(expected), type(actual)
  if te ~= ta then return false, ("%s: expected %s %s, got %s %s"):format(path, te, tostring(expected), ta, tostring(actual)) end
  if te == "table" then
    if #expected ~= #actual then return false, ("%s: expected %d elements, got %d"):format(path, #expected, #actual) end
    for i = 1, #expected do
      local ok, msg = R.same(expected[i], actual[i], ("%s[%d]"):format(path, i))
      if not ok then return false, msg end
    end
    return true
  end
  if te == "cdata" then
    if ffi.istype("uint64_t", expected) ~= ffi.istype("uint64_t", actual) then
      return false, ("%s: expected %s, got %s (different 64-bit types)"):format(path, tostring(expected), tostring(actual))
    end
  end
  if te == "number" and expected ~= expected and actual ~= actual then return true end
  if expected ~= actual then
    return false, ("%s: expected %s, got %s"):format(path, tostring(expected), tostring(actual))
  end
  return true
end

--- assert-style wrapper of R.same.
function R.assert_same(expected, actual, what)
  local ok, msg = R.same(expected, actual)
  if not ok then error((what and (what .. ": ") or "") .. msg, 2) end
end

return R
