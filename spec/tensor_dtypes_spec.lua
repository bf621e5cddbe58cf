-- The nine dtypes: sizes, names, fields, tolist/item exactness, conversion.
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

local SIZES = { bool = 1, uint8 = 1, int32 = 4, int64 = 8, uint32 = 4, uint64 = 8, float32 = 4, float64 = 8, complex128 = 16 }

describe("dtypes", function()
  it("lists the nine dtypes of docs/api.md", function()
    assert.same({ "bool", "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128" }, fh.dtypes)
  end)

  it("gives element_size and nbytes for every dtype", function()
    for _, dt in ipairs(fh.dtypes) do
      local t = fh.zeros({ 3, 5 }, { dtype = dt })
      assert.equal(SIZES[dt], t:element_size(), dt)
      assert.equal(15 * SIZES[dt], t.nbytes, dt)
      -- nbytes of a view counts its own elements, not the storage
      assert.equal(3 * SIZES[dt], t:select(2, 2).nbytes, dt)
      assert.equal(0, fh.zeros({ 0, 4 }, { dtype = dt }).nbytes, dt)
    end
  end)

  it("rejects unknown dtype names and non-string dtypes", function()
    H.expect_error("ValueError", { "fh.zeros: unknown dtype 'float'", "float32", "complex128" }, fh.zeros, { 2 },
      { dtype = "float" })
    H.expect_error("ValueError", "unknown dtype 'Float32'", fh.tensor, { 1 }, { dtype = "Float32" })
    H.expect_error("TypeError", "option 'dtype' expected a dtype name, got number", fh.ones, { 2 }, { dtype = 3 })
  end)

  it("returns Lua numbers, booleans, exact 64-bit cdata and {re, im} pairs from tolist and item", function()
    R.assert_same({ true, false }, fh.tensor({ true, false }):tolist())
    R.assert_same({ 0, 255 }, fh.tensor({ 0, 255 }, { dtype = "uint8" }):tolist())
    R.assert_same({ -2147483648, 2147483647 }, fh.tensor({ -2147483648, 2147483647 }, { dtype = "int32" }):tolist())
    R.assert_same({ 0, 4294967295 }, fh.tensor({ 0, 4294967295 }, { dtype = "uint32" }):tolist())
    R.assert_same({ R.f32(1 / 3) }, fh.tensor({ 1 / 3 }):tolist())
    R.assert_same({ 1 / 3 }, fh.tensor({ 1 / 3 }, { dtype = "float64" }):tolist())
    R.assert_same({ { 1 / 3, -0.25 } }, fh.tensor({ { 1 / 3, -0.25 } }, { dtype = "complex128" }):tolist())
    local i = fh.tensor({ 5LL }):item()
    assert.is_true(R.is_i64(i))
    assert.equal(5LL, i)
    local u = fh.tensor({ 5ULL }):item()
    assert.is_true(R.is_u64(u))
  end)

  it("round-trips uint64 values above 2^53 exactly as ULL cdata", function()
    local vals = { 9007199254740993ULL, 18446744073709551615ULL, 18446744073709551614ULL, 4611686018427387903ULL,
      12345678901234567891ULL }
    local t = fh.tensor(vals)
    local back = t:tolist()
    for k, v in ipairs(vals) do
      assert.is_true(R.is_u64(back[k]))
      assert.is_true(back[k] == v, ("element %d: %s ~= %s"):format(k, tostring(back[k]), tostring(v)))
      assert.is_true(t:select(1, k):item() == v)
    end
    -- through a computation: (2^64 - 1) + 2 wraps to 1
    assert.is_true((t + 2ULL):tolist()[2] == 1ULL)
    -- int64 extremes
    local s = fh.tensor({ -9223372036854775807LL - 1, 9223372036854775807LL, -9007199254740993LL })
    R.assert_same({ -9223372036854775807LL - 1, 9223372036854775807LL, -9007199254740993LL }, s:tolist())
  end)

  it("converts between dtypes with to(dtype)", function()
    local f = fh.tensor({ -1.75, 0.5, 2.25, 300 }, { dtype = "float64" })
    R.assert_same({ -1, 0, 2, 300 }, f:to("int32"):tolist())
    R.assert_same({ -1LL, 0LL, 2LL, 300LL }, f:to("int64"):tolist())
    R.assert_same({ true, true, true, true }, f:to("bool"):tolist())
    R.assert_same({ { -1.75, 0 }, { 0.5, 0 }, { 2.25, 0 }, { 300, 0 } }, f:to("complex128"):tolist())
    -- float -> unsigned saturates at the ends, NaN gives 0
    R.assert_same({ 0, 0, 2, 255 }, f:to("uint8"):tolist())
    R.assert_same({ 0, 0 }, fh.tensor({ 0 / 0, -5 }, { dtype = "float64" }):to("uint32"):tolist())
    -- integer -> integer wraps modulo 2^bits
    R.assert_same({ 255, 0, 1 }, fh.tensor({ -1LL, 256LL, 257LL }):to("uint8"):tolist())
    R.assert_same({ 18446744073709551615ULL }, fh.tensor({ -1LL }):to("uint64"):tolist())
    R.assert_same({ -1LL }, fh.tensor({ 18446744073709551615ULL }):to("int64"):tolist())
    -- same dtype: the tensor itself
    assert.equal(f, f:to("float64"))
    H.expect_error("TypeError", "cannot convert complex128 to float64",
      function() return fh.ones({ 1 }, { dtype = "complex128" }):to("float64") end)
  end)

  it("exposes read-only fields", function()
    local t = fh.zeros({ 2, 3 }, { dtype = "int32" })
    assert.equal(2, t:dim())
    assert.equal(2, t.ndim)
    assert.equal(6, t:numel())
    assert.equal(2, #t)
    assert.same({ 2, 3 }, t:size())
    assert.equal(3, t:size(2))
    assert.equal(1, t:stride(2))
    t.requires_grad = true
    assert.is_true(t.requires_grad)
    assert.equal(t, t:requires_grad_(false))
    assert.is_false(t.requires_grad)
    t:requires_grad_()
    assert.is_true(t.requires_grad)
    H.expect_error("TypeError", "cannot assign field 'shape'", function() t.shape = { 6 } end)
    H.expect_error("TypeError", "requires_grad expected a boolean, got number", function() t.requires_grad = 1 end)
    H.expect_error("TypeError", "Tensor:requires_grad_: argument 1 %(flag%) expected a boolean, got string",
      function() t:requires_grad_("yes") end)
    assert.is_nil(t.no_such_field)
    assert.is_true(fh.is_tensor(t))
    assert.is_false(fh.is_tensor({}))
  end)
end)
