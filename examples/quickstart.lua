-- A first look at fhelium: tensors, views, arithmetic, and the RNS modular
-- arithmetic on uint64 limbs that CKKS is built from. Runs on the CPU.
--   scripts/run examples/quickstart.lua
local fh = require "fhelium"

local function show(title, value)
  print("-- " .. title)
  print(value)
  print()
end

local info = fh.info()
print(("fhelium %s, CUDA %s\n"):format(info.version,
  fh.cuda.is_available() and ("available (%d devices)"):format(fh.cuda.device_count()) or
  ("not available: " .. fh.cuda.unavailable_reason())))

-- Tensors: nested tables or generators, a dtype, a device.
local a = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
local b = fh.arange(6, { dtype = "float64" }):view({ 2, 3 })
show("a", a)
show("b = arange(6):view({2, 3})", b)

-- Arithmetic, elementwise, with a new tensor as result.
show("a + b", a + b)
show("a * b - 1", a * b - 1)
show("-a / 2", -a / 2)

-- Views share storage and keep their strides (1-based dimensions).
local bt = b:transpose(1, 2)
show(("b:transpose(1, 2): a view with strides {%s}, contiguous: %s"):format(table.concat(bt:stride(), ", "),
  tostring(bt:is_contiguous())), bt)

local an = a:narrow(2, 2, 2)
show(("a:narrow(2, 2, 2): columns 2..3 of a, strides {%s}"):format(table.concat(an:stride(), ", ")), an)

-- Seeded random numbers: the same seed gives the same tensor.
local g = fh.Generator(2024)
show("rand({2, 2}) from Generator(2024)", fh.rand({ 2, 2 }, { generator = g, dtype = "float64" }))

-- RNS arithmetic: a uint64 tensor [limb, N] holds one residue row per
-- modulus; fh.rns.* work modulo q[i] on row i. These q are 60-bit primes
-- (q = k * 2^17 + 1); 64-bit values are exact as ULL literals.
local q = { 1152921504606584833ULL, 1152921504598720513ULL }
local x = fh.tensor({ { 1ULL, 2ULL, q[1] - 1ULL, 123456789ULL },
                      { 5ULL, q[2] - 2ULL, 7ULL, 1ULL } }, { dtype = "uint64" })
local y = fh.tensor({ { 3ULL, q[1] - 1ULL, 2ULL, 987654321ULL },
                      { q[2] - 5ULL, 4ULL, 6ULL, 1ULL } }, { dtype = "uint64" })
show("x (uint64 residues, row i modulo q[i])", x)
show("y", y)
show("fh.rns.add(x, y, q)", fh.rns.add(x, y, q))
show("fh.rns.sub(x, y, q)", fh.rns.sub(x, y, q))
show("fh.rns.mul(x, y, q)", fh.rns.mul(x, y, q))
show("fh.rns.neg(x, q)", fh.rns.neg(x, q))

-- Check one sum with LuaJIT's 64-bit integers: (q1 - 1) + 2 = 1 mod q1.
local s = fh.rns.add(x, y, q):tolist()
print(("-- check: (q1 - 1) + 2 mod q1 = %s (expected 1)"):format(tostring(s[1][3])))
