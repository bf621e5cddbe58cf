-- Helpers for the CUDA specs: seeded random tensors of every dtype (full
-- value ranges, never all zeros) and exact comparisons.
local ffi = require "ffi"
local fh = require "fhelium"

local U = {}

U.dtypes = { "bool", "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128" }
U.arith_dtypes = { "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128" }

--- A random number source seeded with `seed` (math.random's interface).
function U.rng(seed)
  math.randomseed(seed)
  return math.random
end

local function u64(r)
  return ffi.new("uint64_t", r(0, 4294967295)) * 4294967296ULL + r(0, 4294967295)
end
U.u64 = u64

--- One random value of `dtype`, as fh.tensor accepts it.
function U.value(dtype, r)
  if dtype == "bool" then return r(0, 1) == 1 end
  if dtype == "uint8" then return r(0, 255) end
  if dtype == "int32" then return r(-2147483648, 2147483647) end
  if dtype == "uint32" then return r(0, 4294967295) end
  if dtype == "int64" then return ffi.cast("int64_t", u64(r)) end
  if dtype == "uint64" then return u64(r) end
  if dtype == "complex128" then return { (r() - 0.5) * 2 ^ r(-6, 6), (r() - 0.5) * 2 ^ r(-6, 6) } end
  -- floats: both signs, magnitudes over several binades, never zero
  local x = (r() - 0.5) * 2 ^ r(-8, 8)
  if x == 0 then x = 0.25 end
  return x
end

local function nested(shape, d, gen)
  if d > #shape then return gen() end
  local t = {}
  for i = 1, shape[d] do t[i] = nested(shape, d + 1, gen) end
  return t
end

--- A random CPU tensor; opts.device moves it.
function U.random(dtype, shape, r, opts)
  local data = nested(shape, 1, function() return U.value(dtype, r) end)
  local t = fh.tensor(data, { dtype = dtype })
  if opts and opts.device then t = t:to(opts.device) end
  return t
end

--- Random residues < moduli[row] for a uint64 tensor [*, #moduli, n].
function U.residues(shape, moduli, r)
  local limb_dim = #shape - 1
  local function build(d, limb)
    if d > #shape then return u64(r) % moduli[limb] end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1, d == limb_dim and i or limb) end
    return t
  end
  return fh.tensor(build(1, 1), { dtype = "uint64" })
end

--- True when a and b have the same shape, dtype and bytes (bit-exact,
--- NaNs included), whatever their devices and strides.
function U.same_bytes(a, b)
  if a.dtype ~= b.dtype then return false, "dtype " .. a.dtype .. " vs " .. b.dtype end
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false, "rank" end
  for i = 1, #sa do
    if sa[i] ~= sb[i] then return false, "shape" end
  end
  local x, y = a:_bytes(), b:_bytes()
  if x == y then return true end
  local es = a:element_size()
  for i = 1, #x do
    if x:byte(i) ~= y:byte(i) then
      local k = math.floor((i - 1) / es)
      return false, ("first difference at element %d (row-major): %s vs %s"):format(
        k + 1, tostring(a:reshape({ -1 }):narrow(1, k + 1, 1):tolist()[1]),
        tostring(b:reshape({ -1 }):narrow(1, k + 1, 1):tolist()[1]))
    end
  end
  return false, "length"
end

function U.assert_same(a, b, what)
  local ok, why = U.same_bytes(a, b)
  assert(ok, (what or "tensors differ") .. ": " .. tostring(why))
end

--- Collect garbage until nothing more is freed (CUDA tensors return their
--- blocks in __gc).
function U.collect()
  collectgarbage()
  collectgarbage()
end

return U
