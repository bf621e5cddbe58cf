-- Tensor creation: fh.tensor from Lua data, empty/zeros/ones/full/arange,
-- seeded random tensors and the creation options.
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

local INT_DTYPES = { "uint8", "int32", "int64", "uint32", "uint64" }

describe("fh.tensor", function()
  it("builds nested tables row-major with the default dtype float32", function()
    local t = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.same({ 2, 3 }, t.shape)
    assert.same({ 3, 1 }, t:stride())
    assert.equal("float32", t.dtype)
    assert.equal("cpu", t.device)
    assert.equal("strided", t.layout)
    assert.is_false(t.requires_grad)
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:tolist())
  end)

  it("builds 3-d data and keeps every element in place", function()
    local data = R.fill({ 2, 3, 4 }, function(i) return i * 1.5 - 7 end)
    local t = fh.tensor(data, { dtype = "float64" })
    assert.same({ 2, 3, 4 }, t.shape)
    assert.same({ 12, 4, 1 }, t:stride())
    assert.same(data, t:tolist())
  end)

  it("makes 0-dim tensors from scalars", function()
    local t = fh.tensor(2.5)
    assert.same({}, t.shape)
    assert.equal(0, t:dim())
    assert.equal(1, t:numel())
    assert.equal(2.5, t:item())
    assert.equal(2.5, t:tolist())
    assert.equal("float32", t.dtype)
  end)

  it("infers the dtype from all leaves", function()
    assert.equal("float32", fh.tensor({ 1, 2 }).dtype)
    assert.equal("bool", fh.tensor({ true, false }).dtype)
    assert.equal("bool", fh.tensor(true).dtype)
    assert.equal("int64", fh.tensor({ -1LL, 2LL }).dtype)
    assert.equal("uint64", fh.tensor({ 1ULL, 2ULL }).dtype)
    assert.equal("uint64", fh.tensor(7ULL).dtype)
    -- mixed leaves: any Lua number gives float32, uint64 wins over int64,
    -- int64 over bool; the first leaf does not decide
    assert.equal("float32", fh.tensor({ true, 1 }).dtype)
    assert.equal("float32", fh.tensor({ 2LL, 1.5 }).dtype)
    assert.same({ 2, 1.5 }, fh.tensor({ 2LL, 1.5 }):tolist())
    assert.equal("uint64", fh.tensor({ 1LL, 2ULL }).dtype)
    assert.equal("int64", fh.tensor({ { true }, { 5LL } }).dtype)
    assert.same({ { 1LL }, { 5LL } }, fh.tensor({ { true }, { 5LL } }):tolist())
    assert.equal("float32", fh.tensor({}).dtype)
  end)

  it("keeps int64 and uint64 cdata leaves exact", function()
    local big = 18446744073709551615ULL
    local t = fh.tensor({ big, 9007199254740993ULL, 0ULL })
    R.assert_same({ big, 9007199254740993ULL, 0ULL }, t:tolist())
    local s = fh.tensor({ -9223372036854775807LL - 1, 9223372036854775807LL })
    R.assert_same({ -9223372036854775807LL - 1, 9223372036854775807LL }, s:tolist())
    -- an explicit dtype converts cdata leaves
    R.assert_same({ 3, -4 }, fh.tensor({ 3ULL, -4LL }, { dtype = "int32" }):tolist())
  end)

  it("converts leaves to an explicit dtype and reports the first bad leaf with its path", function()
    R.assert_same({ { 1, 0 }, { 255, 7 } }, fh.tensor({ { 1, 0 }, { 255, 7 } }, { dtype = "uint8" }):tolist())
    H.expect_error("ValueError", { "fh.tensor: data%[2%]%[1%]", "256", "out of range for uint8" },
      fh.tensor, { { 1, 2 }, { 256, 3 } }, { dtype = "uint8" })
    H.expect_error("ValueError", { "data%[3%]", "1.5 is not an integer", "int32" },
      fh.tensor, { 1, 2, 1.5 }, { dtype = "int32" })
    H.expect_error("ValueError", { "data%[1%]", "%-1", "uint64" }, fh.tensor, { -1 }, { dtype = "uint64" })
    H.expect_error("ValueError", { "data%[2%]", "%-4", "uint64" }, fh.tensor, { 1ULL, -4LL })
  end)

  it("reads booleans as 0/1 into numeric dtypes and numbers as != 0 into bool", function()
    assert.same({ 1, 0 }, fh.tensor({ true, false }, { dtype = "float64" }):tolist())
    assert.same({ true, false, true }, fh.tensor({ 2, 0, -0.5 }, { dtype = "bool" }):tolist())
  end)

  it("takes {re, im} pairs as complex128 leaves", function()
    local c = fh.tensor({ { 1, 2 }, { 3, -4 } }, { dtype = "complex128" })
    assert.same({ 2 }, c.shape)
    assert.same({ { 1, 2 }, { 3, -4 } }, c:tolist())
    -- a single pair is a 0-dim complex tensor
    local z = fh.tensor({ 0.5, -1.5 }, { dtype = "complex128" })
    assert.same({}, z.shape)
    assert.same({ 0.5, -1.5 }, z:item())
    -- real leaves have imaginary part 0; pairs and reals mix
    local m = fh.tensor({ { { 1, 1 }, 2 } }, { dtype = "complex128" })
    assert.same({ 1, 2 }, m.shape)
    assert.same({ { { 1, 1 }, { 2, 0 } } }, m:tolist())
    -- tolist round-trips through fh.tensor
    local r = fh.tensor(c:tolist(), { dtype = "complex128" })
    assert.is_true(fh.equal(c, r))
  end)

  it("copies a tensor argument, converting dtype when asked", function()
    local a = fh.tensor({ 1, 2, 3 }, { dtype = "int32" })
    local b = fh.tensor(a)
    assert.equal("int32", b.dtype)
    assert.are_not.equal(a:storage_ptr(), b:storage_ptr())
    local c = fh.tensor(a, { dtype = "float64", requires_grad = true })
    assert.equal("float64", c.dtype)
    assert.is_true(c.requires_grad)
    assert.same({ 1, 2, 3 }, c:tolist())
  end)

  it("makes empty tensors from empty lists", function()
    local e = fh.tensor({})
    assert.same({ 0 }, e.shape)
    assert.equal(0, e:numel())
    assert.same({}, e:tolist())
    local e2 = fh.tensor({ {}, {} }, { dtype = "int64" })
    assert.same({ 2, 0 }, e2.shape)
    assert.same({ {}, {} }, e2:tolist())
  end)

  it("rejects ragged nested tables with the path", function()
    H.expect_error("ValueError", { "ragged", "data%[2%] has 1 elements, expected 2" }, fh.tensor, { { 1, 2 }, { 3 } })
    H.expect_error("ValueError", { "data%[2%] is not a table", "ragged" }, fh.tensor, { { 1, 2 }, 3 })
    H.expect_error("ValueError", { "data%[2%] is a table", "ragged" }, fh.tensor, { 1, { 2 } })
    H.expect_error("ValueError", { "data%[1%]%[2%] has 3 elements, expected 2" }, fh.tensor,
      { { { 1, 2 }, { 1, 2, 3 } } })
    H.expect_error("ValueError", "ragged", fh.tensor, { {}, { 1 } })
  end)

  it("rejects tables that are not lists and leaves of other types", function()
    H.expect_error("TypeError", { "data is not a list", "1..2" }, fh.tensor, { 1, 2, x = 3 })
    H.expect_error("TypeError", { "data%[2%] is not a list" }, fh.tensor, { { 1 }, { 2, [3] = 4 } })
    H.expect_error("TypeError", { "data%[1%] expected a number", "got string" }, fh.tensor, { "a" })
    H.expect_error("TypeError", { "data expected a number", "got function" }, fh.tensor, print)
    H.expect_error("TypeError", "argument 1 %(data%) is missing", fh.tensor)
    -- a pair is not a leaf unless complex128 is asked for
    H.expect_error("TypeError", { "data%[1%]%[2%] expected a number", "got string" }, fh.tensor, { { 1, "x" } },
      { dtype = "complex128" })
    H.expect_error("TypeError", "complex value cannot be stored as float64", fh.full, { 1 }, { 1, 2 },
      { dtype = "float64" })
  end)

  it("limits nesting to 16 dimensions", function()
    local function nest(n)
      local v = 1
      for _ = 1, n do v = { v } end
      return v
    end
    assert.equal(16, fh.tensor(nest(16)):dim())
    H.expect_error("ValueError", "deeper than 16 dimensions", fh.tensor, nest(17))
    local cyc = {}
    cyc[1] = cyc
    H.expect_error("ValueError", "deeper than 16", fh.tensor, cyc)
  end)
end)

describe("fh.empty / zeros / ones / full", function()
  it("creates every dtype with the requested shape and contiguous strides", function()
    for _, dt in ipairs(fh.dtypes) do
      local e = fh.empty({ 2, 3, 4 }, { dtype = dt })
      assert.equal(dt, e.dtype)
      assert.same({ 2, 3, 4 }, e.shape)
      assert.same({ 12, 4, 1 }, e:stride())
      assert.is_true(e:is_contiguous())
    end
  end)

  it("fills zeros and ones in every dtype", function()
    local zero = { bool = false, int64 = 0LL, uint64 = 0ULL, complex128 = { 0, 0 } }
    local one = { bool = true, int64 = 1LL, uint64 = 1ULL, complex128 = { 1, 0 } }
    for _, dt in ipairs(fh.dtypes) do
      local z0 = zero[dt] == nil and 0 or zero[dt]
      local o1 = one[dt] == nil and 1 or one[dt]
      R.assert_same({ { z0, z0 }, { z0, z0 } }, fh.zeros({ 2, 2 }, { dtype = dt }):tolist(), "zeros " .. dt)
      R.assert_same({ o1, o1, o1 }, fh.ones({ 3 }, { dtype = dt }):tolist(), "ones " .. dt)
    end
  end)

  it("fills a value in every dtype", function()
    R.assert_same({ true, true }, fh.full({ 2 }, 3, { dtype = "bool" }):tolist())
    R.assert_same({ 200, 200 }, fh.full({ 2 }, 200, { dtype = "uint8" }):tolist())
    R.assert_same({ -7, -7 }, fh.full({ 2 }, -7, { dtype = "int32" }):tolist())
    R.assert_same({ 4000000000 }, fh.full({ 1 }, 4000000000, { dtype = "uint32" }):tolist())
    R.assert_same({ -9223372036854775807LL }, fh.full({ 1 }, -9223372036854775807LL, { dtype = "int64" }):tolist())
    R.assert_same({ 18446744073709551615ULL }, fh.full({ 1 }, 18446744073709551615ULL, { dtype = "uint64" }):tolist())
    R.assert_same({ R.f32(0.1) }, fh.full({ 1 }, 0.1):tolist())
    R.assert_same({ 0.1 }, fh.full({ 1 }, 0.1, { dtype = "float64" }):tolist())
    R.assert_same({ { 1, -2 } }, fh.full({ 1 }, { 1, -2 }, { dtype = "complex128" }):tolist())
    assert.same({}, fh.full({}, 5).shape)
    assert.equal(5, fh.full({}, 5):item())
  end)

  it("accepts a single size and Torch7-style size varargs", function()
    assert.same({ 5 }, fh.zeros(5).shape)
    assert.same({ 2, 3 }, fh.zeros(2, 3).shape)
    local t = fh.ones(2, 3, { dtype = "int32" })
    assert.same({ 2, 3 }, t.shape)
    assert.equal("int32", t.dtype)
    assert.same({ 4 }, fh.full(4, 1.5).shape)
    assert.same({ 3, 1 }, fh.empty(3, 1).shape)
  end)

  it("creates 0-dim and zero-size tensors", function()
    local s = fh.zeros({})
    assert.same({}, s.shape)
    assert.equal(1, s:numel())
    local z = fh.ones({ 2, 0, 3 })
    assert.equal(0, z:numel())
    assert.equal(0, z.nbytes)
    assert.same({ {}, {} }, z:tolist())
  end)

  it("records requires_grad and rejects non-boolean flags", function()
    assert.is_true(fh.ones({ 2 }, { requires_grad = true }).requires_grad)
    assert.is_false(fh.ones({ 2 }, { requires_grad = false }).requires_grad)
    assert.is_true(fh.tensor({ 1 }, { requires_grad = true }).requires_grad)
    assert.is_true(fh.arange(3, { requires_grad = true }).requires_grad)
    H.expect_error("TypeError", "option 'requires_grad' expected a boolean, got number", fh.ones, { 2 },
      { requires_grad = 1 })
  end)

  it("raises CudaError for pin_memory and CUDA devices on a machine without CUDA", function()
    if fh.cuda.is_available() then return end
    H.expect_error("CudaError", "CUDA", fh.zeros, { 2 }, { pin_memory = true })
    H.expect_error("CudaError", "CUDA", fh.tensor, { 1, 2 }, { pin_memory = true })
    H.expect_error("CudaError", "CUDA", function() return fh.zeros({ 2 }):pin_memory() end)
    H.expect_error("CudaError", "cuda:0", fh.zeros, { 2 }, { device = "cuda" })
    H.expect_error("CudaError", "cuda:3", fh.ones, { 2 }, { device = "cuda:3" })
    H.expect_error("CudaError", "CUDA", function() return fh.zeros({ 2 }):cuda() end)
    H.expect_error("CudaError", "CUDA", function() return fh.zeros({ 2 }):to("cuda:0") end)
    assert.is_false(fh.zeros({ 2 }):is_pinned())
  end)

  it("rejects pin_memory for a CUDA device before touching CUDA", function()
    H.expect_error("ValueError", "pin_memory=true requires device \"cpu\"", fh.zeros, { 2 },
      { pin_memory = true, device = "cuda:0" })
  end)
end)

describe("fh.arange", function()
  it("counts 0..n-1 and a..b by step", function()
    assert.same({ 0, 1, 2, 3, 4 }, fh.arange(5):tolist())
    assert.same({ 2, 3, 4 }, fh.arange(2, 5):tolist())
    assert.same({ 1, 1.25, 1.5, 1.75 }, fh.arange(1, 2, 0.25):tolist())
    assert.same({ 5, 4, 3, 2, 1 }, fh.arange(5, 0, -1):tolist())
    assert.same({ 0, 0.1, 0.2 }, fh.arange(0, 0.3, 0.1, { dtype = "float64" }):tolist())
    assert.same({}, fh.arange(0):tolist())
    assert.same({}, fh.arange(3, 1):tolist())
    assert.equal("float32", fh.arange(3).dtype)
  end)

  it("creates every integer and floating dtype", function()
    for _, dt in ipairs(INT_DTYPES) do
      local t = fh.arange(1, 4, { dtype = dt })
      assert.equal(dt, t.dtype)
      local want = (dt == "int64") and { 1LL, 2LL, 3LL } or (dt == "uint64") and { 1ULL, 2ULL, 3ULL } or { 1, 2, 3 }
      R.assert_same(want, t:tolist(), dt)
    end
    assert.same({ 0, 2, 4 }, fh.arange(0, 6, 2, { dtype = "float64" }):tolist())
    R.assert_same({ -3, -1, 1 }, fh.arange(-3, 2, 2, { dtype = "int32" }):tolist())
  end)

  it("rejects bool and complex dtypes, zero or non-finite steps and values outside the dtype", function()
    H.expect_error("TypeError", "arange does not support dtype bool", fh.arange, 3, { dtype = "bool" })
    H.expect_error("TypeError", "complex128", fh.arange, 3, { dtype = "complex128" })
    H.expect_error("ValueError", "step non%-zero", fh.arange, 0, 5, 0)
    H.expect_error("ValueError", "finite", fh.arange, 1 / 0)
    H.expect_error("ValueError", "finite", fh.arange, 0, 0 / 0)
    H.expect_error("ValueError", { "arange", "%-1", "uint8" }, fh.arange, -1, 3, { dtype = "uint8" })
    H.expect_error("ValueError", { "arange", "not an integer", "int32" }, fh.arange, 0, 1, 0.3, { dtype = "int32" })
    H.expect_error("TypeError", "argument 1 %(n%) expected a number, got string", fh.arange, "5")
    H.expect_error("ValueError", "unknown option 'dtyp'", fh.arange, 3, { dtyp = "int32" })
  end)
end)

describe("fh.Generator and random tensors", function()
  it("reproduces values for a seed and differs between seeds", function()
    for _, dt in ipairs({ "float32", "float64", "complex128" }) do
      local a = fh.rand({ 4, 5 }, { generator = fh.Generator(42), dtype = dt })
      local b = fh.rand({ 4, 5 }, { generator = fh.Generator(42), dtype = dt })
      local c = fh.rand({ 4, 5 }, { generator = fh.Generator(43), dtype = dt })
      assert.is_true(fh.equal(a, b), dt)
      assert.is_false(fh.equal(a, c), dt)
      local n1 = fh.randn({ 7 }, { generator = fh.Generator(7), dtype = dt })
      local n2 = fh.randn({ 7 }, { generator = fh.Generator(7), dtype = dt })
      assert.is_true(fh.equal(n1, n2), dt)
    end
  end)

  it("advances the generator between calls", function()
    local g = fh.Generator(1)
    local a = fh.rand({ 8 }, { generator = g })
    local b = fh.rand({ 8 }, { generator = g })
    assert.is_false(fh.equal(a, b))
    -- the same sequence split differently gives the same values
    local g2 = fh.Generator(1)
    local ab = fh.rand({ 16 }, { generator = g2, dtype = "float32" })
    assert.is_true(fh.equal(ab:narrow(1, 1, 8), a))
    assert.is_true(fh.equal(ab:narrow(1, 9, 8), b))
  end)

  it("draws uniform values in [0, 1) and standard normal values", function()
    local g = fh.Generator(2024)
    for _, dt in ipairs({ "float32", "float64" }) do
      local u = fh.rand({ 20000 }, { generator = g, dtype = dt }):tolist()
      local lo, hi, sum = math.huge, -math.huge, 0
      for _, x in ipairs(u) do
        lo, hi, sum = math.min(lo, x), math.max(hi, x), sum + x
      end
      assert.is_true(lo >= 0 and hi < 1, dt)
      assert.is_true(math.abs(sum / #u - 0.5) < 0.01, dt)
      local n = fh.randn({ 20000 }, { generator = g, dtype = dt }):tolist()
      local s1, s2 = 0, 0
      for _, x in ipairs(n) do s1, s2 = s1 + x, s2 + x * x end
      local mean = s1 / #n
      local var = s2 / #n - mean * mean
      assert.is_true(math.abs(mean) < 0.03, dt .. " mean " .. mean)
      assert.is_true(math.abs(var - 1) < 0.05, dt .. " variance " .. var)
    end
  end)

  it("uses an OS-seeded generator when none is given", function()
    local a, b = fh.rand({ 16 }), fh.rand({ 16 })
    assert.is_false(fh.equal(a, b))
    assert.same({ 2, 3 }, fh.randn(2, 3).shape)
  end)

  it("exposes the seed and validates it", function()
    local g = fh.Generator(12345)
    assert.equal(12345, g:seed())
    assert.equal("fhelium.Generator(seed=12345)", tostring(g))
    assert.equal("fhelium.Generator(seed=18446744073709551615)", tostring(fh.Generator(18446744073709551615ULL)))
    assert.equal(0, fh.Generator():seed())
    H.expect_error("TypeError", "seed expected an integer, got string", fh.Generator, "1")
    H.expect_error("TypeError", "seed expected an integer, got boolean", fh.Generator, true)
    H.expect_error("ValueError", { "seed", "not an integer" }, fh.Generator, 1.5)
    H.expect_error("ValueError", { "seed", "%-1", "out of range" }, fh.Generator, -1)
  end)

  it("rejects non-floating dtypes and foreign generators", function()
    H.expect_error("TypeError", "rand: dtype must be float32, float64 or complex128, got int32", fh.rand, { 2 },
      { dtype = "int32" })
    H.expect_error("TypeError", "randn: dtype must be", fh.randn, { 2 }, { dtype = "uint64" })
    H.expect_error("TypeError", "option 'generator' expected a Generator, got number", fh.rand, { 2 },
      { generator = 5 })
    H.expect_error("ValueError", "unknown option 'generator'", fh.zeros, { 2 }, { generator = fh.Generator(1) })
  end)
end)
