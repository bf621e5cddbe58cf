-- Every error path of the tensor surface raises an error object of the
-- right kind whose message names the function, the argument and the values.
local fh = require "fhelium"
local H = require "spec.helpers"

describe("tensor errors", function()
  local t = fh.zeros({ 2, 3 })

  it("are error objects with kind, message and tostring", function()
    local err = H.expect_error("ValueError", "unknown dtype", fh.zeros, { 2 }, { dtype = "half" })
    assert.equal("ValueError", err.kind)
    assert.equal("ValueError: " .. err.message, tostring(err))
    assert.is_nil(err.path)
    assert.is_true(fh.errors.is(err, "FHEliumError"))
    assert.is_false(fh.errors.is(err, "TypeError"))
  end)

  it("reject unknown dtype names everywhere a dtype is taken", function()
    for _, f in ipairs({
      function() return fh.tensor({ 1 }, { dtype = "float16" }) end,
      function() return fh.empty({ 1 }, { dtype = "float16" }) end,
      function() return fh.zeros({ 1 }, { dtype = "float16" }) end,
      function() return fh.ones({ 1 }, { dtype = "float16" }) end,
      function() return fh.full({ 1 }, 0, { dtype = "float16" }) end,
      function() return fh.arange(3, { dtype = "float16" }) end,
      function() return fh.rand({ 1 }, { dtype = "float16" }) end,
      function() return fh.randn({ 1 }, { dtype = "float16" }) end,
    }) do
      H.expect_error("ValueError", { "unknown dtype 'float16'", "expected one of bool, uint8" }, f)
    end
    H.expect_error("ValueError", "invalid device string 'float16'", t.to, t, "float16")
  end)

  it("reject malformed device strings with a ValueError and unavailable devices with a CudaError", function()
    for _, d in ipairs({ "gpu", "cuda:", "cuda:-1", "cuda:01", "cuda:1x", "CPU", "", "cuda:1024", " cpu", "cpu:0" }) do
      H.expect_error("ValueError", { "fh.zeros: invalid device string '" .. d:gsub("%p", "%%%0") .. "'",
        'expected "cpu", "cuda" or "cuda:N"' }, fh.zeros, { 2 }, { device = d })
    end
    H.expect_error("ValueError", "Tensor:to: invalid device string 'gpu'", t.to, t, "gpu")
    H.expect_error("TypeError", "option 'device' expected a device string, got number", fh.zeros, { 2 }, { device = 0 })
    H.expect_error("TypeError", "Tensor:to: argument 1 %(device or dtype%) expected a device or dtype string, got number", t.to, t, 5)
    if not fh.cuda.is_available() then
      H.expect_error("CudaError", "cuda:7 requested but CUDA is not available", fh.zeros, { 2 }, { device = "cuda:7" })
    end
  end)

  it("reject negative, fractional and oversized shapes", function()
    H.expect_error("ValueError", "fh.zeros: shape%[2%] must be a non%-negative integer, got %-3", fh.zeros, { 2, -3 })
    H.expect_error("ValueError", "fh.empty: size must be an integer in %[0, %d+%], got %-3", fh.empty, 2, -3)
    H.expect_error("ValueError", "fh.zeros: shape%[1%] must be a non%-negative integer, got %-1", fh.zeros, { -1 })
    H.expect_error("ValueError", "shape%[1%] must be a non%-negative integer, got 2.5", fh.ones, { 2.5 })
    H.expect_error("ValueError", "shape%[1%] = 1e%+30 is too large", fh.ones, { 1e30 })
    H.expect_error("ValueError", "fh.rand: shape%[1%] must be a non%-negative integer, got %-2", fh.rand, { -2 })
    H.expect_error("TypeError", "shape%[1%] expected an integer, got string", fh.zeros, { "2" })
    H.expect_error("TypeError", "argument 1 %(shape%) expected a table of sizes, got string", fh.zeros, "2")
    H.expect_error("TypeError", "argument 1 %(shape%) expected a table of sizes, got nil", fh.ones, nil)
    H.expect_error("ValueError", "at most 16 dimensions, got 17", fh.zeros, { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 })
    H.expect_error("ValueError", "fh.zeros: at most 16 dimensions", fh.zeros, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
  end)

  it("reject out-of-range dimensions and indices, 1-based", function()
    H.expect_error("ValueError", "Tensor:transpose: dimension 3 out of range for a 2%-dimensional tensor %(expected 1..2%)",
      t.transpose, t, 1, 3)
    H.expect_error("ValueError", "Tensor:transpose: dimension 0 out of range", t.transpose, t, 0, 1)
    H.expect_error("ValueError", "dimension %-1 out of range", t.transpose, t, -1, 1)
    H.expect_error("ValueError", "Tensor:transpose: dimension must be an integer, got 1.5", t.transpose, t, 1.5, 1)
    H.expect_error("ValueError", "Tensor:narrow: dimension 3 out of range", t.narrow, t, 3, 1, 1)
    H.expect_error("ValueError", "Tensor:select: dimension 0 out of range", t.select, t, 0, 1)
    H.expect_error("ValueError", "Tensor:permute: dimension 3 out of range", t.permute, t, 3, 1)
    H.expect_error("ValueError", "select: index 3 out of range for dimension 1 of size 2", t.select, t, 1, 3)
    H.expect_error("ValueError", "Tensor:select: index 0 out of range for dimension 2 of size 3 %(indices are 1%-based%)",
      t.select, t, 2, 0)
    H.expect_error("ValueError", "narrow: start 3 and length 2 out of range for dimension 2 of size 3", t.narrow, t, 2, 3, 2)
    H.expect_error("ValueError", "Tensor:narrow: start 0 out of range %(indices are 1%-based%)", t.narrow, t, 2, 0, 1)
    H.expect_error("ValueError", "Tensor:size: dim must be an integer in %[1, 2%], got 3", t.size, t, 3)
    H.expect_error("ValueError", "Tensor:stride: dim must be an integer in %[1, 2%], got 0", t.stride, t, 0)
    local s = fh.tensor(1)
    H.expect_error("ValueError", "Tensor:size: a 0%-dimensional tensor has no dimension 1", s.size, s, 1)
    H.expect_error("ValueError", "Tensor:stride: a 0%-dimensional tensor has no dimension 1", s.stride, s, 1)
    H.expect_error("ValueError", "Tensor:item: expected a tensor with one element, got 6 elements", t.item, t)
    H.expect_error("ValueError", "got 0 elements", fh.zeros({ 0 }).item, fh.zeros({ 0 }))
  end)

  it("reject unknown option keys and non-table options", function()
    H.expect_error("ValueError", "fh.tensor: unknown option 'dype' %(expected dtype, device, requires_grad, pin_memory%)",
      fh.tensor, { 1 }, { dype = "int32" })
    H.expect_error("ValueError", "fh.zeros: unknown option 'pinned'", fh.zeros, { 1 }, { pinned = true })
    H.expect_error("ValueError", "fh.rand: unknown option 'seed' %(expected dtype, device, requires_grad, pin_memory, generator%)",
      fh.rand, { 1 }, { seed = 1 })
    H.expect_error("ValueError", "Tensor:copy_: unknown option 'async'", t.copy_, t, t, { async = true })
    H.expect_error("ValueError", "Tensor:to: unknown option 'foo' %(expected non_blocking, stream%)", t.to, t, "cpu", { foo = 1 })
    H.expect_error("ValueError", "fh.zeros: option keys must be strings, got number", fh.zeros, { 2 }, { dtype = "float32", 5 })
    H.expect_error("TypeError", "fh.zeros: argument 2 %(options%) expected an options table, got string", fh.zeros, { 2 }, "float64")
    H.expect_error("TypeError", "expected an options table, got Tensor", fh.tensor, { 1 }, t)
  end)

  it("reject wrong argument types with the function and argument named", function()
    -- methods count arguments as written (t:narrow(d, start, length)): self is not one
    H.expect_error("TypeError", "Tensor:view: self expected a Tensor, got number", t.view, 5, 2)
    H.expect_error("TypeError", "Tensor:numel: self expected a Tensor, got table", t.numel, {})
    H.expect_error("TypeError", "Tensor:transpose: argument 1 %(dim%) expected an integer, got string", t.transpose, t, "1", 2)
    H.expect_error("TypeError", "Tensor:narrow: argument 3 %(length%) expected an integer, got no value", t.narrow, t, 1, 1)
    H.expect_error("TypeError", "Tensor:copy_: argument 1 %(src%) expected a Tensor, got nil", t.copy_, t, nil)
    H.expect_error("TypeError", "option 'non_blocking' expected a boolean, got number", t.copy_, t, t, { non_blocking = 1 })
    H.expect_error("TypeError", "option 'stream' expected a Stream, got number", t.copy_, t, t, { stream = 1 })
    H.expect_error("TypeError", "fh.full: argument 2 %(value%) expected a number", fh.full, { 2 }, "x")
    H.expect_error("TypeError", "fh.arange: argument 1 %(n%) expected a number, got no value", fh.arange)
    H.expect_error("TypeError", "fh.arange: argument 2 %(options%) expected an options table, got string", fh.arange, 1, "5")
    H.expect_error("TypeError", "fh.arange: argument 3 %(options%) expected an options table, got string", fh.arange, 1, 5, "1")
    H.expect_error("ValueError", "Tensor:cuda: device must be an integer in %[0, 1023%], got %-1", t.cuda, t, -1)
    H.expect_error("TypeError", "fh.equal: argument 2 %(b%) expected a Tensor, got no value", fh.equal, t)
    H.expect_error("TypeError", "fh.max_abs_diff: argument 1 %(a%) expected a Tensor, got string", fh.max_abs_diff, "a", t)
    H.expect_error("TypeError", "cannot assign field 'dtype' of a Tensor", function() t.dtype = "int32" end)
  end)

  it("reject shape, dtype and device mismatches", function()
    H.expect_error("ValueError", "add: shape mismatch: 2x3 and 4 do not broadcast", function() return t + fh.zeros({ 4 }) end)
    H.expect_error("TypeError", "sub: dtype mismatch %(float32 and int32%)", function() return t - fh.zeros({ 2, 3 }, { dtype = "int32" }) end)
    H.expect_error("ValueError", "copy_: shape mismatch: 2x3 vs 3", t.copy_, t, fh.zeros({ 3 }))
    H.expect_error("ValueError", "allclose: shape mismatch", fh.allclose, t, fh.zeros({ 3 }))
    H.expect_error("TypeError", "allclose: dtype mismatch", fh.allclose, t, t:to("float64"))
    H.expect_error("ValueError", "view: shape of 5 elements is invalid for a tensor of 6 elements", t.view, t, 5)
  end)

  it("reject malformed nested data, generators, 0-d indexing and bad view arguments", function()
    local deep = { 1 }
    for _ = 1, 20 do deep = { deep } end
    H.expect_error("ValueError", "fh.tensor: data is nested deeper than 16 dimensions", fh.tensor, deep)
    H.expect_error("ValueError", "fh.tensor: data%[2%] is not a table but the data has 2 nested dimensions %(ragged "
      .. "nested tables", fh.tensor, { { 1, 2 }, 3 })
    H.expect_error("TypeError", "fh.tensor: data%[2%] is not a list %(it has keys other than 1..2%)", fh.tensor,
      { { 1, 2 }, { 1, 2, x = 3 } })
    H.expect_error("TypeError", "fh.tensor: argument 1 %(data%) is missing", fh.tensor)
    H.expect_error("TypeError", "fh.tensor: data%[2%]%[1%] expected a number, boolean or int64/uint64 cdata, got string",
      fh.tensor, { { 1 }, { "a" } })
    local dims = {}
    for i = 1, 17 do dims[i] = 1 end
    H.expect_error("ValueError", "fh.empty: at most 16 dimensions, got 17", fh.empty, dims)
    H.expect_error("TypeError", "fh.Generator: seed expected an integer, got string", fh.Generator, "x")
    H.expect_error("TypeError", "Generator:seed: expected a Generator", fh.Generator(1).seed, 5)
    H.expect_error("TypeError", "fh.randn: option 'generator' expected a Generator, got number", fh.randn, { 2 },
      { generator = 5 })
    local z = fh.tensor(3.0)
    H.expect_error("ValueError", "a 0%-dimensional tensor cannot be indexed", function() return z[1] end)
    local v = fh.ones({ 2 })
    H.expect_error("ValueError", "Tensor:expand: %-1 is not allowed for new leading dimension 1", v.expand, v, -1, 2)
    local many = {}
    for i = 1, 20 do many[i] = i end
    H.expect_error("ValueError", "Tensor:permute: too many dimensions", function() return v:permute(unpack(many)) end)
    H.expect_error("TypeError", "fh.add: option 'out' expected a Tensor, got number", fh.add, v, v, { out = 5 })
    H.expect_error("ValueError", 'fh.ones: pin_memory=true requires device "cpu"', fh.ones, { 2 },
      { pin_memory = true, device = "cuda:0" })
    H.expect_error("ValueError", "fh.empty: shape%[1%] = 10000000000000000 is too large %(sizes must be below 9e15%)",
      fh.empty, { 1e16 })
  end)
end)
