-- Reductions and comparisons: fh.sum, fh.equal, fh.allclose, fh.max_abs_diff.
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

describe("fh.sum", function()
  it("returns a 0-dim tensor with the documented result dtype", function()
    local want = {
      bool = "int64", uint8 = "int64", int32 = "int64", uint32 = "int64", int64 = "int64",
      uint64 = "uint64", float32 = "float32", float64 = "float64", complex128 = "complex128",
    }
    for _, dt in ipairs(fh.dtypes) do
      local s = fh.sum(fh.ones({ 3, 4 }, { dtype = dt }))
      assert.equal(0, s:dim(), dt)
      assert.same({}, s.shape)
      assert.equal(want[dt], s.dtype, dt)
      local v = s:item()
      if dt == "complex128" then assert.same({ 12, 0 }, v)
      elseif want[dt] == "int64" then R.assert_same(12LL, v, dt)
      elseif dt == "uint64" then R.assert_same(12ULL, v)
      else assert.equal(12, v, dt) end
    end
  end)

  it("sums values computed in the spec, over views too", function()
    local seed = H.seed("tensor_reduce")
    math.randomseed(seed)
    local data = R.fill({ 5, 7 }, function() return math.random(-1000, 1000) / 8 end) -- exact in binary
    local t = fh.tensor(data, { dtype = "float64" })
    local total, col3 = 0, 0
    for i = 1, 5 do
      for j = 1, 7 do total = total + data[i][j] end
      col3 = col3 + data[i][3]
    end
    assert.equal(total, fh.sum(t):item())
    assert.equal(total, fh.sum(t:transpose(1, 2)):item())
    assert.equal(col3, fh.sum(t:select(2, 3)):item())
    assert.equal(data[2][4], fh.sum(t:select(1, 2):select(1, 4)):item())
    R.assert_same({ 3.5, -1 }, fh.sum(fh.tensor({ { 1, -2 }, { 2.5, 1 } }, { dtype = "complex128" })):item())
  end)

  it("counts true values of a bool tensor and sums integers exactly or wrapping", function()
    R.assert_same(2LL, fh.sum(fh.tensor({ true, false, true })):item())
    R.assert_same(765LL, fh.sum(fh.tensor({ 255, 255, 255 }, { dtype = "uint8" })):item())
    R.assert_same(8589934590LL, fh.sum(fh.tensor({ 4294967295, 4294967295 }, { dtype = "uint32" })):item())
    R.assert_same(-9223372036854775807LL - 1, fh.sum(fh.tensor({ 9223372036854775807LL, 1LL })):item())
    R.assert_same(1ULL, fh.sum(fh.tensor({ 18446744073709551615ULL, 2ULL })):item())
    R.assert_same(18014398509481986ULL, fh.sum(fh.tensor({ 9007199254740993ULL, 9007199254740993ULL })):item())
  end)

  it("accumulates float32 in double", function()
    -- 2^24 + 1 + 1 in float32 steps would stay 2^24; in double it is exact
    local t = fh.tensor({ 16777216, 1, 1 })
    assert.equal(16777218, fh.sum(t):item())
  end)

  it("sums empty tensors to zero and rejects non-tensors", function()
    assert.equal(0, fh.sum(fh.zeros({ 0, 3 })):item())
    R.assert_same(0LL, fh.sum(fh.zeros({ 0 }, { dtype = "int32" })):item())
    assert.equal(5, fh.sum(fh.tensor(5)):item())
    H.expect_error("TypeError", "fh.sum: argument 1 %(t%) expected a Tensor, got table", fh.sum, { 1, 2 })
  end)
end)

describe("fh.equal", function()
  it("is true for the same shape, dtype and values, whatever the strides", function()
    local a = fh.arange(6, { dtype = "int32" }):view(2, 3)
    assert.is_true(fh.equal(a, a:clone()))
    assert.is_true(fh.equal(a:transpose(1, 2), a:transpose(1, 2):contiguous()))
    assert.is_true(fh.equal(fh.zeros({ 0 }), fh.zeros({ 0 })))
    assert.is_true(fh.equal(fh.tensor({ 0.0 }), fh.tensor({ -0.0 })))
    assert.is_true(fh.equal(fh.tensor({ 1 / 0 }), fh.tensor({ 1 / 0 })))
    assert.is_true(fh.equal(fh.tensor(3LL), fh.tensor(3LL)))
    assert.is_false(fh.equal(fh.tensor(3LL), fh.tensor(4LL)))
    assert.is_false(fh.equal(fh.tensor(3LL), fh.tensor({ 3LL })))
    assert.equal(1.5, fh.max_abs_diff(fh.tensor(1.5), fh.tensor(0)))
  end)

  it("is false for a different value, shape or dtype, and for NaN", function()
    local a = fh.arange(6, { dtype = "int32" }):view(2, 3)
    local b = a:clone()
    b:select(1, 2):select(1, 3):fill_(-1)
    assert.is_false(fh.equal(a, b))
    assert.is_false(fh.equal(a, a:view(3, 2)))
    assert.is_false(fh.equal(a, a:view(6)))
    assert.is_false(fh.equal(a, a:to("int64")))
    local n = fh.tensor({ 0 / 0 })
    assert.is_false(fh.equal(n, n))
    local u = fh.tensor({ 18446744073709551615ULL })
    assert.is_false(fh.equal(u, fh.tensor({ 18446744073709551614ULL })))
    assert.is_false(fh.equal(fh.tensor({ { 1, 2 } }, { dtype = "complex128" }), fh.tensor({ { 1, 3 } }, { dtype = "complex128" })))
    H.expect_error("TypeError", "fh.equal: argument 2 %(b%) expected a Tensor, got number", fh.equal, a, 1)
  end)
end)

describe("fh.allclose and fh.max_abs_diff", function()
  local a = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })

  it("uses |a - b| <= atol + rtol * |b| with defaults rtol=1e-5, atol=1e-8", function()
    assert.is_true(fh.allclose(a, a + 1e-9))
    assert.is_true(fh.allclose(a, a * (1 + 5e-6)))
    assert.is_false(fh.allclose(a, a * (1 + 5e-5)))
    assert.is_false(fh.allclose(a, a + 1))
    assert.is_true(fh.allclose(a, a + 1, { atol = 1 }))
    assert.is_true(fh.allclose(a + 1, a, { rtol = 1, atol = 0 }))
    assert.is_false(fh.allclose(a, a + 1, { rtol = 0.1, atol = 0 }))
    assert.is_true(fh.allclose(fh.zeros({ 0 }), fh.zeros({ 0 })))
  end)

  it("computes max |a - b| exactly for floats, integers and complex", function()
    local b = a:clone()
    b:select(1, 2):select(1, 2):fill_(7.5)
    assert.equal(2.5, fh.max_abs_diff(a, b))
    assert.equal(2.5, fh.max_abs_diff(b, a))
    assert.equal(0, fh.max_abs_diff(a, a:transpose(1, 2):transpose(1, 2)))
    assert.equal(0, fh.max_abs_diff(fh.zeros({ 0 }), fh.zeros({ 0 })))
    assert.equal(2 ^ 64, fh.max_abs_diff(fh.tensor({ 0ULL }), fh.tensor({ 18446744073709551615ULL })))
    assert.equal(3, fh.max_abs_diff(fh.tensor({ 5ULL }), fh.tensor({ 2ULL })))
    assert.equal(2 ^ 64, fh.max_abs_diff(fh.tensor({ -9223372036854775807LL - 1 }), fh.tensor({ 9223372036854775807LL })))
    assert.equal(5, fh.max_abs_diff(fh.tensor({ { 0, 0 } }, { dtype = "complex128" }), fh.tensor({ { 3, 4 } }, { dtype = "complex128" })))
    assert.equal(255, fh.max_abs_diff(fh.tensor({ 0 }, { dtype = "uint8" }), fh.tensor({ 255 }, { dtype = "uint8" })))
  end)

  it("treats NaN as never close and infinities as close only to themselves", function()
    local n = fh.tensor({ 1, 0 / 0 }, { dtype = "float64" })
    assert.is_false(fh.allclose(n, n))
    local d = fh.max_abs_diff(n, n)
    assert.is_true(d ~= d)
    local inf = fh.tensor({ 1 / 0, -1 / 0, 2 }, { dtype = "float64" })
    assert.is_true(fh.allclose(inf, inf:clone()))
    assert.equal(0, fh.max_abs_diff(inf, inf:clone()))
    local fin = fh.tensor({ 1e308, -1 / 0, 2 }, { dtype = "float64" })
    assert.is_false(fh.allclose(fin, inf, { rtol = 1e9 }))
    assert.equal(math.huge, fh.max_abs_diff(fin, inf))
    local cn = fh.tensor({ { 1, 0 / 0 } }, { dtype = "complex128" })
    local ci = fh.tensor({ { 1 / 0, 0 } }, { dtype = "complex128" })
    local dc = fh.max_abs_diff(cn, ci)
    assert.is_true(dc ~= dc)
  end)

  it("requires equal shapes and dtypes and valid tolerances", function()
    H.expect_error("ValueError", "allclose: shape mismatch: 2x3 vs 3", fh.allclose, a, fh.zeros({ 3 }, { dtype = "float64" }))
    H.expect_error("TypeError", "allclose: dtype mismatch %(float64 and float32%)", fh.allclose, a, a:to("float32"))
    H.expect_error("ValueError", "max_abs_diff: shape mismatch: 2x3 vs 3x2", fh.max_abs_diff, a, a:transpose(1, 2))
    H.expect_error("TypeError", "max_abs_diff: dtype mismatch", fh.max_abs_diff, a, a:to("int64"))
    H.expect_error("ValueError", "rtol and atol must be >= 0", fh.allclose, a, a, { rtol = -1 })
    H.expect_error("ValueError", "rtol and atol must be >= 0", fh.allclose, a, a, { atol = 0 / 0 })
    H.expect_error("TypeError", "fh.allclose: option 'rtol' expected a number, got string", fh.allclose, a, a, { rtol = "1" })
    H.expect_error("ValueError", "fh.allclose: unknown option 'tol' %(expected rtol, atol%)", fh.allclose, a, a, { tol = 1 })
  end)
end)
