-- Element-wise arithmetic checked against values computed in the spec:
-- operators, scalars on either side, broadcasting, in-place and out=
-- forms, integer wrap-around, and the errors.
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

local OPS = {
  add = function(x, y) return x + y end,
  sub = function(x, y) return x - y end,
  mul = function(x, y) return x * y end,
  div = function(x, y) return x / y end,
}
local OPERATOR = {
  add = function(a, b) return a + b end,
  sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end,
  div = function(a, b) return a / b end,
}

-- random float data with a fixed seed per call site
local function rand_list(shape, lo, hi)
  return R.fill(shape, function() return lo + (hi - lo) * math.random() end)
end

-- expected flat values of `op` on float64/float32 nested lists
local function expect_float(op, la, sa, lb, sb, dtype)
  local round = dtype == "float32" and R.f32 or function(x) return x end
  local fa, fb = R.flatten(la, sa), R.flatten(lb, sb)
  for i, v in ipairs(fa) do fa[i] = round(v) end
  for i, v in ipairs(fb) do fb[i] = round(v) end
  local flat, shape = R.broadcast_map(fa, sa, fb, sb, function(x, y) return round(OPS[op](x, y)) end)
  return R.unflatten(flat, shape), shape
end

describe("arithmetic on floating tensors", function()
  local seed = H.seed("tensor_arith")

  for _, dtype in ipairs({ "float32", "float64" }) do
    for _, op in ipairs({ "add", "sub", "mul", "div" }) do
      it(("%s %s with broadcasting matches Lua exactly"):format(dtype, op), function()
        math.randomseed(seed)
        local cases = {
          { { 2, 3 }, { 2, 3 } }, { { 2, 3 }, { 3 } }, { { 2, 1 }, { 1, 3 } }, { { 4, 1, 3 }, { 2, 1 } },
          { {}, { 2, 3 } }, { { 3, 1 }, {} }, { { 0, 3 }, { 3 } }, { { 5 }, { 1 } },
        }
        for _, c in ipairs(cases) do
          local sa, sb = c[1], c[2]
          local la, lb = rand_list(sa, -10, 10), rand_list(sb, 0.5, 8)
          -- view: an empty list alone cannot say {0, 3}
          local a = fh.tensor(la, { dtype = dtype }):view(sa)
          local b = fh.tensor(lb, { dtype = dtype }):view(sb)
          local want, shape = expect_float(op, la, sa, lb, sb, dtype)
          local got = OPERATOR[op](a, b)
          assert.same(shape, got.shape)
          assert.equal(dtype, got.dtype)
          R.assert_same(want, got:tolist(), op .. " operator")
          R.assert_same(want, fh[op](a, b):tolist(), "fh." .. op)
        end
      end)
    end

    it(dtype .. " scalars on either side", function()
      math.randomseed(seed + 1)
      local la = rand_list({ 2, 3 }, 1, 5)
      local a = fh.tensor(la, { dtype = dtype })
      local s = 2.5
      for op, f in pairs(OPS) do
        local right = expect_float(op, la, { 2, 3 }, { s }, { 1 }, dtype)
        local left = expect_float(op, { s }, { 1 }, la, { 2, 3 }, dtype)
        R.assert_same(right, OPERATOR[op](a, s):tolist(), op .. " tensor-scalar")
        R.assert_same(left, OPERATOR[op](s, a):tolist(), op .. " scalar-tensor")
        R.assert_same(right, fh[op](a, s):tolist())
        R.assert_same(left, fh[op](s, a):tolist())
        assert.is_truthy(f)
      end
      local neg = R.fill({ 2, 3 }, function(i) return -R.flatten(a:tolist(), { 2, 3 })[i] end)
      R.assert_same(neg, (-a):tolist())
      R.assert_same(neg, fh.neg(a):tolist())
    end)
  end

  it("follows IEEE rules for division by zero and NaN", function()
    local a = fh.tensor({ 1, -1, 0 }, { dtype = "float64" })
    local r = (a / 0):tolist()
    assert.equal(math.huge, r[1])
    assert.equal(-math.huge, r[2])
    assert.is_true(r[3] ~= r[3])
  end)

  it("works on non-contiguous operands", function()
    local a = fh.arange(12, { dtype = "float64" }):view(3, 4)
    local t = a:transpose(1, 2) -- 4x3
    local n = a:narrow(2, 2, 3) -- 3x3, strides {4, 1}
    local al = a:tolist()
    local got = (t:narrow(1, 1, 3) * n):tolist()
    for i = 1, 3 do
      for j = 1, 3 do assert.equal(al[j][i] * al[i][j + 1], got[i][j]) end
    end
    -- broadcast a selected column
    local col = a:select(2, 1):view(3, 1)
    local got2 = (a - col):tolist()
    for i = 1, 3 do
      for j = 1, 4 do assert.equal(al[i][j] - al[i][1], got2[i][j]) end
    end
  end)
end)

describe("complex128 arithmetic", function()
  it("adds, subtracts, multiplies and divides (re, im) pairs", function()
    local la = { { 1, 2 }, { -3, 0.5 }, { 0, -1 } }
    local lb = { { 2, -1 }, { 0.25, 4 }, { 3, 3 } }
    local a = fh.tensor(la, { dtype = "complex128" })
    local b = fh.tensor(lb, { dtype = "complex128" })
    local function cmul(x, y) return { x[1] * y[1] - x[2] * y[2], x[1] * y[2] + x[2] * y[1] } end
    local function cdiv(x, y)
      local d = y[1] * y[1] + y[2] * y[2]
      return { (x[1] * y[1] + x[2] * y[2]) / d, (x[2] * y[1] - x[1] * y[2]) / d }
    end
    local want = { add = {}, sub = {}, mul = {}, div = {} }
    for i = 1, 3 do
      local x, y = la[i], lb[i]
      want.add[i] = { x[1] + y[1], x[2] + y[2] }
      want.sub[i] = { x[1] - y[1], x[2] - y[2] }
      want.mul[i] = cmul(x, y)
      want.div[i] = cdiv(x, y)
    end
    for op in pairs(OPS) do
      local got = fh.tensor(want[op], { dtype = "complex128" })
      assert.is_true(fh.allclose(OPERATOR[op](a, b), got, { rtol = 1e-15, atol = 0 }), op)
    end
    -- scalars: a real number or a {re, im} pair
    assert.same({ { 2, 2 }, { -2, 0.5 }, { 1, -1 } }, (a + 1):tolist())
    assert.same({ { -2, 1 } }, (fh.tensor({ { 1, 2 } }, { dtype = "complex128" }) * { 0, 1 }):tolist())
    assert.same({ { -1, -2 }, { 3, -0.5 }, { 0, 1 } }, (-a):tolist())
  end)
end)

describe("integer arithmetic", function()
  local seed = H.seed("tensor_arith_int")
  local RANGES = {
    uint8 = { 0, 255 }, int32 = { -2147483648, 2147483647 }, uint32 = { 0, 4294967295 },
  }

  for _, dtype in ipairs({ "uint8", "int32", "uint32" }) do
    it(dtype .. " add/sub/mul wrap modulo 2^bits", function()
      math.randomseed(seed)
      local lo, hi = RANGES[dtype][1], RANGES[dtype][2]
      local la = R.fill({ 4, 5 }, function() return math.random(lo, hi) end)
      local lb = R.fill({ 5 }, function() return math.random(lo, hi) end)
      la[1][1], lb[1] = hi, hi -- force overflow at least once
      local a, b = fh.tensor(la, { dtype = dtype }), fh.tensor(lb, { dtype = dtype })
      for _, op in ipairs({ "add", "sub", "mul" }) do
        local flat = R.broadcast_map(R.flatten(la, { 4, 5 }), { 4, 5 }, lb, { 5 }, function(x, y)
          return R.wrap(OPS[op](1LL * x, 1LL * y), dtype)
        end)
        R.assert_same(R.unflatten(flat, { 4, 5 }), OPERATOR[op](a, b):tolist(), dtype .. " " .. op)
      end
      local neg = R.fill({ 4, 5 }, function(i) return R.wrap(-1LL * R.flatten(la, { 4, 5 })[i], dtype) end)
      R.assert_same(neg, (-a):tolist(), dtype .. " neg")
    end)
  end

  for _, dtype in ipairs({ "int64", "uint64" }) do
    it(dtype .. " add/sub/mul wrap modulo 2^64, exactly", function()
      math.randomseed(seed + 7)
      local function rnd()
        local u = R.rand_u64()
        if dtype == "int64" then return R.i64(u) end
        return u
      end
      local la = R.fill({ 3, 4 }, rnd)
      local lb = R.fill({ 4 }, rnd)
      local a, b = fh.tensor(la, { dtype = dtype }), fh.tensor(lb, { dtype = dtype })
      for _, op in ipairs({ "add", "sub", "mul" }) do
        local flat = R.broadcast_map(R.flatten(la, { 3, 4 }), { 3, 4 }, lb, { 4 }, function(x, y)
          return OPS[op](x, y) -- LuaJIT 64-bit cdata arithmetic wraps
        end)
        R.assert_same(R.unflatten(flat, { 3, 4 }), OPERATOR[op](a, b):tolist(), dtype .. " " .. op)
      end
      local neg = R.fill({ 3, 4 }, function(i) return -R.flatten(la, { 3, 4 })[i] end)
      R.assert_same(neg, (-a):tolist(), dtype .. " neg")
    end)
  end

  it("wraps at the edges", function()
    R.assert_same({ 4, 13 }, (fh.tensor({ 250, 3 }, { dtype = "uint8" }) + 10):tolist())
    R.assert_same({ 254 }, (fh.tensor({ 1 }, { dtype = "uint8" }) - 3):tolist())
    R.assert_same({ -2147483648 }, (fh.tensor({ 2147483647 }, { dtype = "int32" }) + 1):tolist())
    R.assert_same({ -9223372036854775807LL - 1 }, (fh.tensor({ 9223372036854775807LL }) + 1):tolist())
    R.assert_same({ -9223372036854775807LL - 1 }, (-fh.tensor({ -9223372036854775807LL - 1 })):tolist())
    R.assert_same({ 18446744073709551615ULL }, (fh.tensor({ 0ULL }) - 1):tolist())
    R.assert_same({ 0ULL }, (fh.tensor({ 9223372036854775808ULL }) * 2):tolist())
    R.assert_same({ 18446744073709551615ULL }, (-fh.tensor({ 1ULL })):tolist())
    -- (7ULL - t would run LuaJIT's cdata arithmetic, which does not know tensors)
    R.assert_same({ 5ULL }, fh.sub(7ULL, fh.tensor({ 2ULL })):tolist())
    R.assert_same({ 1ULL }, (fh.tensor({ 3ULL }) - 2ULL):tolist())
  end)

  it("refuses integer division and bool arithmetic with a TypeError", function()
    for _, dt in ipairs({ "uint8", "int32", "int64", "uint32", "uint64" }) do
      local a = fh.ones({ 2 }, { dtype = dt })
      H.expect_error("TypeError", "div: integer division is not supported for " .. dt, function() return a / a end)
      H.expect_error("TypeError", "integer division", function() return a / 2 end)
      H.expect_error("TypeError", "integer division", function() return 2 / a end)
      H.expect_error("TypeError", "integer division", a.div_, a, a)
    end
    local b = fh.tensor({ true, false })
    for op, f in pairs(OPERATOR) do
      H.expect_error("TypeError", op .. ": arithmetic is not defined for bool tensors", f, b, b)
    end
    H.expect_error("TypeError", "neg: arithmetic is not defined for bool tensors", function() return -b end)
  end)

  it("requires scalars to fit the dtype", function()
    local u8 = fh.tensor({ 1 }, { dtype = "uint8" })
    H.expect_error("ValueError", { "add: scalar operand", "300 is out of range for uint8" }, function() return u8 + 300 end)
    H.expect_error("ValueError", { "scalar operand", "1.5 is not an integer" }, function() return u8 + 1.5 end)
    H.expect_error("ValueError", { "%-1 is out of range for uint64" }, function() return fh.tensor({ 1ULL }) + (-1) end)
    H.expect_error("TypeError", "complex value cannot be stored as float32", function() return fh.ones({ 1 }) + { 1, 2 } end)
  end)
end)

describe("in-place and out= forms", function()
  it("add_/sub_/mul_/div_/neg_ update self and return it", function()
    local la = { { 1, 2, 3 }, { 4, 5, 6 } }
    local x = fh.tensor(la, { dtype = "float64" })
    local b = fh.tensor({ 10, 20, 30 }, { dtype = "float64" })
    local ptr = x:data_ptr()
    assert.equal(x, x:add_(b))
    assert.equal(x, x:mul_(2))
    assert.equal(x, x:sub_(1))
    assert.equal(x, x:div_(4))
    assert.equal(x, x:neg_())
    assert.equal(ptr, x:data_ptr())
    local want = {}
    for i = 1, 2 do
      want[i] = {}
      for j = 1, 3 do want[i][j] = -(((la[i][j] + b:tolist()[j]) * 2 - 1) / 4) end
    end
    assert.same(want, x:tolist())
  end)

  it("in place on a view writes the base", function()
    local a = fh.zeros({ 3, 3 }, { dtype = "int32" })
    a:transpose(1, 2):select(1, 2):add_(fh.tensor({ 1, 2, 3 }, { dtype = "int32" }))
    assert.same({ { 0, 1, 0 }, { 0, 2, 0 }, { 0, 3, 0 } }, a:tolist())
  end)

  it("in place cannot broadcast self", function()
    local x = fh.ones({ 3 }, { dtype = "float64" })
    H.expect_error("ValueError", "add: out has shape 3, expected 2x3", x.add_, x, fh.ones({ 2, 3 }, { dtype = "float64" }))
    assert.same({ 1, 1, 1 }, x:tolist())
  end)

  it("fh.add(a, b, {out=c}) writes c and returns it", function()
    local a = fh.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float64" })
    local b = fh.tensor({ 10, 20, 30 }, { dtype = "float64" })
    local c = fh.zeros({ 2, 3 }, { dtype = "float64" })
    for op, f in pairs(OPS) do
      local r = fh[op](a, b, { out = c })
      assert.equal(c, r)
      local want = {}
      for i = 1, 2 do
        want[i] = {}
        for j = 1, 3 do want[i][j] = f(a:tolist()[i][j], b:tolist()[j]) end
      end
      assert.same(want, c:tolist(), op)
    end
    assert.equal(c, fh.neg(a, { out = c }))
    assert.same({ { -1, -2, -3 }, { -4, -5, -6 } }, c:tolist())
    assert.equal(c, fh.mul(3, a, { out = c }))
    assert.same({ { 3, 6, 9 }, { 12, 15, 18 } }, c:tolist())
    -- a non-contiguous out
    local o = fh.zeros({ 3, 2 }, { dtype = "float64" })
    fh.add(a, 1, { out = o:transpose(1, 2) })
    assert.same({ { 2, 5 }, { 3, 6 }, { 4, 7 } }, o:tolist())
  end)

  it("reads a snapshot of operands that partially overlap out", function()
    -- out = b exactly, a overlaps shifted by one element
    local x = fh.arange(6, { dtype = "float64" })
    local xl = x:tolist()
    fh.add(x:narrow(1, 1, 5), x:narrow(1, 2, 5), { out = x:narrow(1, 2, 5) })
    local want = { xl[1] }
    for j = 1, 5 do want[j + 1] = xl[j] + xl[j + 1] end
    assert.same(want, x:tolist())
    -- a broadcast row of self
    local m = fh.arange(6, { dtype = "int64" }):view(2, 3)
    m:add_(m:select(1, 1))
    R.assert_same({ { 0LL, 2LL, 4LL }, { 3LL, 5LL, 7LL } }, m:tolist())
    -- a transpose of self
    local s = fh.arange(9, { dtype = "float64" }):view(3, 3)
    local sl = s:tolist()
    s:sub_(s:transpose(1, 2))
    for i = 1, 3 do
      for j = 1, 3 do assert.equal(sl[i][j] - sl[j][i], s:tolist()[i][j]) end
    end
    local n = fh.arange(4, { dtype = "float64" })
    fh.neg(n:narrow(1, 1, 3), { out = n:narrow(1, 2, 3) })
    assert.same({ 0, 0, -1, -2 }, n:tolist())
  end)

  it("leaves out unchanged when the operation fails", function()
    local out = fh.full({ 2, 3 }, 7, { dtype = "float64" })
    local a = fh.ones({ 2, 3 }, { dtype = "float64" })
    H.expect_error("TypeError", "add: dtype mismatch %(float64 and float32%)", fh.add, a, fh.ones({ 2, 3 }), { out = out })
    H.expect_error("ValueError", "do not broadcast", fh.add, a, fh.ones({ 2 }, { dtype = "float64" }), { out = out })
    H.expect_error("ValueError", "out has shape 3x2, expected 2x3", fh.add, a, a, { out = fh.zeros({ 3, 2 }, { dtype = "float64" }) })
    H.expect_error("TypeError", "out has dtype int32, expected float64", fh.sub, a, a, { out = fh.zeros({ 2, 3 }, { dtype = "int32" }) })
    H.expect_error("TypeError", "out has dtype", fh.neg, a, { out = fh.zeros({ 2, 3 }) })
    local iout = fh.full({ 2 }, 5, { dtype = "int32" })
    H.expect_error("TypeError", "integer division", fh.div, iout, iout, { out = iout })
    H.expect_error("ValueError", "out of range", fh.add, iout, 2 ^ 40, { out = iout })
    assert.same({ 5, 5 }, iout:tolist())
    assert.same({ { 7, 7, 7 }, { 7, 7, 7 } }, out:tolist())
  end)
end)

describe("arithmetic argument errors", function()
  local a = fh.ones({ 2, 3 }, { dtype = "float64" })

  it("names dtype, shape and argument problems", function()
    H.expect_error("TypeError", "add: dtype mismatch %(float64 and float32%)", function() return a + fh.ones({ 2, 3 }) end)
    H.expect_error("ValueError", "mul: shape mismatch: 2x3 and 2 do not broadcast %(dimension 2: 3 vs 2%)",
      function() return a * fh.ones({ 2 }, { dtype = "float64" }) end)
    H.expect_error("TypeError", "argument 2 expected a Tensor or a number, got string", fh.add, a, "x")
    H.expect_error("TypeError", "got nil", function() return a + nil end)
    H.expect_error("TypeError", "fh.add: expected a Tensor operand, got number and number", fh.add, 1, 2)
    H.expect_error("ValueError", "fh.add: unknown option 'outt' %(expected out%)", fh.add, a, a, { outt = a })
    H.expect_error("TypeError", "option 'out' expected a Tensor, got number", fh.add, a, a, { out = 5 })
    H.expect_error("TypeError", "expected an options table, got number", fh.add, a, a, 5)
    H.expect_error("TypeError", "Tensor:add_: self expected a Tensor", a.add_, 1, a)
    H.expect_error("TypeError", "fh.neg: argument 1 %(a%) expected a Tensor, got number", fh.neg, 3)
  end)

  H.gpu_it("refuses operands on different devices", function()
    local g = fh.ones({ 2, 3 }, { dtype = "float64", device = "cuda" })
    H.expect_error("ValueError", "tensors are on different devices %(cpu and cuda:%d%)", function() return a + g end)
  end)
end)
