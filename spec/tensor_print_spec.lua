-- tostring(t) like Torch7: the values (abbreviated with "..." when large),
-- then a footer with dtype, size, strides and device.
local fh = require "fhelium"

local function lines(s)
  local r = {}
  for l in (s .. "\n"):gmatch("(.-)\n") do r[#r + 1] = l end
  return r
end

describe("tostring(tensor)", function()
  it("prints the acceptance example: a 3x2 uint64 view with strides {1,3}", function()
    local t = fh.arange(6, { dtype = "uint64" }):view({ 2, 3 }):transpose(1, 2)
    assert.equal(" 0 3\n 1 4\n 2 5\n[fhelium.Tensor uint64 of size 3x2 (strides 1,3) on cpu]", tostring(t))
  end)

  it("prints floating matrices with four decimals in aligned columns", function()
    local t = fh.tensor({ { 1.5, 2 }, { 3, -4 } }, { dtype = "float64" })
    assert.equal("  1.5000  2.0000\n  3.0000 -4.0000\n[fhelium.Tensor float64 of size 2x2 (strides 2,1) on cpu]",
      tostring(t))
    -- integral values print as integers
    assert.equal(" 1 2\n 3 4\n[fhelium.Tensor float32 of size 2x2 (strides 2,1) on cpu]",
      tostring(fh.tensor({ { 1, 2 }, { 3, 4 } })))
    -- a wide range of magnitudes switches to exponent notation
    assert.equal(" 1.0000e-07\n 1.0000e+00\n[fhelium.Tensor float64 of size 2 (strides 1) on cpu]",
      tostring(fh.tensor({ 1e-7, 1 }, { dtype = "float64" })))
  end)

  it("prints vectors one element per line", function()
    assert.equal("  -1\n   0\n 100\n[fhelium.Tensor int32 of size 3 (strides 1) on cpu]",
      tostring(fh.tensor({ -1, 0, 100 }, { dtype = "int32" })))
    assert.equal("  true\n false\n[fhelium.Tensor bool of size 2 (strides 1) on cpu]",
      tostring(fh.tensor({ true, false })))
  end)

  it("prints NaN and infinities", function()
    local t = fh.tensor({ 0, 1, -1, 0.5 }, { dtype = "float64" }) / fh.tensor({ 0, 0, 0, 1 }, { dtype = "float64" })
    assert.equal("    nan\n    inf\n   -inf\n 0.5000\n[fhelium.Tensor float64 of size 4 (strides 1) on cpu]", tostring(t))
  end)

  it("prints 0-dim tensors as the value and a scalar footer", function()
    assert.equal("2.5000\n[fhelium.Tensor float32 of size scalar on cpu]", tostring(fh.tensor(2.5)))
    assert.equal("7\n[fhelium.Tensor int64 of size scalar on cpu]", tostring(fh.tensor(7LL)))
  end)

  it("prints empty tensors with their shape and strides", function()
    assert.equal("[empty tensor]\n[fhelium.Tensor float32 of size 0x3 (strides 3,1) on cpu]", tostring(fh.zeros({ 0, 3 })))
    assert.equal("[empty tensor]\n[fhelium.Tensor int64 of size 0 (strides 1) on cpu]",
      tostring(fh.tensor({}, { dtype = "int64" })))
  end)

  it("prints complex values as a+bi", function()
    local c = fh.tensor({ { 1, 2 }, { 3, -4.5 } }, { dtype = "complex128" })
    assert.equal(" 1.0000+2.0000i\n 3.0000-4.5000i\n[fhelium.Tensor complex128 of size 2 (strides 1) on cpu]", tostring(c))
    assert.equal("0-1i\n[fhelium.Tensor complex128 of size scalar on cpu]",
      tostring(fh.tensor({ 0, -1 }, { dtype = "complex128" })))
  end)

  it("prints 64-bit integers exactly, without the LL/ULL suffix", function()
    assert.equal(" 18446744073709551615\n                    1\n[fhelium.Tensor uint64 of size 2 (strides 1) on cpu]",
      tostring(fh.tensor({ 18446744073709551615ULL, 1ULL })))
    assert.equal(" -9223372036854775808\n     9007199254740993\n[fhelium.Tensor int64 of size 2 (strides 1) on cpu]",
      tostring(fh.tensor({ -9223372036854775807LL - 1, 9007199254740993LL })))
  end)

  it("prints higher dimensions as Torch7 slices", function()
    local t = fh.arange(12, { dtype = "int32" }):view(2, 3, 2)
    assert.equal(table.concat({
      "(1,.,.) = ", "  0  1", "  2  3", "  4  5", "",
      "(2,.,.) = ", "  6  7", "  8  9", " 10 11", "",
      "[fhelium.Tensor int32 of size 2x3x2 (strides 6,2,1) on cpu]" }, "\n"), tostring(t))
    local p = tostring(fh.zeros({ 1, 2, 1, 1 }, { dtype = "uint8" }))
    assert.equal("(1,1,.,.) = ", lines(p)[1])
    assert.equal("(1,2,.,.) = ", lines(p)[4])
  end)

  it("abbreviates large tensors with ... and keeps three elements at each end", function()
    local v = tostring(fh.arange(2000))
    assert.same({ "    0", "    1", "    2", "  ...", " 1997", " 1998", " 1999",
      "[fhelium.Tensor float32 of size 2000 (strides 1) on cpu]" }, lines(v))
    local m = lines(tostring(fh.arange(2000, { dtype = "int32" }):view(40, 50):transpose(1, 2)))
    assert.equal(8, #m)
    assert.equal("    0   50  100 ... 1850 1900 1950", m[1])
    assert.equal(" ...", m[4])
    assert.equal("   49   99  149 ... 1899 1949 1999", m[7])
    assert.equal("[fhelium.Tensor int32 of size 50x40 (strides 1,50) on cpu]", m[8])
    local c = lines(tostring(fh.arange(5000, { dtype = "int64" }):view(10, 10, 50)))
    assert.equal("(1,.,.) = ", c[1])
    assert.equal("    0    1    2 ...   47   48   49", c[2])
    local gap
    for i, l in ipairs(c) do
      if l == "..." then gap = i end
    end
    assert.is_truthy(gap)
    assert.equal("(8,.,.) = ", c[gap + 2])
    assert.equal(" 4950 4951 4952 ... 4997 4998 4999", c[#c - 2])
  end)

  it("does not abbreviate up to 1000 elements", function()
    local l = lines(tostring(fh.arange(1000)))
    assert.equal(1001, #l)
    assert.equal(" 999", l[1000])
  end)

  it("prints sizes and strides above 2^53 as integers", function()
    local s = tostring(fh.empty({ 0, 2 ^ 50, 32 }))
    assert.equal("[fhelium.Tensor float32 of size 0x1125899906842624x32 (strides 36028797018963968,32,1) on cpu]",
      lines(s)[2])
  end)

  it("prints through print() and the pretty printer", function()
    assert.equal(tostring(fh.ones({ 2 })), fh.pretty.value(fh.ones({ 2 })))
  end)
end)
