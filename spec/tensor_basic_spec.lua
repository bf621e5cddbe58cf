local fh = require "fhelium"
local H = require "spec.helpers"

describe("tensor basics", function()
  it("creates from nested tables with shape, dtype and device", function()
    local t = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.same({ 2, 3 }, t.shape)
    assert.equal("float32", t.dtype)
    assert.equal("cpu", t.device)
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:tolist())
  end)

  it("transposes a uint64 view keeping real strides", function()
    local t = fh.arange(6, { dtype = "uint64" }):view({ 2, 3 }):transpose(1, 2)
    assert.same({ 3, 2 }, t.shape)
    assert.same({ 1, 3 }, t:stride())
    assert.equal(3ULL, t:tolist()[1][2])
  end)

  it("rejects a bad device string with a ValueError", function()
    H.expect_error("ValueError", "invalid device string 'gpu'", fh.zeros, { 2 }, { device = "gpu" })
  end)
end)
