-- copy_ between any strides, dtype conversion in copies, fill_, and copies
-- whose source and destination share memory.
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

describe("copy_", function()
  it("copies a transposed tensor into a contiguous one", function()
    local a = fh.arange(6, { dtype = "int32" }):view(2, 3)
    local c = fh.empty({ 3, 2 }, { dtype = "int32" })
    assert.equal(c, c:copy_(a:transpose(1, 2)))
    assert.same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, c:tolist())
    assert.same({ 2, 1 }, c:stride())
  end)

  it("copies a contiguous tensor into a transposed view, writing the base", function()
    local base = fh.zeros({ 2, 3 }, { dtype = "float64" })
    local src = fh.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { dtype = "float64" })
    base:transpose(1, 2):copy_(src)
    assert.same({ { 1, 3, 5 }, { 2, 4, 6 } }, base:tolist())
  end)

  it("copies between two non-contiguous views of different layouts", function()
    local shape = { 3, 4, 5 }
    local src = fh.tensor(R.fill(shape, function(i) return i end), { dtype = "float64" })
    local dst_base = fh.zeros({ 5, 7, 4 }, { dtype = "float64" })
    -- dst: a 3x4x5 view of a 5x7x4 storage, permuted and narrowed
    local dst = dst_base:narrow(2, 2, 3):permute(2, 3, 1)
    assert.same(shape, dst.shape)
    dst:copy_(src:transpose(1, 1))
    assert.same(src:tolist(), dst:tolist())
    -- elements outside the view are untouched
    local bl = dst_base:tolist()
    for i = 1, 5 do
      for k = 1, 4 do
        assert.equal(0, bl[i][1][k])
        for j = 5, 7 do assert.equal(0, bl[i][j][k]) end
      end
    end
  end)

  it("copies 0-dim, empty and every dtype", function()
    local s = fh.tensor(3.5, { dtype = "float64" })
    fh.zeros({}, { dtype = "float64" }):copy_(s)
    local z = fh.zeros({}, { dtype = "float64" })
    z:copy_(s)
    assert.equal(3.5, z:item())
    fh.zeros({ 0, 2 }):copy_(fh.ones({ 0, 2 }))
    for _, dt in ipairs(fh.dtypes) do
      local src = fh.ones({ 2, 3 }, { dtype = dt }):transpose(1, 2)
      local dst = fh.zeros({ 3, 2 }, { dtype = dt })
      dst:copy_(src)
      assert.is_true(fh.equal(dst, fh.ones({ 3, 2 }, { dtype = dt })), dt)
    end
  end)

  it("converts dtypes while copying", function()
    local f = fh.tensor({ { -1.5, 2.75 }, { 1e10, 0 / 0 } }, { dtype = "float64" })
    local i = fh.zeros({ 2, 2 }, { dtype = "int32" })
    i:copy_(f)
    -- truncation toward zero, saturation, NaN -> 0
    assert.same({ { -1, 2 }, { 2147483647, 0 } }, i:tolist())
    local u = fh.zeros({ 2, 2 }, { dtype = "uint64" }):copy_(f:transpose(1, 2))
    R.assert_same({ { 0ULL, 10000000000ULL }, { 2ULL, 0ULL } }, u:tolist())
    local w = fh.zeros({ 3 }, { dtype = "int32" }):copy_(fh.tensor({ -1LL, 4294967296LL, 2147483648LL }))
    assert.same({ -1, 0, -2147483648 }, w:tolist())
    local c = fh.zeros({ 2 }, { dtype = "complex128" }):copy_(fh.tensor({ 1.5, -2 }, { dtype = "float32" }))
    assert.same({ { 1.5, 0 }, { -2, 0 } }, c:tolist())
    local b = fh.zeros({ 3 }, { dtype = "bool" }):copy_(fh.tensor({ 0, 2, -0.5 }))
    assert.same({ false, true, true }, b:tolist())
    local x = fh.zeros({ 2 }, { dtype = "float32" }):copy_(fh.tensor({ 16777217LL, -3LL }))
    assert.same({ 16777216, -3 }, x:tolist())
  end)

  it("refuses complex -> real and leaves the destination unchanged", function()
    local dst = fh.full({ 2 }, 9, { dtype = "float64" })
    H.expect_error("TypeError", "copy_: cannot copy complex128 into float64", dst.copy_, dst,
      fh.ones({ 2 }, { dtype = "complex128" }))
    assert.same({ 9, 9 }, dst:tolist())
  end)

  it("requires equal shapes, not just equal element counts", function()
    local dst = fh.full({ 2, 3 }, 1)
    H.expect_error("ValueError", "copy_: shape mismatch: 2x3 vs 3x2", dst.copy_, dst, fh.zeros({ 3, 2 }))
    H.expect_error("ValueError", "copy_: shape mismatch: 2x3 vs 6", dst.copy_, dst, fh.zeros({ 6 }))
    H.expect_error("ValueError", "copy_: shape mismatch: 2x3 vs scalar", dst.copy_, dst, fh.zeros({}))
    H.expect_error("TypeError", "Tensor:copy_: argument 1 %(src%) expected a Tensor, got table", dst.copy_, dst, { 1, 2 })
    H.expect_error("ValueError", "unknown option 'blocking'", dst.copy_, dst, fh.zeros({ 2, 3 }), { blocking = true })
    assert.same({ { 1, 1, 1 }, { 1, 1, 1 } }, dst:tolist())
  end)

  it("reads a snapshot when source and destination overlap", function()
    -- contiguous overlap (shift right by one)
    local e = fh.arange(6, { dtype = "float64" })
    e:narrow(1, 2, 5):copy_(e:narrow(1, 1, 5))
    assert.same({ 0, 0, 1, 2, 3, 4 }, e:tolist())
    -- strided overlap: columns 2..4 <- columns 1..3 of a 4x4 tensor, through transposes
    local a = fh.arange(16, { dtype = "float64" }):view(4, 4)
    local before = a:tolist()
    a:transpose(1, 2):narrow(1, 2, 3):copy_(a:transpose(1, 2):narrow(1, 1, 3))
    local want = {}
    for i = 1, 4 do
      want[i] = { before[i][1], before[i][1], before[i][2], before[i][3] }
    end
    assert.same(want, a:tolist())
    -- a transpose copied onto itself
    local s = fh.arange(9, { dtype = "int64" }):view(3, 3)
    local sl = s:tolist()
    s:copy_(s:transpose(1, 2))
    for i = 1, 3 do
      for j = 1, 3 do assert.equal(sl[j][i], s:tolist()[i][j]) end
    end
  end)
end)

describe("fill_", function()
  it("fills views through their strides and returns self", function()
    local a = fh.zeros({ 3, 4 }, { dtype = "int32" })
    assert.equal(a, a:fill_(1))
    a:transpose(1, 2):narrow(1, 2, 2):fill_(7)
    assert.same({ { 1, 7, 7, 1 }, { 1, 7, 7, 1 }, { 1, 7, 7, 1 } }, a:tolist())
  end)

  it("converts the value and rejects values outside the dtype", function()
    local u = fh.zeros({ 2 }, { dtype = "uint64" })
    u:fill_(18446744073709551615ULL)
    R.assert_same({ 18446744073709551615ULL, 18446744073709551615ULL }, u:tolist())
    local c = fh.zeros({ 1 }, { dtype = "complex128" }):fill_({ 1, -1 })
    assert.same({ { 1, -1 } }, c:tolist())
    local b = fh.zeros({ 1 }, { dtype = "bool" }):fill_(true)
    assert.same({ true }, b:tolist())
    local i = fh.full({ 2 }, 3, { dtype = "int32" })
    H.expect_error("ValueError", "2147483648 is out of range for int32", i.fill_, i, 2147483648)
    H.expect_error("ValueError", "0.5 is not an integer", i.fill_, i, 0.5)
    H.expect_error("TypeError", "complex value cannot be stored as int32", i.fill_, i, { 1, 2 })
    H.expect_error("TypeError", "Tensor:fill_: argument 1 %(value%) expected a number, got string", i.fill_, i, "3")
    assert.same({ 3, 3 }, i:tolist())
  end)
end)
