-- RNS modular arithmetic on uint64 tensors [*, limb, n] with moduli up to
-- 2^62, checked against a double-and-add reference in LuaJIT 64-bit
-- integers (spec/support/tensor_ref.lua).
local fh = require "fhelium"
local H = require "spec.helpers"
local R = require "spec.support.tensor_ref"

local Q62 = 4611686018427387903ULL -- 2^62 - 1, the largest modulus
local EDGE_MODULI = {
  2ULL, 3ULL, 97ULL, 2147483647ULL, 4294967296ULL, 1099511627776ULL, -- 2^31-1, 2^32, 2^40
  2305843009213693951ULL, -- 2^61 - 1
  1152921504606584833ULL, -- a 60-bit NTT-friendly prime
  4611686018427387847ULL, -- a prime just below 2^62
  Q62,
}

local function rnd_moduli(count)
  local m = {}
  for i = 1, count do
    -- mix of sizes: 2..2^62-1
    local bits = math.random(2, 62)
    local q = R.rand_u64() % (2ULL ^ bits)
    if q < 2ULL then q = q + 2ULL end
    m[i] = q
  end
  return m
end

-- nested uint64 list [batch, limb, n] of values below each row's modulus,
-- with the edge values 0, 1, q-1 and q-2 planted at the start of every row
local function rnd_residues(batch, moduli, n)
  local out = {}
  for b = 1, batch do
    out[b] = {}
    for l, q in ipairs(moduli) do
      local row = {}
      for j = 1, n do row[j] = R.rand_below(q) end
      row[1], row[2], row[3] = 0ULL, 1ULL % q, q - 1ULL
      if n >= 4 then row[4] = q >= 2ULL and (q - 2ULL) or 0ULL end
      out[b][l] = row
    end
  end
  return out
end

local function reference(op, la, lb, moduli)
  local out = {}
  for b = 1, #la do
    out[b] = {}
    for l, q in ipairs(moduli) do
      local row = {}
      for j = 1, #la[b][l] do
        local x, y = la[b][l][j], lb and lb[b][l][j]
        if op == "add" then row[j] = R.addmod(x, y, q)
        elseif op == "sub" then row[j] = R.submod(x, y, q)
        elseif op == "mul" then row[j] = R.mulmod(x, y, q)
        else row[j] = R.negmod(x, q) end
      end
      out[b][l] = row
    end
  end
  return out
end

describe("fh.rns", function()
  local seed = H.seed("tensor_rns")

  it("the reference mulmod agrees with plain arithmetic on small values", function()
    for _, t in ipairs({ { 5ULL, 7ULL, 11ULL }, { 96ULL, 96ULL, 97ULL }, { 3ULL, 0ULL, 5ULL } }) do
      assert.is_true(R.mulmod(t[1], t[2], t[3]) == (t[1] * t[2]) % t[3])
    end
    -- (q-1)^2 = 1 mod q, with q - 1 close to 2^62
    assert.is_true(R.mulmod(Q62 - 1ULL, Q62 - 1ULL, Q62) == 1ULL)
  end)

  for _, op in ipairs({ "add", "sub", "mul", "neg" }) do
    it(op .. " matches the ULL reference on random inputs and edge moduli", function()
      math.randomseed(seed)
      local moduli = {}
      for i, q in ipairs(EDGE_MODULI) do moduli[i] = q end
      for _, q in ipairs(rnd_moduli(6)) do moduli[#moduli + 1] = q end
      local la = rnd_residues(2, moduli, 33)
      local lb = rnd_residues(2, moduli, 33)
      local a, b = fh.tensor(la), fh.tensor(lb)
      assert.equal("uint64", a.dtype)
      local want = reference(op, la, op ~= "neg" and lb or nil, moduli)
      local got = op == "neg" and fh.rns.neg(a, moduli) or fh.rns[op](a, b, moduli)
      assert.equal("uint64", got.dtype)
      assert.same(a.shape, got.shape)
      R.assert_same(want, got:tolist(), op)
    end)
  end

  it("mul is exact for unreduced operands anywhere in 64 bits", function()
    math.randomseed(seed + 1)
    local moduli = { Q62, 1152921504606584833ULL, 12289ULL }
    local la, lb = {}, {}
    for l = 1, 3 do
      la[l], lb[l] = {}, {}
      for j = 1, 40 do la[l][j], lb[l][j] = R.rand_u64(), R.rand_u64() end
      la[l][1], lb[l][1] = 18446744073709551615ULL, 18446744073709551615ULL
    end
    local got = fh.rns.mul(fh.tensor(la), fh.tensor(lb), moduli):tolist()
    for l = 1, 3 do
      for j = 1, 40 do
        assert.is_true(got[l][j] == R.mulmod(la[l][j], lb[l][j], moduli[l]),
          ("limb %d element %d: %s"):format(l, j, tostring(got[l][j])))
      end
    end
  end)

  it("handles the edges 0 and q-1 of add, sub and neg", function()
    local q = Q62
    local a = fh.tensor({ { 0ULL, q - 1ULL, q - 1ULL, 0ULL } })
    local b = fh.tensor({ { 0ULL, q - 1ULL, 1ULL, q - 1ULL } })
    local m = { q }
    R.assert_same({ { 0ULL, q - 2ULL, 0ULL, q - 1ULL } }, fh.rns.add(a, b, m):tolist())
    R.assert_same({ { 0ULL, 0ULL, q - 2ULL, 1ULL } }, fh.rns.sub(a, b, m):tolist())
    R.assert_same({ { 0ULL, 1ULL, 1ULL, 0ULL } }, fh.rns.neg(a, m):tolist())
    R.assert_same({ { 0ULL, 1ULL, q - 1ULL, 0ULL } }, fh.rns.mul(a, b, m):tolist())
  end)

  it("takes moduli as Lua numbers, ULL cdata or a uint64 tensor", function()
    local la = { { 5ULL, 6ULL }, { 100ULL, 200ULL } }
    local a = fh.tensor(la)
    local want = { { (5ULL * 5ULL) % 7ULL, (6ULL * 6ULL) % 7ULL }, { 10000ULL % 257ULL, 40000ULL % 257ULL } }
    R.assert_same(want, fh.rns.mul(a, a, { 7, 257 }):tolist())
    R.assert_same(want, fh.rns.mul(a, a, { 7ULL, 257LL }):tolist())
    R.assert_same(want, fh.rns.mul(a, a, fh.tensor({ 7ULL, 257ULL })):tolist())
    -- 2^53 is still exact as a Lua number
    local big = fh.tensor({ { 9007199254740991ULL } })
    R.assert_same({ { 9007199254740991ULL } }, fh.rns.add(big, fh.zeros({ 1, 1 }, { dtype = "uint64" }), { 2 ^ 53 }):tolist())
  end)

  it("reduces each limb row of batched and non-contiguous operands by its own modulus", function()
    math.randomseed(seed + 2)
    local moduli = { 65537ULL, 2305843009213693951ULL, 12289ULL }
    local la = rnd_residues(4, moduli, 5) -- [4, 3, 5]
    local lb = rnd_residues(4, moduli, 5)
    local want = reference("mul", la, lb, moduli)
    local a, b = fh.tensor(la), fh.tensor(lb)
    -- the same values laid out [n, limb, batch] and permuted back: every stride differs
    local ap = a:permute(3, 2, 1):contiguous():permute(3, 2, 1)
    assert.same({ 1, 4, 12 }, ap:stride())
    R.assert_same(want, fh.rns.mul(ap, b, moduli):tolist())
    -- a narrowed view of the last dimension
    local wn = {}
    for i = 1, 4 do
      wn[i] = {}
      for l = 1, 3 do wn[i][l] = { want[i][l][2], want[i][l][3] } end
    end
    R.assert_same(wn, fh.rns.mul(a:narrow(3, 2, 2), b:narrow(3, 2, 2), moduli):tolist())
    -- n = 1: the limb dimension is the last non-trivial one
    local a1, b1 = a:narrow(3, 4, 1), b:narrow(3, 4, 1)
    local w1 = {}
    for i = 1, 4 do
      w1[i] = {}
      for l = 1, 3 do w1[i][l] = { want[i][l][4] } end
    end
    R.assert_same(w1, fh.rns.mul(a1, b1, moduli):tolist())
    -- 2-d [limb, n] given as the transpose of [n, limb]
    local t = fh.tensor({ { 10ULL, 20ULL }, { 30ULL, 40ULL }, { 50ULL, 60ULL } }):transpose(1, 2) -- [2, 3]
    R.assert_same({ { 100ULL % 7ULL, 900ULL % 7ULL, 2500ULL % 7ULL }, { 400ULL % 11ULL, 1600ULL % 11ULL, 3600ULL % 11ULL } },
      fh.rns.mul(t, t, { 7, 11 }):tolist())
  end)

  it("writes out= (also in place) and returns it", function()
    local a = fh.tensor({ { 3ULL, 4ULL }, { 5ULL, 6ULL } })
    local out = fh.zeros({ 2, 2 }, { dtype = "uint64" })
    assert.equal(out, fh.rns.mul(a, a, { 5, 7 }, { out = out }))
    R.assert_same({ { 4ULL, 1ULL }, { 4ULL, 1ULL } }, out:tolist())
    assert.equal(a, fh.rns.neg(a, { 5, 7 }, { out = a }))
    R.assert_same({ { 2ULL, 1ULL }, { 2ULL, 1ULL } }, a:tolist())
    -- out overlapping an operand shifted by one element reads a snapshot
    local x = fh.tensor({ { 1ULL, 2ULL, 3ULL, 4ULL } })
    fh.rns.add(x:narrow(2, 1, 3), x:narrow(2, 2, 3), { 100 }, { out = x:narrow(2, 2, 3) })
    R.assert_same({ { 1ULL, 3ULL, 5ULL, 7ULL } }, x:tolist())
  end)

  it("works on empty tensors", function()
    local e = fh.zeros({ 2, 0 }, { dtype = "uint64" })
    assert.same({ 2, 0 }, fh.rns.mul(e, e, { 3, 5 }).shape)
    assert.same({ 0, 2, 4 }, fh.rns.add(fh.zeros({ 0, 2, 4 }, { dtype = "uint64" }), fh.zeros({ 0, 2, 4 }, { dtype = "uint64" }), { 3, 5 }).shape)
  end)

  describe("errors", function()
    local a = fh.zeros({ 2, 3 }, { dtype = "uint64" })

    it("requires one modulus per limb row", function()
      H.expect_error("ValueError", "rns.mul: 1 moduli given for 2 limb rows", fh.rns.mul, a, a, { 7 })
      H.expect_error("ValueError", "3 moduli given for 2 limb rows", fh.rns.add, a, a, { 7, 11, 13 })
      H.expect_error("ValueError", "0 moduli given", fh.rns.neg, a, {})
      H.expect_error("ValueError", "at most 64 moduli", fh.rns.neg, a, fh.ones({ 65 }, { dtype = "uint64" }))
      local many = {}
      for i = 1, 65 do many[i] = 7 end
      H.expect_error("ValueError", "fh.rns.add: at most 64 moduli are supported, got 65", fh.rns.add, a, a, many)
      H.expect_error("TypeError", "fh.rns.add: moduli tensor must be a 1%-dimensional uint64 tensor", fh.rns.add, a, a,
        fh.ones({ 2, 2 }, { dtype = "uint64" }))
    end)

    it("requires 2 <= q < 2^62", function()
      H.expect_error("ValueError", "modulus 2 is 4611686018427387904; moduli must satisfy 2 <= q < 2%^62",
        fh.rns.mul, a, a, { 7, 4611686018427387904ULL })
      H.expect_error("ValueError", "modulus 1 is 1; moduli must satisfy 2 <= q", fh.rns.mul, a, a, { 1, 7 })
      H.expect_error("ValueError", "modulus 2 is 0", fh.rns.sub, a, a, { 7, 0 })
      H.expect_error("ValueError", "modulus 1 is 18446744073709551615", fh.rns.neg, a, fh.tensor({ 18446744073709551615ULL, 3ULL }))
    end)

    it("rejects moduli that are not exact integers", function()
      H.expect_error("ValueError", { "moduli%[2%]", "above 2%^53", "ULL" }, fh.rns.mul, a, a, { 7, 2 ^ 53 + 2 })
      H.expect_error("ValueError", { "moduli%[2%]", "above 2%^53" }, fh.rns.mul, a, a, { 7, 2 ^ 62 })
      H.expect_error("ValueError", { "moduli%[1%]", "5.5 is not an integer" }, fh.rns.mul, a, a, { 5.5, 7 })
      H.expect_error("ValueError", { "moduli%[2%]", "%-5 is out of range for uint64" }, fh.rns.mul, a, a, { 7, -5 })
      H.expect_error("ValueError", { "moduli%[2%]", "%-5 is out of range" }, fh.rns.mul, a, a, { 7, -5LL })
      H.expect_error("TypeError", "moduli%[2%] expected an integer, got string", fh.rns.mul, a, a, { 7, "11" })
      H.expect_error("TypeError", "moduli%[1%] expected an integer, got boolean", fh.rns.mul, a, a, { true, 3 })
      H.expect_error("TypeError", "argument 3 %(moduli%) expected a table of moduli or a uint64 tensor, got number",
        fh.rns.mul, a, a, 97)
      H.expect_error("TypeError", "argument 2 %(moduli%)", fh.rns.neg, a, nil)
      H.expect_error("TypeError", "moduli tensor must be a 1%-dimensional uint64 tensor", fh.rns.mul, a, a,
        fh.tensor({ 7, 11 }))
      H.expect_error("TypeError", "moduli tensor must be a 1%-dimensional uint64 tensor", fh.rns.mul, a, a,
        fh.tensor({ { 7ULL, 11ULL } }))
    end)

    it("requires uint64 tensors of the same shape with a limb dimension", function()
      local i64 = fh.zeros({ 2, 3 }, { dtype = "int64" })
      H.expect_error("TypeError", "rns.add: expected uint64 tensors, got int64", fh.rns.add, i64, i64, { 3, 5 })
      H.expect_error("TypeError", "rns.mul: dtype mismatch %(uint64 and int64%)", fh.rns.mul, a, i64, { 3, 5 })
      H.expect_error("ValueError", "rns.mul: shape mismatch: 2x3 vs 2x2", fh.rns.mul, a, a:narrow(2, 1, 2), { 3, 5 })
      H.expect_error("ValueError", "shape mismatch: 2x3 vs 3", fh.rns.sub, a, fh.zeros({ 3 }, { dtype = "uint64" }), { 3, 5 })
      H.expect_error("ValueError", "expected a tensor of shape %[%*, limb, n%], got 1 dimension",
        fh.rns.mul, fh.zeros({ 4 }, { dtype = "uint64" }), fh.zeros({ 4 }, { dtype = "uint64" }), { 3 })
      H.expect_error("TypeError", "fh.rns.mul: argument 2 %(b%) expected a Tensor, got table", fh.rns.mul, a, { 1 }, { 3, 5 })
      H.expect_error("TypeError", "out has dtype int64, expected uint64", fh.rns.mul, a, a, { 3, 5 }, { out = i64 })
      H.expect_error("ValueError", "unknown option 'output'", fh.rns.mul, a, a, { 3, 5 }, { output = a })
    end)

    it("leaves out unchanged on failure", function()
      local out = fh.full({ 2, 2 }, 3ULL, { dtype = "uint64" })
      H.expect_error("ValueError", "modulus 2 is 1", fh.rns.mul, out, out, { 5, 1 }, { out = out })
      H.expect_error("ValueError", "moduli given", fh.rns.neg, out, { 5 }, { out = out })
      R.assert_same({ { 3ULL, 3ULL }, { 3ULL, 3ULL } }, out:tolist())
    end)
  end)
end)
